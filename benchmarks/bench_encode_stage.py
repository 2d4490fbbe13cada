"""The encode stage end to end beside the encoder alone: ``lmprep run encode`` on a corpus of 100 MB or more.

The corpus is ``bench_native.py``'s three (english, multilingual, code: built once from what is installed),
``--copies`` times over, each document prefixed with its copy's number so that prepare (``steps: []``) keeps
every one, as JSON Lines. With ``--scale SIZE`` it is ``build_scale_corpus.py``'s corpus of that size instead
(man pages, documentation, kernel and GCC sources in its three formats, no line repeated: the encoder's chunk
cache meets new text throughout, as it does on a real corpus). The project's tokenizer is frozen
(``tokenizer.path``): a byte tokenizer of ``--vocab-size`` IDs trained once on the first 2 MB of each corpus (6 MB
of the scale corpus). The project is prepared once, under benchmarks/.data. Then, alternating, ``--repeats``
times:

- ``encoder``: in a fresh process, every prepared document of both splits read into memory and the native
  encoder built (untimed, as the stage builds it before its workers fork), then
  ``Tokenizer.encode_batch_flat`` over each part's documents, one thread, from a cold cache: the CPU
  seconds of those calls alone (its peak RSS holds the whole corpus as Python strings);
- ``lmprep run encode --force --set encode.workers=N``, N = 1 and 2: the CPU seconds of the command and
  every process it waited for (``wait4``), and the largest peak RSS among them;
- ``start-up``: ``lmprep run encode`` with nothing stale, what any run of the command costs before it
  encodes.

The goal is a stage at 0.8 or more of the encoder: MB per CPU second of the stage over the encoder's
(``× encoder (CPU)``, best against best; for N workers the encoder's MB/s × N is the same ratio); the wall-clock
ratio is shown too, though a loaded machine blurs it. Beside it, the same ratio round by round (each stage run
against the encoder run just before it), its median and range: this project's machines drift by more than the
margin within minutes, which a best-of hides, so the verdict (``0.8×``) goes by that median. What the stage
spends beyond the encoder is split into start-up and the rest (reading the parts, the origins, the special IDs,
writing and hashing the shards, docs/performance.md). Best of the runs and the median.

    python benchmarks/bench_encode_stage.py [--copies 3] [--megabytes 20] [--corpus english,...] [--vocab-size 8192]
        [--repeats 5] [--phases] [--smoke]
    python benchmarks/build_scale_corpus.py --install && python benchmarks/bench_encode_stage.py --scale quarter

``--phases``: then, ``--repeats`` times in a fresh process, every part's task in turn as one worker runs them
(after the parts are hashed, untimed, as the runner hashes a stage's inputs before it runs, so that a task takes
the digest its hash cache vouches for), with the CPU seconds inside each of its steps (:data:`PHASES`) summed:
where a worker's time beyond the encoder goes.

``--smoke``: two copies of 0.05 MB of the ``code`` corpus, 300 IDs, each run once, in a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import bench_native
import build_scale_corpus
import results

from pipeline.data import documents

LMPREP = str(Path(sys.executable).with_name("lmprep"))
TRAINING_MB = 2.0  # of each corpus, for the tokenizer
GOAL = 0.8
CONFIG = """\
data:
  sources:
{sources}
prepare:
  steps: []
  output_dir: prepared
tokenizer:
  path: {tokenizer}
  output: tokenizer/tokenizer.json
encode:
  output_dir: shards
output_root: .
state_dir: .lmprep
run_cache_dir: null
"""


def build_project(work: str, corpora: list[str], megabytes: float, copies: int, vocab_size: int,
                  scale: str | None) -> None:
    """The project under ``work`` (of the copies of ``corpora``, or of the ``scale`` corpus), prepared and encoded
    once."""
    work = Path(work)
    config = work / "config.yaml"
    if (work / "shards").exists():
        return
    work.mkdir(parents=True, exist_ok=True)
    if scale:
        sources, training = scale_corpus(scale)
    else:
        sources, training = copied_corpora(work, corpora, megabytes, copies)
    tokenizer = bench_native.tokenizer_file(scale or "mixed", training, vocab_size)
    config.write_text(CONFIG.format(sources=sources, tokenizer=tokenizer), encoding="utf-8")
    subprocess.run([LMPREP, "run", "encode", "--config", str(config)], cwd=work, check=True, capture_output=True)


def copied_corpora(work: Path, corpora: list[str], megabytes: float, copies: int) -> tuple[str, list[str]]:
    """The sources of ``copies`` copies of each of ``corpora``, written under ``work``, and the tokenizer's text."""
    (work / "raw").mkdir(parents=True, exist_ok=True)
    training = []
    for name in corpora:
        texts = json.loads(bench_native.corpus_file(name, megabytes).read_text(encoding="utf-8"))
        training += bench_native.unique_lines(texts, min(TRAINING_MB, megabytes))
        for copy in range(copies):
            with open(work / "raw" / f"{name}-{copy}.jsonl", "w", encoding="utf-8") as out:
                out.writelines(json.dumps({"text": f"{copy} {text}"}) + "\n" for text in texts)
    return "    - {glob: raw/*.jsonl, field: text}", training


def scale_corpus(size: str) -> tuple[str, list[str]]:
    """The sources of the scale corpus of ``size`` where it lies, and the tokenizer's text: its first documents."""
    directory = build_scale_corpus.DATA / size
    if not directory.is_dir():
        raise SystemExit(f"{directory} is missing: run python benchmarks/build_scale_corpus.py first")
    training, size_bytes = [], 0
    for text in build_scale_corpus.corpus_texts(directory):
        training.append(text)
        size_bytes += len(text.encode())
        if size_bytes >= 3 * TRAINING_MB * 1e6:
            break
    return build_scale_corpus.source_lines(size, str(directory.resolve())), training


LAUNCHER = """
import json, os, sys, time
start = time.perf_counter()
pid = os.fork()
if pid == 0:
    os.dup2(2, 1)
    os.execv(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
print(json.dumps([os.waitstatus_to_exitcode(status), time.perf_counter() - start,
                  usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024]))
"""


def measured(command: list[str], cwd: Path) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds and peak RSS (MB) of one run of ``command``, its waited-for children included.

    A small launcher starts it: a process's peak RSS starts from its parent's across ``exec``, and this
    one's (numpy, pyarrow, the corpus) would hide a small command's.
    """
    done = subprocess.run([sys.executable, "-I", "-S", "-c", LAUNCHER, *command], cwd=cwd, capture_output=True,
                          text=True)
    status, wall, cpu, rss = json.loads(done.stdout)
    if status != 0:
        raise SystemExit(f"{' '.join(command)} failed: {done.stderr[-2000:]}")
    return wall, cpu, rss


def encoder_alone(work: str) -> None:
    """The encoder alone, in this fresh process: prints wall and CPU seconds and peak RSS as JSON."""
    from pipeline.tokenizer import Tokenizer

    prepared, tokenizer = Path(work) / "prepared", Path(work) / "tokenizer" / "tokenizer.json"
    parts = [list(documents.iter_documents(prepared / part.file))
             for split in documents.SPLITS for part in documents.read_parts(prepared, split)]
    encoder = Tokenizer.load(tokenizer)
    encoder.build_encoder()  # as the stage does before its workers fork: the timing is the encoding alone
    start, start_cpu = time.perf_counter(), time.process_time()
    for texts in parts:
        encoder.encode_batch_flat(texts)
    wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    print(json.dumps({"wall": wall, "cpu": cpu, "rss": bench_native.peak_rss_mb()}))


def encoder_run(work: Path) -> tuple[float, float, float]:
    measurement = json.loads(child("encoder", str(work)).strip().splitlines()[-1])
    return measurement["wall"], measurement["cpu"], measurement["rss"]


PHASES = {  # (module, function): what it is, timed by a wrapper in task_phases
    ("pipeline.engine.hashing", "read_with_sha256"): "reading the part (its sha256 the runner's cache vouches for)",
    ("pipeline.shards.corpus", "encode_task"): "decoding the texts",  # less the two below, which it calls
    ("pipeline.tokenizer.core", "Tokenizer.encode_batch_flat"): "the encoder",
    ("pipeline.shards.corpus", "add_special_ids"): "EOS, the IDs' dtype",
    ("pipeline.shards.format", "_write_shard"): "writing the shards (sha256, fsync, rename)",
    ("pipeline.shards.resume", "save_record"): "the completion records",
}


def task_phases(work: str) -> None:
    """Every part's task (``corpus.encode_part``) in turn in this process, as a worker runs them, with the CPU
    seconds spent inside each of ``PHASES`` summed: prints them and the task's total as JSON."""
    import importlib
    import shutil
    import tempfile

    from pipeline.engine import hashing
    from pipeline.shards import corpus, manifest, resume

    spent = dict.fromkeys(PHASES.values(), 0.0)
    for (module, name), label in PHASES.items():
        owner = importlib.import_module(module)
        *path, attribute = name.split(".")
        for part in path:
            owner = getattr(owner, part)
        setattr(owner, attribute, _timed(getattr(owner, attribute), spent, label))
    work = Path(work)
    tokenizer_path = str((work / "tokenizer" / "tokenizer.json").resolve())
    tokenizer = corpus.share_tokenizer(tokenizer_path)
    eos_id = tokenizer.special_tokens[bench_native.EOT]
    scratch = Path(tempfile.mkdtemp(dir=work))
    partial = resume.PartialParts(scratch / "shards")
    cache = hashing.HashCache(scratch / "hashes.json")
    cache.tree_hash(work / "prepared")  # as the runner hashes the stage's inputs before it runs (untimed)
    jobs = []
    for split in documents.SPLITS:
        parts = documents.read_parts(work / "prepared", split)
        stamp = manifest.ShardStamp(split=split, tokenizer_fingerprint=tokenizer.fingerprint,
                                    vocab_size=tokenizer.vocab_size, special_ids={"bos": None, "eos": eos_id},
                                    prepared_fingerprint=documents.split_fingerprint(parts))
        with hashing.vouching(cache):
            jobs += [corpus.PartJob(work / "prepared" / part.file, partial.scratch, stamp, f"{split}-{part.index:05d}",
                                    part.sha256, tokenizer_path, 1_000_000, None, eos_id, corpus.TASK_BYTES,
                                    256 * 10**6, 0, hashing.vouched_stamp(work / "prepared" / part.file, part.sha256))
                     for part in parts if part.documents]
    start = time.process_time()
    for job in jobs:
        corpus.encode_part(job)
    spent["total"] = time.process_time() - start
    shutil.rmtree(scratch)
    spent["decoding the texts"] -= spent["the encoder"] + spent["EOS, the IDs' dtype"]
    phases = sum(seconds for label, seconds in spent.items() if label != "total")
    spent["the rest: reading the batches, origins, the writer's checks"] = spent["total"] - phases
    print(json.dumps(spent))


def _timed(function, spent: dict[str, float], label: str):
    def timed(*args, **kwargs):
        start = time.process_time()
        try:
            return function(*args, **kwargs)
        finally:
            spent[label] += time.process_time() - start
    return timed


CHILDREN = {"build": build_project, "encoder": encoder_alone, "phases": task_phases}


def child(name: str, *arguments) -> str:
    """What ``CHILDREN[name](*arguments)`` prints, run in a fresh process (one that reads its own peak RSS)."""
    done = subprocess.run([sys.executable, __file__, "--child", json.dumps([name, *arguments])],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{name} failed: {done.stderr[-2000:]}")
    return done.stdout


def prepared_megabytes(work: Path) -> float:
    return sum(part.bytes for split in documents.SPLITS
               for part in documents.read_parts(work / "prepared", split)) / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=3)
    parser.add_argument("--megabytes", type=float, default=20.0, help="of each of bench_native's corpora")
    parser.add_argument("--corpus", default=",".join(bench_native.CORPORA))
    parser.add_argument("--vocab-size", type=int, default=8192)
    parser.add_argument("--scale", choices=sorted(build_scale_corpus.SIZES),
                        help="build_scale_corpus.py's corpus of that size instead of the copies")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--phases", action="store_true", help="then where a worker's CPU goes, phase by phase")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    results.add_arguments(parser)
    args = parser.parse_args()
    if args.child:
        name, *arguments = json.loads(args.child)
        CHILDREN[name](*arguments)
        return
    if args.smoke:
        args.copies, args.megabytes, args.vocab_size, args.repeats, args.corpus = 2, 0.05, 300, 1, "code"
    corpora = args.corpus.split(",")
    name = (f"scale-{args.scale}" if args.scale else f"{'-'.join(corpora)}-{args.megabytes:g}MB-{args.copies}x")
    work = results.data_dir() / f"encode-stage-{name}-{args.vocab_size}"
    config = work / "config.yaml"
    child("build", str(work), corpora, args.megabytes, args.copies, args.vocab_size, args.scale)
    what = (f"build_scale_corpus.py's {args.scale} corpus" if args.scale
            else f"{args.copies} copies of bench_native's {', '.join(corpora)}")
    megabytes = prepared_megabytes(work)
    parts = sum(len(documents.read_parts(work / "prepared", split)) for split in documents.SPLITS)
    print(f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f} at the start")
    print(f"corpus: {megabytes:.1f} MB prepared in {parts} parts ({what}); {args.vocab_size:,} IDs; "
          f"{args.repeats} runs each, alternating")
    encode = [LMPREP, "run", "encode", "--config", str(config)]
    runs = {"encoder": lambda: encoder_run(work),
            **{f"stage, {n} worker{'s' * (n > 1)}": (lambda n=n: measured([*encode, "--force", "--set",
                                                                          f"encode.workers={n}"], work))
               for n in (1, 2)},
            "start-up": lambda: measured(encode, work)}
    seen: dict[str, list[tuple[float, float, float]]] = {label: [] for label in runs}
    for _ in range(args.repeats):
        for label, run in runs.items():
            seen[label].append(run())
    best = {label: (min(r[0] for r in rows), min(r[1] for r in rows)) for label, rows in seen.items()}
    encoder_wall, encoder_cpu = best["encoder"]
    startup_cpu = best["start-up"][1]
    print(f"| run | MB/s | MB per CPU s | CPU s best (median) | × encoder (CPU) "
          f"| × encoder (CPU) per round: median (min–max) | × encoder (wall) "
          f"| CPU s beyond the encoder: start-up + rest | peak RSS MB | {GOAL}× (per round) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for label, rows in seen.items():
        wall, cpu = best[label]
        median = statistics.median(r[1] for r in rows)
        rss = max(r[2] for r in rows)
        if label == "start-up":
            print(f"| {label} | | | {cpu:.2f} ({median:.2f}) | | | | | {rss:.0f} | |")
            continue
        workers = 2 if "2" in label else 1
        ratio, wall_ratio = encoder_cpu / cpu, encoder_wall / (wall * workers)
        beyond = "" if label == "encoder" else f"{cpu - encoder_cpu:.2f}: {startup_cpu:.2f} + " \
                                               f"{cpu - encoder_cpu - startup_cpu:.2f}"
        per_round = sorted(encoder[1] / run[1] for encoder, run in zip(seen["encoder"], rows))
        paired = f"{statistics.median(per_round):.2f} ({per_round[0]:.2f}–{per_round[-1]:.2f})"
        verdict = "" if label == "encoder" else ("yes" if statistics.median(per_round) >= GOAL else "no")
        print(f"| {label} | {megabytes / wall:.1f} | {megabytes / cpu:.1f} | {cpu:.2f} ({median:.2f}) "
              f"| {ratio:.2f} | {'' if label == 'encoder' else paired} | {wall_ratio:.2f} | {beyond} | {rss:.0f} "
              f"| {verdict} |", flush=True)
    if args.phases:
        print_phases(work, args.repeats)
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


def print_phases(work: Path, repeats: int) -> None:
    """Where one worker's CPU goes: :func:`task_phases`, ``repeats`` times, each phase's best and median."""
    runs = [json.loads(child("phases", str(work)).strip().splitlines()[-1]) for _ in range(repeats)]
    print("\nOne worker's tasks, every part in turn in one process (CPU s, best (median) of the runs):\n")
    print("| where | CPU s |")
    print("| --- | --- |")
    for label in runs[0]:
        values = [run[label] for run in runs]
        print(f"| {label} | {min(values):.3f} ({statistics.median(values):.3f}) |")


def section_name(argv: list[str]) -> str:
    """The results section: a ``--scale`` run has one of its own per size, beside the copies' section."""
    scale = next((argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "--scale"), None)
    return f"bench_encode_stage, --scale {scale}" if scale and "--smoke" not in argv else "bench_encode_stage"


if __name__ == "__main__":
    results.run(section_name(sys.argv[1:]), main)
