"""Workers benchmark: prepare and encode throughput with 1 and 2 local processes and a 2-worker Dask
cluster, datatrove's prepare beside lmprep's, and the driver's peak RSS as the corpus grows.

The corpus of ``build_corpus.py`` is cut into ``--files`` JSON Lines files (``--scale`` × repeats it for
the memory figure, which then holds mostly duplicates). Each configuration runs in a fresh interpreter:
prepare (read → clean → exact de-duplication → split → write) then encode (32,768-ID byte-level BPE
trained once on the first 20 MB). The Dask cluster is a ``LocalCluster`` of processes on this machine,
started before the clock starts. Peak RSS is the driver's own (``RUSAGE_SELF``), workers excluded.

On a shared machine the wall clock says more about the other jobs than about lmprep, so each stage
also reports CPU seconds (the driver's and every worker's) and its critical path: the driver's CPU
plus, for each round of tasks, the busiest worker's CPU. That is the wall time on otherwise idle
cores, and its ratio between 1 and 2 processes is the scaling that the orchestration allows.

datatrove (``datatrove_prepare.py``: its ``LocalPipelineExecutor`` doing read → clean → exact
de-duplication → write on the same files, with as many tasks as lmprep has partitions, the same
number of hash buckets and the same number of workers) runs in its own environment, made once:

    python -m venv benchmarks/.venv-datatrove
    benchmarks/.venv-datatrove/bin/pip install datatrove==0.10.1 orjson==3.13.0 xxhash==3.8.2 \\
        pyarrow==26.0.1 pyyaml==6.0.4 regex==2026.11.15 tokenizers==0.23.3

    python benchmarks/build_corpus.py
    python benchmarks/bench_workers.py [--files 24] [--scale 4] [--repeats 1] [--smoke]

``--smoke``: a 0.2 MB corpus in 4 files, built in a temporary directory, a 300-ID tokenizer.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import build_corpus
import proc
import results

from pipeline.config import ExecutorConfig, PrepareConfig, SourceConfig
from pipeline.data import documents
from pipeline.data.dedup import ExactDedupStep
from pipeline.data.prepare import prepare_corpus
from pipeline.data.sources import expand_sources
from pipeline.engine.executor import Tasks, open_tasks
from pipeline.shards.corpus import encode_corpus
from pipeline.tokenizer import Tokenizer

ROOT = Path(__file__).resolve().parents[1]

DATA = results.data_dir()
CORPUS = DATA / "corpus.jsonl"
WORK = DATA / "bench_workers"
EOT = "<|endoftext|>"
MODES = {"local-1": ExecutorConfig(kind="local", workers=1), "local-2": ExecutorConfig(kind="local", workers=2),
         "dask-2": ExecutorConfig(kind="dask", address="local", workers=2)}
DATATROVE_PYTHON = ROOT / "benchmarks" / ".venv-datatrove" / "bin" / "python"


def raw_files(files: int, scale: int) -> Path:
    """``files`` JSON Lines files holding the corpus ``scale`` times, in order."""
    directory = WORK / f"raw-x{scale}"
    if not directory.exists():
        lines = CORPUS.read_bytes().splitlines(keepends=True) * scale
        size = -(-len(lines) // files)
        directory.mkdir(parents=True)
        for index, start in enumerate(range(0, len(lines), size)):
            (directory / f"part-{index:03d}.jsonl").write_bytes(b"".join(lines[start : start + size]))
    return directory


def tokenizer_file() -> Path:
    path = WORK / "tokenizer.json"
    if not path.exists():
        sample, size = [], 0
        with open(CORPUS, encoding="utf-8") as lines:
            for line in lines:
                sample.append(json.loads(line)["text"])
                size += len(sample[-1])
                if size > 20_000_000:
                    break
        Tokenizer.train(sample, vocab_size=300 if results.SMOKE else 32768, special_tokens=[EOT], workers=2).save(path)
    return path


def workers_cpu() -> dict[int, float]:
    """CPU seconds so far of each process below this one (the pool's or the cluster's workers)."""
    seconds = {}
    for pid in proc.descendants(os.getpid()):
        if (cpu := proc.cpu_seconds(pid)) is not None:
            seconds[pid] = cpu
    return seconds


class MeasuredTasks:
    """Stands in for :class:`Tasks` and records each round's CPU seconds per worker."""

    def __init__(self, tasks: Tasks):
        self._tasks = tasks
        self.rounds: list[list[float]] = []

    def map(self, *args, **kwargs):
        return self._measure(self._tasks.map, *args, **kwargs)

    def map_reduce(self, *args, **kwargs):
        return self._measure(self._tasks.map_reduce, *args, **kwargs)

    def _measure(self, call: Callable, *args, **kwargs):
        before = workers_cpu()
        result = call(*args, **kwargs)
        self.rounds.append([seconds - before.get(pid, 0.0) for pid, seconds in workers_cpu().items()])
        return result


def measure_stage(mode: str, run: Callable[[MeasuredTasks], object]) -> dict:
    """Wall seconds, CPU seconds of the driver and the workers, and the critical path of one stage.

    Each stage opens its own pool or cluster, as ``lmprep run`` does, outside the clock.
    """
    with open_tasks(MODES[mode]) as tasks:
        measured = MeasuredTasks(tasks)
        start, driver_start = time.perf_counter(), time.process_time()
        run(measured)
        wall, driver = time.perf_counter() - start, time.process_time() - driver_start
    return {"wall_s": wall, "cpu_s": driver + sum(sum(r) for r in measured.rounds),
            "critical_s": driver + sum(max(r, default=0.0) for r in measured.rounds)}


def child(mode: str, files: int, scale: int) -> None:
    raw, tokenizer_path = raw_files(files, scale), tokenizer_file()
    sources = expand_sources([SourceConfig(glob="*.jsonl")], root=raw)
    raw_mb = sum(file.size() for file in sources) / 1e6
    out = WORK / f"out-{mode}-x{scale}"
    eos = Tokenizer.load(tokenizer_path).special_tokens[EOT]
    prepare = measure_stage(mode, lambda tasks: prepare_corpus(sources, PrepareConfig(), out / "prepared", tasks=tasks))
    encode = measure_stage(mode, lambda tasks: encode_corpus(out / "prepared", out / "shards", tasks=tasks,
                                                             tokenizer_path=tokenizer_path, shard_tokens=1_000_000,
                                                             eos_id=eos))
    prepared_mb = sum(part.bytes for split in documents.SPLITS
                      for part in documents.read_parts(out / "prepared", split)) / 1e6
    print(json.dumps({"raw_mb": raw_mb, "prepared_mb": prepared_mb, "prepare": prepare, "encode": encode,
                      "documents": sum(part.documents for split in documents.SPLITS
                                       for part in documents.read_parts(out / "prepared", split)),
                      "driver_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "load": os.getloadavg()[0]}))


def run(mode: str, files: int, scale: int) -> dict:
    command = [sys.executable, __file__, "--child", mode, "--files", str(files), "--scale", str(scale)]
    return json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout.splitlines()[-1])


def run_datatrove(workers: int, files: int) -> dict:
    """datatrove's prepare in its own environment; CPU seconds sampled over its whole process tree."""
    command = [str(DATATROVE_PYTHON), str(ROOT / "benchmarks" / "datatrove_prepare.py"), str(raw_files(files, 1)),
               str(WORK / f"out-datatrove-{workers}"), "--tasks", str(files), "--workers", str(workers),
               "--buckets", str(ExactDedupStep().buckets)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                               env={**os.environ, "PYTHONPATH": str(ROOT)})  # lmprep's cleaning, not installed there
    cpu, _ = sample_tree(process)
    stdout, _ = process.communicate()
    if process.returncode:
        raise SystemExit(f"{' '.join(command)} failed with exit status {process.returncode}")
    return {**json.loads(stdout.splitlines()[-1]), "cpu_s": cpu, "load": os.getloadavg()[0]}


def sample_tree(process: subprocess.Popen, interval: float = 0.05) -> tuple[float, float]:
    """CPU seconds of ``process`` and all its descendants, and the largest resident set (MB) any one of them
    reached, sampled until it exits (a pool's workers are not all its own children: datatrove's pool forks
    from a fork server)."""
    last: dict[int, float] = {}
    peak = 0
    while process.poll() is None:
        for pid in [process.pid, *proc.descendants(process.pid)]:
            cpu, rss = proc.cpu_seconds(pid), proc.rss_bytes(pid)
            if cpu is None or rss is None:
                continue
            last[pid] = cpu
            peak = max(peak, rss)
        time.sleep(interval)
    return sum(last.values()), peak / 1e6


def same_outputs(a: Path, b: Path) -> bool:
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    return files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file()) and all(
        (a / f).read_bytes() == (b / f).read_bytes() for f in files)


def describe_stage(name: str, megabytes: float, stage: dict) -> str:
    """Throughput, CPU seconds, the cores the machine gave (CPU / wall) and the critical path."""
    return (f"{name} {megabytes / stage['wall_s']:.1f} MB/s ({stage['wall_s']:.1f} s; CPU {stage['cpu_s']:.1f} s = "
            f"{stage['cpu_s'] / stage['wall_s']:.2f} cores; critical path {stage['critical_s']:.2f} s = "
            f"{megabytes / stage['critical_s']:.1f} MB/s; load {stage['load']:.1f})")


def fastest(runs: list[dict], stage: str) -> dict:
    """The run of a configuration whose ``stage`` took the least wall time, with the load it ran under."""
    best = min(runs, key=lambda figures: figures[stage]["wall_s"])
    return {**best[stage], "load": best["load"]}


def report_lmprep(runs: dict[str, list[dict]]) -> None:
    for mode, figures in runs.items():
        print(f"{mode}: {describe_stage('prepare', figures[0]['raw_mb'], fastest(figures, 'prepare'))}; "
              f"{describe_stage('encode', figures[0]['prepared_mb'], fastest(figures, 'encode'))}; "
              f"driver peak RSS {max(f['driver_rss_mb'] for f in figures):.0f} MB")
    for stage in ("prepare", "encode"):
        one, two = fastest(runs["local-1"], stage), fastest(runs["local-2"], stage)
        print(f"{stage} 1 → 2 local processes: {one['wall_s'] / two['wall_s']:.2f}× wall, "
              f"{one['critical_s'] / two['critical_s']:.2f}× critical path, CPU {one['cpu_s']:.1f} → "
              f"{two['cpu_s']:.1f} s")


def report_datatrove(runs: dict[str, list[dict]], datatrove: dict[int, list[dict]]) -> None:
    raw_mb = runs["local-1"][0]["raw_mb"]
    for workers, theirs_runs in datatrove.items():
        theirs, ours = min(theirs_runs, key=lambda f: f["seconds"]), fastest(runs[f"local-{workers}"], "prepare")
        print(f"prepare with {workers} worker(s): datatrove {raw_mb / theirs['seconds']:.1f} MB/s "
              f"({theirs['seconds']:.1f} s, CPU {theirs['cpu_s']:.1f} s, load {theirs['load']:.1f}, "
              f"{theirs['documents']:,} documents kept), "
              f"lmprep {raw_mb / ours['wall_s']:.1f} MB/s ({ours['wall_s']:.1f} s, CPU {ours['cpu_s']:.1f} s, load "
              f"{ours['load']:.1f}, {runs[f'local-{workers}'][0]['documents']:,} documents kept): lmprep "
              f"{theirs['seconds'] / ours['wall_s']:.2f}× faster, {theirs['cpu_s'] / ours['cpu_s']:.2f}× less CPU")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=24)
    parser.add_argument("--scale", type=int, default=4, help="second corpus size for the memory figure, ×")
    parser.add_argument("--repeats", type=int, default=1,
                        help="runs of each configuration, interleaved; the fastest of each stage is shown")
    parser.add_argument("--child", choices=sorted(MODES), help=argparse.SUPPRESS)
    results.add_arguments(parser)
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.files, args.scale)
    if args.smoke:
        args.files, args.scale = 4, 2
        build_corpus.build(build_corpus.SMOKE_MEGABYTES)
    raw_files(args.files, 1), raw_files(args.files, args.scale), tokenizer_file()
    with_datatrove = DATATROVE_PYTHON.exists()
    if not with_datatrove:
        print(f"datatrove skipped: {DATATROVE_PYTHON} is missing (see this script's docstring)")
    runs: dict[str, list[dict]] = {mode: [] for mode in MODES}
    datatrove: dict[int, list[dict]] = {workers: [] for workers in ((1, 2) if with_datatrove else ())}
    for _ in range(args.repeats):
        for mode in MODES:
            runs[mode].append(run(mode, args.files, 1))
        for workers in datatrove:
            datatrove[workers].append(run_datatrove(workers, args.files))
    report_lmprep(runs)
    print(f"outputs identical across modes: "
          f"{all(same_outputs(WORK / 'out-local-1-x1', WORK / f'out-{m}-x1') for m in MODES)}")
    report_datatrove(runs, datatrove)
    figures = run("local-2", args.files, args.scale)
    print(f"local-2 at {figures['raw_mb']:.0f} MB: driver peak RSS {figures['driver_rss_mb']:.0f} MB")
    shutil.rmtree(WORK / f"out-local-2-x{args.scale}")


if __name__ == "__main__":
    results.run("bench_workers", main)
