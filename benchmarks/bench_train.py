"""Training benchmark: lmprep's BPE trainer (both backends) against rustbpe and HF tokenizers, side by side.

Each trainer runs in a fresh subprocess on the same corpus, the same GPT-4 split pattern, the same
vocabulary size and the same number of threads (lmprep's Python backend: worker processes); one
table per corpus, vocabulary size and thread count. The figures: wall time of training alone (reading
the corpus file is excluded for everyone), CPU time of the process and its workers (steadier than wall
time on a busy machine), peak RSS of the main process (its ``VmHWM``: ``ru_maxrss`` of a child started by
fork and exec starts at its parent's peak) and of the largest worker process (lmprep's
Python backend counts chunks in forked workers, whose resident size includes the pages they share
with the main one; the native backend and the Rust trainers use threads, so their figure is the main
one). For lmprep, the two phases are timed apart: counting the chunks, and the merge loop (with the
layout it starts from). lmprep's merges on both backends must be identical to rustbpe's: the
benchmark stops with an error if they are not.

``stage`` is the tokenizer stage as a user runs it: ``lmprep run tokenizer --force`` in a fresh process, on a
project whose prepare output holds the corpus (prepared once, untimed, by ``lmprep run prepare`` with no steps,
no normalisation and no validation split), with ``tokenizer.workers`` local worker processes counting the
prepared parts in partition tasks, then the merges, then ``tokenizer.json`` and its companions written. Its
figures are the whole process tree's: wall and CPU from start to exit (Python's start and the imports
included; bytecode cached, as an installed lmprep has it), peak RSS (``VmHWM``, sampled) of the driver and of
the largest worker; its count column is the seconds its tasks took (from the stage's log), the time inside
the runner and the stage's phases (its log's ``phase:`` lines: counting, merging, writing; wall, and the
driver's CPU) are on the line below the table. Its merges (``tokenizer.json`` read back, no special tokens) must
be rustbpe's too. Every trainer reads the corpus as prepare keeps it (``clean_text`` without normalisation:
CR/LF to LF, control characters dropped), so that all of them learn from the same texts.

Corpora: ``english``, ``multilingual`` and ``code`` are built as ``bench_native.py`` builds them (from
installed packages, every repeated line dropped), up to ``--megabytes`` each, and kept in
``benchmarks/.data``; ``full`` and ``unique-lines`` are ``build_corpus.py``'s; or the path of a JSON
Lines file (one ``{"text": ...}`` per document).

    python benchmarks/bench_train.py [--corpus english,multilingual,code] [--megabytes 20] \\
        [--vocab-size 32768,65536] [--threads 1,2] [--repeats 1] [--trainers native,stage,rustbpe,hf]

``--trainers python`` adds lmprep's Python path, ``reference.train``, which recounts every pair at every
merge: only for small corpora and vocabularies (docs/native.md says how slow it is).

``--smoke``: 0.05 MB of the ``code`` corpus, 300 IDs, one thread, every trainer once.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

import bench_native
import proc
import results
from build_corpus import CORPORA as BUILT_CORPORA

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

DATA = results.data_dir()
GPT4_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+"""
)
TRAINERS = ("native", "python", "stage", "rustbpe", "hf")  # native, python: lmprep on that backend
LMPREP = ("native", "python", "stage")
STAGE_CONFIG = """\
data:
  sources: [{{glob: {corpus}, field: text}}]
prepare: {{normalize: none, steps: [], val_fraction: 0.0, output_dir: out/prepared}}
tokenizer: {{pattern: gpt4, special_tokens: [], output: out/tokenizer/tokenizer.json}}
encode: {{eos_token: null, output_dir: out/shards}}
train: {{output_dir: out/checkpoints}}
output_root: .
state_dir: state
run_cache_dir: null
"""
TASK_LINE = re.compile(r"^task .*: done on .* in ([\d.]+) s", flags=re.MULTILINE)
FINISHED_LINE = re.compile(r"^finished after ([\d.]+) s", flags=re.MULTILINE)
PHASE_LINE = re.compile(r"^phase: (\w+) .* in ([\d.]+) s \(([\d.]+) s CPU in the driver\)$", flags=re.MULTILINE)


def load_texts(path: Path) -> list[str]:
    """The corpus's documents as prepare keeps them with ``normalize: none`` (what the stage trains on)."""
    from pipeline.data.cleaning import clean_text

    with open(path, encoding="utf-8") as lines:
        texts = (clean_text(json.loads(line)["text"], normalize="none") for line in lines)
        return [text for text in texts if text.strip()]


def corpus_file(name: str, megabytes: float) -> Path:
    """The JSON Lines file of a corpus, built first for the ``bench_native`` corpora."""
    if name in BUILT_CORPORA:
        return BUILT_CORPORA[name]
    if name not in bench_native.CORPORA:
        return Path(name)
    path = DATA / f"train-{name}-{megabytes:g}mb.jsonl"
    if not path.exists():
        DATA.mkdir(parents=True, exist_ok=True)
        texts = bench_native.unique_lines(bench_native.CORPORA[name](), megabytes)
        temporary = path.with_suffix(".partial")
        temporary.write_text("".join(json.dumps({"text": text}) + "\n" for text in texts), encoding="utf-8")
        temporary.replace(path)
    return path


def train_lmprep(texts: list[str], vocab_size: int, threads: int, phases: dict) -> list[bytes]:
    """What ``train_merges`` runs for the byte kind, its two phases timed apart: counting the chunks, then the
    merge loop with the layout it starts from (native: ``pop_byte_layout``; Python: the dict of counts)."""
    from pipeline.tokenizer import backend, trainer
    from pipeline.tokenizer._train_count import count_chunks, native_counter

    num_merges = vocab_size - 256
    start, start_cpu = time.perf_counter(), cpu_seconds()
    if backend.native is not None:
        counter = native_counter(texts, pattern=GPT4_PATTERN, workers=threads)
    else:
        counts = count_chunks(texts, pattern=GPT4_PATTERN, workers=threads)
        phases["distinct"] = len(counts)
    phases["count"], phases["count_cpu"] = time.perf_counter() - start, cpu_seconds() - start_cpu
    start, start_cpu = time.perf_counter(), cpu_seconds()
    if backend.native is not None:
        symbols, counts = counter.pop_byte_layout()
        phases["distinct"] = len(counts) // 8  # chunks of two bytes or more
        loop = trainer._merge_loop(symbols, counts, first_id=256, min_frequency=2, forbidden_id=None)
        del symbols, counts
        merges, _stop = loop(num_merges, progress=False)
    else:
        merges = trainer.merges_from_counts(counts, kind="byte", num_merges=num_merges).merges
    phases["merge"], phases["merge_cpu"] = time.perf_counter() - start, cpu_seconds() - start_cpu
    vocab = [bytes([i]) for i in range(256)]
    for left, right in merges:
        vocab.append(vocab[left] + vocab[right])
    return vocab


def train_rustbpe(texts: list[str], vocab_size: int, threads: int, phases: dict) -> list[bytes]:
    import rustbpe

    tokenizer = rustbpe.Tokenizer()
    tokenizer.train_from_iterator(iter(texts), vocab_size, pattern=GPT4_PATTERN)
    return [token for token, _rank in sorted(tokenizer.get_mergeable_ranks(), key=lambda item: item[1])]


def train_hf(texts: list[str], vocab_size: int, threads: int, phases: dict) -> list[bytes]:
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(GPT4_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return []  # its merges differ (its own tie-break): not compared


def run_one(name: str, corpus: Path, vocab_size: int, threads: int) -> None:
    """Child mode: train once, print one JSON line of figures, save the vocabulary for the parity check."""
    texts = load_texts(corpus)
    train = {"native": train_lmprep, "python": train_lmprep, "rustbpe": train_rustbpe, "hf": train_hf}[name]
    if name in LMPREP:
        from pipeline.tokenizer import backend

        assert backend.name() == name, f"asked for the {name} backend, got {backend.name()}"
    phases: dict = {}
    start, start_cpu = time.perf_counter(), cpu_seconds()
    vocab = train(texts, vocab_size, threads, phases)
    wall, cpu = time.perf_counter() - start, cpu_seconds() - start_cpu
    if vocab:
        vocab_file(corpus, name, vocab_size).write_text(json.dumps([token.hex() for token in vocab]))
    print(json.dumps({
        "wall": wall,
        "cpu": cpu,
        "rss_main_mb": proc.peak_rss_bytes(os.getpid()) / 2**20,  # not ru_maxrss: that starts at the parent's peak
        "rss_worker_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
        **phases,
    }))


def cpu_seconds() -> float:
    """CPU time of this process (all its threads) and of its finished worker processes."""
    usages = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return sum(usage.ru_utime + usage.ru_stime for usage in usages)


@functools.cache
def stage_project(corpus: Path) -> Path:
    """The config of a project whose prepare output holds ``corpus``'s documents, prepared now (not timed) and
    checked to be the texts the other trainers read."""
    from pipeline.data import documents

    project = DATA / "train-stage" / corpus.stem
    project.mkdir(parents=True, exist_ok=True)
    config = project / "lmprep.yaml"
    config.write_text(STAGE_CONFIG.format(corpus=json.dumps(str(corpus.resolve()))), "utf-8")
    subprocess.run([BIN / "lmprep", "run", "prepare", "--config", config], cwd=project, check=True,
                   capture_output=True)
    if sorted(documents.iter_split_documents(project / "out" / "prepared", "train")) != sorted(load_texts(corpus)):
        raise SystemExit(f"the prepared train split of {project} is not the texts of {corpus}")
    return config


def measure_stage(corpus: Path, vocab_size: int, threads: int) -> dict:
    """``lmprep run tokenizer --force`` with ``threads`` worker processes, its process tree watched."""
    from pipeline.tokenizer import Tokenizer

    config = stage_project(corpus)
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    command = [BIN / "lmprep", "run", "tokenizer", "--force", "--config", config,
               "--set", f"tokenizer.vocab_size={vocab_size}", "--set", f"tokenizer.workers={threads}"]
    run = proc.run_tree(command, cwd=config.parent, env={**env, "LMPREP_BACKEND": "native"},
                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if run.returncode:
        raise SystemExit(f"lmprep run tokenizer --config {config} failed (exit status {run.returncode})")
    tokenizer = Tokenizer.load(config.parent / "out" / "tokenizer" / "tokenizer.json")
    assert not tokenizer.special_tokens, tokenizer.special_tokens
    vocab = [tokenizer.token_bytes(i).hex() for i in range(tokenizer.vocab_size)]
    vocab_file(corpus, "stage", vocab_size).write_text(json.dumps(vocab))
    log = (config.parent / "state" / "logs" / "tokenizer.log").read_text("utf-8")
    tasks = [float(seconds) for seconds in TASK_LINE.findall(log)]
    return {"wall": run.wall_s, "cpu": run.cpu_s, "rss_main_mb": run.peak_bytes / 2**20,
            "rss_worker_mb": run.descendant_peak_bytes / 2**20, "tasks": len(tasks), "tasks_s": sum(tasks),
            "runner_s": float(FINISHED_LINE.search(log)[1]),
            "phases": {name: (float(wall), float(cpu)) for name, wall, cpu in PHASE_LINE.findall(log)}}


def measure(name: str, corpus: Path, vocab_size: int, threads: int) -> dict:
    if name == "stage":
        return measure_stage(corpus, vocab_size, threads)
    env = {**os.environ, "RAYON_NUM_THREADS": str(threads), "RAYON_RS_NUM_CPUS": str(threads)}
    if name in LMPREP:
        env["LMPREP_BACKEND"] = name
    command = [sys.executable, __file__, "--one", name, "--corpus", str(corpus), "--vocab-size", str(vocab_size),
               "--threads", str(threads)]
    output = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(output.strip().splitlines()[-1])


def report(figures: dict[str, list[dict]]) -> None:
    base = min(run["wall"] for run in figures["rustbpe"]) if "rustbpe" in figures else None
    base_cpu = min(run["cpu"] for run in figures["rustbpe"]) if "rustbpe" in figures else None
    print("| trainer | wall s (each run) | vs rustbpe | CPU s (each run) | CPU vs rustbpe | count s (CPU) "
          "| merge s (CPU) | RSS main MB | RSS worker MB |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, runs in figures.items():
        best, best_cpu = min(run["wall"] for run in runs), min(run["cpu"] for run in runs)
        walls = ", ".join(f"{run['wall']:.2f}" for run in runs)
        cpus = ", ".join(f"{run['cpu']:.2f}" for run in runs)
        ratio = "" if base is None else f"{best / base:.2f}x"
        cpu_ratio = "" if base_cpu is None else f"{best_cpu / base_cpu:.2f}x"
        phases = " | ".join(f"{min(run[phase] for run in runs):.2f} ({min(run[phase + '_cpu'] for run in runs):.2f})"
                            if phase in runs[0] else "" for phase in ("count", "merge"))
        if "tasks_s" in runs[0]:
            phases = f"{min(run['tasks_s'] for run in runs):.2f} (in tasks) | "
        rss_main, rss_worker = (max(run[key] for run in runs) for key in ("rss_main_mb", "rss_worker_mb"))
        print(f"| {name} | {walls} | {ratio} | {cpus} | {cpu_ratio} | {phases} | {rss_main:.0f} | {rss_worker:.0f} |")
    if "stage" in figures:
        best = min(figures["stage"], key=lambda run: run["wall"])
        phases = ", ".join(f"{name} {wall:.2f} s ({cpu:.2f} s CPU)" for name, (wall, cpu) in best["phases"].items())
        print(f"stage, its best run: {best['runner_s']:.1f} s of its {best['wall']:.2f} s inside the runner (the rest: "
              f"Python's start, imports, config, the run lock); {phases} in the driver; {best['tasks']} counting "
              f"tasks took {best['tasks_s']:.2f} s")


def vocab_file(corpus: Path, trainer: str, vocab_size: int) -> Path:
    return DATA / f"vocab-{corpus.stem}-{vocab_size}-{trainer}.json"


def check_parity(corpus: Path, vocab_size: int, names: list[str]) -> None:
    """lmprep's merges (each backend run) identical to rustbpe's, or the benchmark stops."""
    theirs = json.loads(vocab_file(corpus, "rustbpe", vocab_size).read_text())
    for name in (name for name in names if name in LMPREP):
        ours = json.loads(vocab_file(corpus, name, vocab_size).read_text())
        if ours != theirs:
            first = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
            raise SystemExit(f"MERGES DIFFER: lmprep {name} vs rustbpe, sizes {len(ours)} vs {len(theirs)}, "
                             f"first difference at id {first}")
    print(f"merges identical to rustbpe ({len(theirs) - 256} merges): {', '.join(n for n in names if n in LMPREP)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default="english,multilingual,code",
                        help="comma-separated: english, multilingual, code, full, unique-lines or JSON Lines paths")
    parser.add_argument("--megabytes", type=float, default=20.0, help="the most of each bench_native corpus")
    parser.add_argument("--vocab-size", default="32768,65536")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--trainers", default="native,stage,rustbpe,hf", help=f"of {','.join(TRAINERS)}")
    parser.add_argument("--one", choices=[name for name in TRAINERS if name != "stage"], help=argparse.SUPPRESS)
    results.add_arguments(parser)
    args = parser.parse_args()
    if args.one:
        return run_one(args.one, Path(args.corpus), int(args.vocab_size), int(args.threads))
    if args.smoke:
        args.corpus, args.megabytes, args.vocab_size, args.threads = "code", 0.05, "300", "1"
    names = args.trainers.split(",")
    for corpus_name in args.corpus.split(","):
        corpus = corpus_file(corpus_name, args.megabytes)
        if not corpus.exists():
            raise SystemExit(f"{corpus} is missing; run benchmarks/build_corpus.py first")
        for vocab_size in map(int, args.vocab_size.split(",")):
            for threads in map(int, args.threads.split(",")):
                figures: dict[str, list[dict]] = {name: [] for name in names}
                for _ in range(args.repeats):
                    for name in names:
                        figures[name].append(measure(name, corpus, vocab_size, threads))
                print(f"\ncorpus {corpus_name} ({corpus.stat().st_size / 1e6:.1f} MB as JSON), vocab {vocab_size:,}, "
                      f"{threads} threads; {figures[names[0]][0].get('distinct', 0):,} distinct chunks ({names[0]})")
                report(figures)
                if "rustbpe" in names:
                    check_parity(corpus, vocab_size, names)


if __name__ == "__main__":
    results.run("bench_train", main, children=("--one",))
