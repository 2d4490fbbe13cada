"""lmprep's curation steps against datatrove's, in the same run, on the same data and cores.

The corpus is ``bench_dedup.py``'s: chunks of this machine's Debian changelogs and one planted variant
of each of ``--variants`` of them (words substituted or deleted at 1-30 %, boilerplate appended,
truncated, halves swapped), cut into ``--files`` JSON Lines files (as many tasks on both sides). Four
runs, each in a process of its own whose tree (workers included) is sampled for CPU seconds and the
largest resident set of any one process:

- lmprep prepare with ``exact_dedup`` then ``near_dedup`` (the defaults), and datatrove's MinHash
  de-duplication in its four stages (``datatrove_curation.py minhash``, its defaults);
- lmprep prepare with ``exact_dedup``, ``gopher_repetition`` and ``gopher_quality``, and datatrove's
  ``GopherRepetitionFilter`` then ``GopherQualityFilter`` (``datatrove_curation.py gopher``).

Near-dedup quality for both is precision and recall against the exact Jaccard similarity of each
variant's 5-word shingle set with its original's (at least 0.8: a near-duplicate). Then the memory of
near-dedup's bucket tasks (the largest Python and numpy allocation of any one, traced, the tasks run
one at a time in this process) on the corpus and on ``--scale`` times as many documents (more variants
of the same originals), with the same buckets and with ``--scale`` times as many.

datatrove runs in ``benchmarks/.venv-datatrove`` when it exists (see ``bench_workers.py``; add
``spacy==3.8.18`` for its word tokenizer), else in this interpreter. On a shared machine the CPU seconds
are the steadier figure: wall time depends on the other jobs.

    .venv/bin/python benchmarks/bench_curation.py --originals 1000 --variants 1000 --workers 2 [--smoke]

``--smoke`` runs a few dozen documents in two files, and leaves datatrove's side out when its interpreter
lacks datatrove or spaCy.

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import results
from bench_dedup import corpus_index, jaccard, originals, scores, variant
from bench_workers import sample_tree

from pipeline.config.schema import ExecutorConfig, PrepareConfig, SourceConfig, StepConfig
from pipeline.data.dedup import ExactDedupStep
from pipeline.data.documents import iter_records
from pipeline.data.near_dedup import NearDedupStep
from pipeline.data.prepare import prepare_corpus
from pipeline.data.quality import GopherQualityStep, GopherRepetitionStep
from pipeline.data.sources import expand_sources
from pipeline.engine.executor import Tasks, open_tasks

ROOT = Path(__file__).resolve().parents[1]

DATATROVE_VENV = ROOT / "benchmarks" / ".venv-datatrove" / "bin" / "python"
EXACT = StepConfig("exact_dedup", ExactDedupStep())
CHAINS = {
    "near": (EXACT, StepConfig("near_dedup", NearDedupStep())),
    "quality": (EXACT, StepConfig("gopher_repetition", GopherRepetitionStep()),
                StepConfig("gopher_quality", GopherQualityStep())),
}


def write_corpus(texts: list[str], raw: Path, files: int) -> float:
    """``texts`` in order, as ``files`` JSON Lines files with an ``id`` (the index); their megabytes."""
    raw.mkdir(parents=True)
    size = -(-len(texts) // files)
    for number, start in enumerate(range(0, len(texts), size)):
        lines = [json.dumps({"text": text, "id": str(index)}) + "\n"
                 for index, text in enumerate(texts[start : start + size], start=start)]
        (raw / f"part-{number:03d}.jsonl").write_text("".join(lines))
    return sum(path.stat().st_size for path in raw.iterdir()) / 1e6


def rejected_indices(raw: Path, out: Path) -> dict[int, str]:
    """The corpus index of every document prepare rejected, and its rule."""
    files = sorted(raw.glob("*.jsonl"))
    offsets, data, total = {}, {}, 0
    for path in files:
        data[path.name] = path.read_bytes()
        offsets[path.name] = total
        total += data[path.name].count(b"\n")
    stats = json.loads((out / "stats.json").read_text())
    found = {}
    for part in stats["rejected"]:
        for row in iter_records(out / part["file"]):
            name = row[2].partition("#")[0].partition(" bytes ")[0]
            found[offsets[name] + corpus_index(row[2].removeprefix(name), data[name])] = row[4]
    return found


def child(chain: str, raw: Path, out: Path, workers: int) -> None:
    """prepare with a chain of :data:`CHAINS` on the local pool, as ``lmprep run`` runs it."""
    files = expand_sources([SourceConfig("*.jsonl")], root=raw)
    settings = PrepareConfig(steps=CHAINS[chain], val_fraction=0.0)
    start = time.perf_counter()
    with open_tasks(ExecutorConfig(kind="local", workers=workers)) as tasks:
        prepare_corpus(files, settings, out, tasks=tasks, names_root=raw)
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "rejected": rejected_indices(raw, out)}))


class _TracedBuckets(ThreadPoolExecutor):
    """Runs tasks one at a time; traces the allocations of each near-dedup bucket task and keeps the largest."""

    def __init__(self) -> None:
        super().__init__(1)
        self.peak = 0

    def submit(self, function, /, *args, **kwargs):
        if not str(args[1]).startswith("near-dedup bucket"):  # run_task(function, label, item)
            return super().submit(function, *args, **kwargs)
        return super().submit(self._traced, function, *args, **kwargs)

    def _traced(self, function, *args, **kwargs):
        tracemalloc.start()
        try:
            return function(*args, **kwargs)
        finally:
            self.peak = max(self.peak, tracemalloc.get_traced_memory()[1])
            tracemalloc.stop()


def memory_child(raw: Path, out: Path, buckets: int) -> None:
    files = expand_sources([SourceConfig("*.jsonl")], root=raw)
    settings = PrepareConfig(steps=(StepConfig("near_dedup", NearDedupStep(buckets=buckets)),), val_fraction=0.0)
    with _TracedBuckets() as pool:
        stats = prepare_corpus(files, settings, out, tasks=Tasks(pool), names_root=raw)
    print(json.dumps({"documents": stats.documents_read, "bucket_task_peak_mb": pool.peak / 1e6}))


def measured(command: list[str]) -> dict:
    """Run ``command``, sampling its process tree; its JSON line with the CPU seconds and the peak RSS."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    cpu, peak = sample_tree(process)
    stdout, stderr = process.communicate()
    if process.returncode:
        raise SystemExit(f"{' '.join(command)} failed with exit status {process.returncode}:\n{stderr[-2000:]}")
    return {**json.loads(stdout.splitlines()[-1]), "cpu_s": cpu, "peak_rss_mb": peak}


def throughput(megabytes: float, run: dict) -> dict:
    return {"wall_s": round(run["seconds"], 2), "cpu_s": round(run["cpu_s"], 2),
            "mb_per_s": round(megabytes / run["seconds"], 2), "mb_per_cpu_s": round(megabytes / run["cpu_s"], 2),
            "peak_rss_mb": round(run["peak_rss_mb"])}


def ratios(ours: dict, theirs: dict) -> dict:
    return {"wall": round(ours["mb_per_s"] / theirs["mb_per_s"], 1),
            "cpu": round(ours["mb_per_cpu_s"] / theirs["mb_per_cpu_s"], 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--originals", type=int, default=1000)
    parser.add_argument("--variants", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--files", type=int, default=8, help="JSON Lines files: the tasks of both sides")
    parser.add_argument("--scale", type=int, default=4, help="documents × this for the memory figure")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--datatrove-python", type=Path,
                        default=DATATROVE_VENV if DATATROVE_VENV.exists() else Path(sys.executable))
    parser.add_argument("--child", nargs=3, metavar=("CHAIN", "RAW", "OUT"), help=argparse.SUPPRESS)
    parser.add_argument("--memory-child", nargs=3, metavar=("RAW", "OUT", "BUCKETS"), help=argparse.SUPPRESS)
    results.add_arguments(parser)
    args = parser.parse_args()
    if args.child:
        return child(args.child[0], Path(args.child[1]), Path(args.child[2]), args.workers)
    if args.memory_child:
        return memory_child(Path(args.memory_child[0]), Path(args.memory_child[1]), int(args.memory_child[2]))
    with_datatrove = True
    if args.smoke:
        args.originals, args.variants, args.files, args.scale = 12, 12, 2, 2
        with_datatrove = subprocess.run([str(args.datatrove_python), "-c", "import datatrove, spacy"],
                                        capture_output=True).returncode == 0
    rng = random.Random(args.seed)
    base = originals(args.originals, rng)
    planted = [(source, *variant(base[source], rng)) for source in rng.sample(range(len(base)), args.variants)]
    texts = base + [text for _, text, _ in planted]
    truth = [jaccard(base[source], text, 5) >= NearDedupStep().threshold for source, text, _ in planted]
    report: dict = {"originals": len(base), "variants": len(planted), "variants_at_or_above_0.8": sum(truth),
                    "workers": args.workers, "files": args.files, "datatrove_python": str(args.datatrove_python)}
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "raw"
        megabytes = report["corpus_mb"] = round(write_corpus(texts, raw, args.files), 2)
        me = [sys.executable, __file__, "--workers", str(args.workers)]
        datatrove = [str(args.datatrove_python), str(ROOT / "benchmarks" / "datatrove_curation.py")]
        for chain, pipeline in (("near", "minhash"), ("quality", "gopher")):
            ours = measured([*me, "--child", chain, str(raw), str(Path(tmp) / f"lmprep-{chain}")])
            if not with_datatrove:
                report[chain] = {"lmprep": {**throughput(megabytes, ours), "kept": len(texts) - len(ours["rejected"])},
                                 "datatrove": "left out (smoke run: its interpreter lacks datatrove or spaCy)"}
                continue
            theirs = measured([*datatrove, pipeline, str(raw), str(Path(tmp) / f"datatrove-{pipeline}"),
                               "--workers", str(args.workers)])
            report[chain] = {"lmprep": throughput(megabytes, ours), "datatrove": throughput(megabytes, theirs)}
            report[chain]["lmprep_over_datatrove"] = ratios(report[chain]["lmprep"], report[chain]["datatrove"])
            kept = set(map(int, theirs["kept"]))
            report[chain]["lmprep"]["kept"] = len(texts) - len(ours["rejected"])
            report[chain]["datatrove"]["kept"] = len(kept)
            if chain == "near":
                ours_flagged = [ours["rejected"].get(str(len(base) + i)) in ("near_duplicate", "duplicate")
                                for i in range(len(planted))]
                report[chain]["lmprep"].update(scores(truth, ours_flagged))
                report[chain]["datatrove"].update(scores(truth, [len(base) + i not in kept
                                                                 for i in range(len(planted))]))
        report["near_dedup_bucket_memory"] = memory_figures(base, planted, rng, Path(tmp), args)
    print(json.dumps(report, indent=1))


def memory_figures(base: list[str], planted: list, rng: random.Random, tmp: Path, args) -> list[dict]:
    """The largest bucket task's traced allocations on the corpus and on ``--scale`` times as many documents
    (more variants of the same originals), with the default buckets and with ``--scale`` times as many."""
    more = [variant(base[rng.randrange(len(base))], rng)[0]
            for _ in range((args.scale - 1) * (len(base) + len(planted)))]
    corpora = {1: base + [text for _, text, _ in planted], args.scale: base + [text for _, text, _ in planted] + more}
    buckets = NearDedupStep().buckets
    figures = []
    for scale, bucket_count in ((1, buckets), (args.scale, buckets), (args.scale, buckets * args.scale)):
        raw = tmp / f"memory-raw-x{scale}"
        if not raw.exists():
            write_corpus(corpora[scale], raw, args.files)
        run = json.loads(subprocess.run(
            [sys.executable, __file__, "--memory-child", str(raw), str(tmp / f"memory-x{scale}-{bucket_count}"),
             str(bucket_count)], check=True, capture_output=True, text=True).stdout.splitlines()[-1])
        figures.append({"documents": run["documents"], "buckets": bucket_count,
                        "documents_per_bucket": run["documents"] // bucket_count,
                        "bucket_task_peak_mb": round(run["bucket_task_peak_mb"], 2)})
    return figures


if __name__ == "__main__":
    results.run("bench_curation", main)
