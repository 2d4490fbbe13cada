"""Scale benchmark: how each stage's time and memory grow with the corpus, at 1/16, 1/4 and 1 of
``build_scale_corpus.py``'s corpus (over 1 GB of text), and the same run on a Dask cluster over S3.

Each size runs the whole pipeline as a user does, ``lmprep run STAGE`` one stage at a time (prepare,
tokenizer, encode, export), on 2 local worker processes, with the curation chain of docs/curation.md
(``exact_dedup``, ``gopher_quality``, ``gopher_repetition``, ``c4``, ``fineweb``, ``language``,
``near_dedup``), a 65,536-ID byte-level tokenizer and export to Parquet and nanoGPT's ``.bin``. Per stage:

- wall seconds, and CPU seconds of the stage's whole process tree (its own and its reaped children's,
  from ``wait4``), the load average beside them: on a shared machine CPU seconds are the steady figure;
- the peak resident set (``VmHWM``) of the driver (the ``lmprep`` process) and of the largest worker,
  sampled from ``/proc`` every 50 ms (a peak is a high-water mark, so a sample misses only what grew in
  the last 50 ms of a process's life), and the largest anonymous resident memory (``RssAnon``, sampled:
  the heap, without the pages of memory-mapped shards and signatures, which the kernel can drop);
- bytes written to disk (the kernel's block-write accounting of the tree, scratch files included) and
  the size of the stage's outputs;
- the tasks it ran (its log, ``{state_dir}/logs/<stage>.log``).

The growth of each figure is fitted as ``value ∝ size^k`` (least squares in log-log over the sizes run)
and shown in a table and a plot (``--plot``, PNG; ``docs/scale.png`` by default).

``--dask SIZE`` runs that size again with its raw files and every output in S3 (moto's server, started
by this script on 127.0.0.1) and the tasks on a Dask cluster of separate processes (``dask scheduler``,
``dask worker --nworkers 2 --nthreads 1``), compares every output byte for byte with the local run's,
and prints per stage the S3 requests by kind, the seconds the server spent answering them (its share
of the stage's worker time: the time in the store) and the per-task overhead (``(workers × wall − Σ task
seconds) / tasks``, locally and on Dask; the driver's own phases count in it). Needs ``lmprep[test]``.

``--worker-heap SIZE`` runs prepare's first round at that size (the dedup chain) one task after another in
this one process, largest first as a worker takes them, for ``--tasks`` tasks (into the rounds after it
when there are more): after each task, the heap (``RssAnon``) as the task left it, the time that releasing
the allocators' free memory takes (what a worker does after each task) and the heap after it; then the
same again under tracemalloc, with the lines of code whose live allocations grew from task to task.

``--export-s3 SIZE ...`` runs export alone over S3 at each size: the tokenizer and shards of that size's
local run (``--sizes``) are uploaded to moto's server, then ``stages/export.py``'s ``run`` runs in its own
process, writing there, sampled every 50 ms: its peak resident set and largest anonymous memory, its CPU
seconds, its requests, and whether the files it wrote equal the local run's export byte for byte.

    python benchmarks/build_scale_corpus.py
    python benchmarks/bench_scale.py [--sizes sixteenth quarter full] [--dask quarter] [--smoke]
    python benchmarks/bench_scale.py --worker-heap full --tasks 80
    python benchmarks/bench_scale.py --export-s3 sixteenth quarter full

``--smoke``: the builder's 2 MB corpus at its three sizes, a 1,024-ID tokenizer, and the Dask run and the
worker's heap at the smallest size, in a temporary directory (seconds, once the processes are up).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import sysconfig
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import Executor, Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import build_scale_corpus
import proc
import results

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
WORK = results.data_dir() / "bench_scale"
STAGES = ("prepare", "tokenizer", "encode", "export")
WORKERS = 2
SAMPLE_SECONDS = 0.05
CONFIG = """\
data:
  sources:
{sources}
prepare:
  steps:
{steps}
  output_dir: {out}/prepared
tokenizer: {{vocab_size: {vocab}, workers: {workers}, output: {out}/tokenizer/tokenizer.json}}
encode: {{workers: {workers}, output_dir: {out}/shards}}
train: {{output_dir: {out}/checkpoints}}
export: {{formats: [parquet, nanogpt], output_dir: {out}/export}}
executor: {executor}
output_root: .
state_dir: state
run_cache_dir: null
"""
CHAINS = {  # docs/curation.md's chain, and its de-duplication alone
    "curation": ("exact_dedup: {}", "gopher_quality: {min_words: 50}", "gopher_repetition: {}",
                 "c4: {min_sentences: 5}", "fineweb: {}", "language: {languages: [en], min_score: 0.5}",
                 "near_dedup: {threshold: 0.8}"),
    "dedup": ("exact_dedup: {}", "near_dedup: {threshold: 0.8}"),
}
# the rows of the table: (row, chain, stage); the curation chain keeps ~3 % of this corpus (source code and
# man pages are not the web pages its rules are for), so the stages after prepare run on the dedup chain's output
ROWS = (("prepare, curation chain", "curation", "prepare"), ("prepare, dedup only", "dedup", "prepare"),
        ("tokenizer", "dedup", "tokenizer"), ("encode", "dedup", "encode"), ("export", "dedup", "export"))
OUTPUTS = {"prepare": "prepared", "tokenizer": "tokenizer", "encode": "shards", "export": "export"}
TASK_LINE = re.compile(r"^task .*: done on .* in ([\d.]+) s")


@dataclass
class StageFigures:
    wall_s: float
    cpu_s: float
    driver_cpu_s: float
    driver_peak_mb: float
    worker_peak_mb: float
    driver_anon_mb: float
    worker_anon_mb: float
    written_mb: float
    output_mb: float
    tasks: int
    task_s: float
    load: float
    requests: Counter[str] = field(default_factory=Counter)
    store_s: float = 0.0


def memory_bytes(pid: int) -> tuple[int, int]:
    """The peak resident set of ``pid`` so far (``VmHWM``, memory-mapped files' pages included) and its
    anonymous resident memory now (``RssAnon``: the heap, what no file backs); zeros once it is gone."""
    try:
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                      if line.startswith(("VmHWM:", "RssAnon:")))
    except (FileNotFoundError, ProcessLookupError):
        return 0, 0
    kilobytes = {key: int(value.split()[0]) for key, value in fields.items()}
    return kilobytes.get("VmHWM", 0) * 1024, kilobytes.get("RssAnon", 0) * 1024


def reset_peaks(pids: list[int]) -> None:
    """Start each process's ``VmHWM`` again from its current resident set (``clear_refs`` 5), so that a
    long-lived Dask worker's peak is the stage's own."""
    for pid in pids:
        try:
            Path(f"/proc/{pid}/clear_refs").write_text("5")
        except OSError:
            continue


def run_stage(config: Path, stage: str, *, env: dict[str, str], workers_of: int | None = None,
              command: list[str] | None = None) -> StageFigures:
    """``lmprep run STAGE`` in its own process, its tree sampled until it exits; ``workers_of`` is the pid
    whose descendants are the workers when they are not the driver's (a Dask worker process)."""
    outside = [] if workers_of is None else proc.descendants(workers_of)
    reset_peaks(outside)
    cpu_outside = {pid: proc.cpu_seconds(pid) or 0.0 for pid in outside}
    start = time.perf_counter()
    with open(config.parent / f"{stage}.out", "wb") as out:
        process = subprocess.Popen([*(command or [str(BIN / "lmprep")]), "run", stage, "--config", str(config)],
                                   env=env, stdout=out, stderr=subprocess.STDOUT, cwd=config.parent)
    driver_peak = worker_peak = driver_anon = worker_anon = 0
    driver_cpu = 0.0
    while True:  # wait4, not poll: the exit's resource usage covers the driver and the workers it reaped
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            break
        peak, anon = memory_bytes(process.pid)
        driver_peak, driver_anon = max(driver_peak, peak), max(driver_anon, anon)
        driver_cpu = proc.cpu_seconds(process.pid) or driver_cpu
        for pid in proc.descendants(process.pid) + (proc.descendants(workers_of) if workers_of else []):
            peak, anon = memory_bytes(pid)
            worker_peak, worker_anon = max(worker_peak, peak), max(worker_anon, anon)
        time.sleep(SAMPLE_SECONDS)
    wall = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
        output = (config.parent / f"{stage}.out").read_text("utf-8", "replace")
        raise SystemExit(f"lmprep run {stage} --config {config} failed:\n{output[-3000:]}")
    tasks, task_s = stage_tasks(config.parent / "state" / "logs" / f"{stage}.log")
    worker_cpu = sum((proc.cpu_seconds(pid) or 0.0) - cpu_outside.get(pid, 0.0) for pid in outside)
    return StageFigures(wall_s=wall, cpu_s=usage.ru_utime + usage.ru_stime + worker_cpu, driver_cpu_s=driver_cpu,
                        driver_peak_mb=driver_peak / 1e6, worker_peak_mb=worker_peak / 1e6,
                        driver_anon_mb=driver_anon / 1e6, worker_anon_mb=worker_anon / 1e6,
                        written_mb=usage.ru_oublock * 512 / 1e6,
                        output_mb=tree_bytes(config.parent / "out" / OUTPUTS[stage]) / 1e6, tasks=tasks,
                        task_s=task_s, load=os.getloadavg()[0])


def stage_tasks(log: Path) -> tuple[int, float]:
    """The tasks a stage's log names as done, and their seconds added up (none without a log: a stage's own
    ``run`` called outside the runner)."""
    if not log.exists():
        return 0, 0.0
    seconds = [float(match[1]) for line in log.read_text("utf-8").splitlines() if (match := TASK_LINE.match(line))]
    return len(seconds), sum(seconds)


def tree_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(file.stat().st_size for file in path.rglob("*") if file.is_file()) if path.exists() else 0


def write_config(work: Path, size: str, raw: str, out: str, executor: str, chain: str = "dedup") -> Path:
    """The config of one run of ``size`` with its raw files at ``raw`` and its outputs under ``out``."""
    work.mkdir(parents=True, exist_ok=True)
    path = work / "lmprep.yaml"
    sources = build_scale_corpus.source_lines(size, raw)
    steps = "\n".join(f"    - {step}" for step in CHAINS[chain])
    path.write_text(CONFIG.format(sources=sources, steps=steps, out=out, executor=executor, workers=WORKERS,
                                  vocab=1024 if results.SMOKE else 65536), "utf-8")
    return path


def local_run(size: str) -> dict[str, StageFigures]:
    """Each row of :data:`ROWS` at ``size`` on the local pool, keyed by row."""
    figures = {}
    for chain in CHAINS:
        work = WORK / size / chain
        shutil.rmtree(work, ignore_errors=True)
        config = write_config(work, size, str(build_scale_corpus.DATA / size), "out",
                              f"{{kind: local, workers: {WORKERS}}}", chain)
        for row, row_chain, stage in ROWS:
            if row_chain == chain:
                figures[row] = run_stage(config, stage, env=dict(os.environ))
                print(f"  {size} {row}: {describe(figures[row])}", flush=True)
        print(f"  {size} {chain}: {kept_line(work)}", flush=True)
    return figures


def kept_line(work: Path) -> str:
    """What prepare kept, as its summary says it."""
    return next((line.strip() for line in (work / "prepare.out").read_text("utf-8").splitlines()
                 if line.startswith("kept ")), "kept: not said")


def describe(figures: StageFigures) -> str:
    return (f"{figures.wall_s:.1f} s wall, {figures.cpu_s:.1f} s CPU (driver {figures.driver_cpu_s:.1f}), "
            f"driver {figures.driver_peak_mb:.0f} MB ({figures.driver_anon_mb:.0f} anonymous), largest worker "
            f"{figures.worker_peak_mb:.0f} MB ({figures.worker_anon_mb:.0f} anonymous), "
            f"{figures.written_mb:.0f} MB written, {figures.tasks} tasks, load {figures.load:.1f}")


def raw_megabytes(size: str) -> float:
    """The corpus's text, in MB (its files hold it compressed in part)."""
    return text_bytes(build_scale_corpus.DATA / size) / 1e6


def text_bytes(directory: Path) -> int:
    """The UTF-8 bytes of every document in a size's directory."""
    import pyarrow.parquet as pq

    total = sum(path.stat().st_size - (path.read_bytes().count(build_scale_corpus.SEPARATOR.encode())
                                       * len(build_scale_corpus.SEPARATOR)) for path in directory.glob("*.txt"))
    total += sum(len(text.encode()) for text in build_scale_corpus.corpus_texts(directory))
    for path in directory.glob("*.parquet"):
        total += sum(len(text.encode()) for text in pq.read_table(path, columns=["text"])["text"].to_pylist())
    return total


def growth(sizes: list[float], values: list[float]) -> float | None:
    """``k`` of ``value ∝ size^k``, by least squares in log-log; None with fewer than two positive points."""
    points = [(math.log(x), math.log(y)) for x, y in zip(sizes, values, strict=True) if x > 0 and y > 0]
    if len(points) < 2:
        return None
    mean_x, mean_y = (sum(p[i] for p in points) / len(points) for i in (0, 1))
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / spread if spread else None


METRICS = {"wall s": "wall_s", "CPU s": "cpu_s", "driver MB": "driver_peak_mb", "driver anon MB": "driver_anon_mb",
           "worker MB": "worker_peak_mb", "worker anon MB": "worker_anon_mb",
           "written MB": "written_mb", "tasks": "tasks"}


def table(megabytes: dict[str, float], runs: dict[str, dict[str, StageFigures]]) -> str:
    """One row per stage and size, and a row per stage with the fitted exponents."""
    header = "| stage | corpus MB | " + " | ".join(METRICS) + " |"
    rows = [header, "|" + "---|" * (len(METRICS) + 2)]
    for stage, _, _ in ROWS:
        for size, figures in runs.items():
            cells = [f"{getattr(figures[stage], attribute):,.1f}" for attribute in METRICS.values()]
            rows.append(f"| {stage} | {megabytes[size]:,.0f} | " + " | ".join(cells) + " |")
        exponents = [growth([megabytes[s] for s in runs], [getattr(runs[s][stage], a) for s in runs])
                     for a in METRICS.values()]
        rows.append(f"| {stage} | k | " + " | ".join("–" if k is None else f"{k:.2f}" for k in exponents) + " |")
    return "\n".join(rows)


def plot(megabytes: dict[str, float], runs: dict[str, dict[str, StageFigures]], path: Path) -> None:
    """CPU seconds and peak resident sets against the corpus size, log-log, one line per stage."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, (time_axis, memory_axis) = pyplot.subplots(1, 2, figsize=(11, 4.2))
    x = [megabytes[size] for size in runs]
    for stage, _, _ in ROWS:
        time_axis.plot(x, [runs[s][stage].cpu_s for s in runs], marker="o", label=stage)
        memory_axis.plot(x, [runs[s][stage].driver_peak_mb for s in runs], marker="o", label=f"{stage} driver")
        memory_axis.plot(x, [runs[s][stage].worker_peak_mb for s in runs], marker="s", linestyle="--",
                         label=f"{stage} worker")
    for axis, label in ((time_axis, "CPU seconds"), (memory_axis, "peak resident set, MB")):
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_xlabel("corpus, MB of text")
        axis.set_ylabel(label)
        axis.grid(True, which="both", alpha=0.3)
    time_axis.legend(fontsize=8)
    memory_axis.legend(fontsize=7, ncol=2)
    figure.suptitle(f"lmprep per stage on {WORKERS} local workers (benchmarks/bench_scale.py)")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110, metadata={"Software": None})
    pyplot.close(figure)


# --- the task plan: many small files, one huge file ---------------------------

PLAN_CONFIG = """\
data:
  sources:
    - {{glob: "{glob}"{field}}}
prepare: {{steps: [{{exact_dedup: {{}}}}], output_dir: out/prepared}}
tokenizer: {{output: out/tokenizer/tokenizer.json}}
encode: {{output_dir: out/shards}}
train: {{output_dir: out/checkpoints}}
executor: {{kind: local, workers: {workers}}}
output_root: .
state_dir: state
run_cache_dir: null
"""
# lmprep's CLI with every listing of a source glob counted, the count printed as it exits
COUNTED_CLI = """\
import atexit, sys
from pipeline.engine import storage
from stages.cli.main import main
listings = []
glob_files = storage.glob_files
storage.glob_files = lambda pattern, root: listings.append(pattern) or glob_files(pattern, root)
atexit.register(lambda: print(f"listings: {len(listings)}", file=sys.stderr))
sys.argv[0] = "lmprep"
main()
"""
PLAN_CASES = {"small": ("**/*.txt", ""), "huge": ("*.jsonl", ", field: text"),
              "sixteenth": ("*.jsonl.gz", ", field: text")}


def plan_case(name: str) -> str:
    """prepare (``exact_dedup`` alone) over one of the builder's extra corpora: the plan's tasks and their sizes,
    the listings made, the driver's peak and the largest worker's."""
    from pipeline.config import SourceConfig
    from pipeline.data.sources import expand_sources, plan_partitions

    raw = build_scale_corpus.DATA / name
    glob, field_key = PLAN_CASES[name]
    work = WORK / f"plan-{name}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    config = work / "lmprep.yaml"
    config.write_text(PLAN_CONFIG.format(glob=f"{raw}/{glob}", field=field_key, workers=WORKERS), "utf-8")
    files = expand_sources([SourceConfig(glob=glob)], root=raw)
    sizes = [partition.size for partition in plan_partitions(files, 64_000_000)]
    figures = run_stage(config, "prepare", env=dict(os.environ), command=[sys.executable, "-c", COUNTED_CLI])
    listings = re.findall(r"^listings: (\d+)$", (work / "prepare.out").read_text("utf-8"), flags=re.MULTILINE)
    return (f"{name}: {len(files):,} files, {sum(sizes) / 1e6:,.0f} MB → {len(sizes)} tasks of {min(sizes) / 1e6:.1f}"
            f"-{max(sizes) / 1e6:.1f} MB; prepare: {describe(figures)}; source listings: {listings[-1]}")


# --- prepare's worker heap, task after task ----------------------------------


class EnoughTasks(Exception):
    """Raised by :class:`InlineTasks` once it ran the tasks it was asked for."""


class InlineTasks(Executor):
    """An executor that runs each task as it is submitted, in this process, as one worker would take them (a
    round's tasks are submitted largest first), and measures the heap after each: ``RssAnon`` as the task left
    it, then the seconds of :func:`pipeline.engine.memory.release_free_memory` and ``RssAnon`` after it; with
    ``trace``, the lines of code whose live allocations (tracemalloc) grew since the task before."""

    def __init__(self, limit: int, trace: bool):
        self.limit, self.trace, self.rows = limit, trace, []
        self.first = self.last = None

    def submit(self, fn, /, *args, **kwargs):
        from pipeline.engine import memory

        if len(self.rows) == self.limit:
            raise EnoughTasks
        future = Future()
        cpu = time.process_time()
        future.set_result(fn(*args, **kwargs))
        cpu = time.process_time() - cpu
        left = memory_bytes(os.getpid())[1]
        wall, release_cpu = time.perf_counter(), time.process_time()
        memory.release_free_memory()
        wall, release_cpu = time.perf_counter() - wall, time.process_time() - release_cpu
        row = {"task": args[1], "cpu_s": cpu, "left_mb": left / 1e6, "release_ms": wall * 1e3,
               "release_cpu_ms": release_cpu * 1e3, "in_use_mb": memory_bytes(os.getpid())[1] / 1e6}
        if self.trace:
            row["grown"] = self._grown()
        self.rows.append(row)
        return future

    def _grown(self, shown: int = 6) -> list[str]:
        """The lines whose live allocations grew most since the task before, by 10 KB or more (tracemalloc), with
        their totals."""
        import tracemalloc

        snapshot = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
        self.first = self.first or snapshot
        grown = [] if self.last is None else snapshot.compare_to(self.last, "lineno")[:shown]
        self.last = snapshot
        return [f"{stat.size_diff / 1e6:+.2f} MB ({stat.size / 1e6:.2f} MB, {stat.count:,} blocks) "
                f"{code_line(stat.traceback[0])}" for stat in grown if stat.size_diff >= 10_000]


def code_line(frame) -> str:
    """A tracemalloc frame as ``file:line``, the file relative to the checkout or to Python's standard library."""
    stdlib = sysconfig.get_paths()["stdlib"] + os.sep
    name = frame.filename.removeprefix(stdlib) if frame.filename.startswith(stdlib) else frame.filename
    return results.relative(f"{name}:{frame.lineno}")


def worker_heap(size: str, limit: int, trace: bool) -> None:
    """prepare's first round (the dedup chain) at ``size``, its first ``limit`` tasks run one after another in this
    process as a worker takes them, with the heap after each task and the cost of releasing what is free."""
    import tracemalloc

    from pipeline.config import load_config
    from pipeline.data.prepare import prepare_corpus
    from pipeline.data.sources import expand_sources
    from pipeline.data.steps import build_chain
    from pipeline.engine.executor import Tasks
    from stages.prepare import CODE_VERSION

    work = WORK / f"heap-{size}"
    shutil.rmtree(work, ignore_errors=True)
    config = load_config(write_config(work, size, str(build_scale_corpus.DATA / size), "out",
                                      f"{{kind: local, workers: {WORKERS}}}"))
    files = expand_sources(config.data.sources, root=config.here("."))
    chain = build_chain(config.prepare, config.data.sources, root=config.here("."))
    executor = InlineTasks(limit, trace)
    if trace:
        tracemalloc.start()
    try:
        os.chdir(work)
        prepare_corpus(files, config.prepare, config.output_path(config.prepare.output_dir), tasks=Tasks(executor),
                       names_root=config.names_root, code_version=CODE_VERSION, chain=chain)
    except EnoughTasks:
        pass
    finally:
        os.chdir(ROOT)
        tracemalloc.stop()
    print(f"{size}, prepare's first round (dedup chain), {len(executor.rows)} tasks in one process, largest first"
          f"{', tracemalloc on' if trace else ''}; heap (RssAnon) as each task left it, and after the release:")
    for row in executor.rows:
        print(f"  {row['task']}: {row['cpu_s']:.2f} s CPU; heap {row['left_mb']:.0f} MB -> {row['in_use_mb']:.0f} MB "
              f"after the release ({row['release_ms']:.1f} ms, {row['release_cpu_ms']:.1f} ms CPU)")
        for line in row.get("grown", ()):
            print(f"      {line}")
    releases = sorted(row["release_ms"] for row in executor.rows)
    print(f"release: {releases[len(releases) // 2]:.1f} ms median, {releases[-1]:.1f} ms at most, per task of "
          f"{sum(row['cpu_s'] for row in executor.rows) / len(executor.rows):.2f} s CPU on average")
    if trace and executor.first is not None:
        print(f"grown from the first task to the last (tracemalloc, {len(executor.rows)} tasks):")
        for stat in executor.last.compare_to(executor.first, "lineno")[:10]:
            print(f"  {stat.size_diff / 1e6:+.2f} MB ({stat.size / 1e6:.2f} MB, {stat.count_diff:+,} blocks) "
                  f"{code_line(stat.traceback[0])}")


# --- the Dask cluster over S3 -------------------------------------------------


class TimedRequests:
    """WSGI middleware counting the S3 requests the server answers, by method and kind, and their seconds."""

    def __init__(self, app):
        self.app, self.counts, self.seconds = app, Counter(), 0.0

    def __call__(self, environ, start_response):
        path = environ.get("PATH_INFO", "").strip("/")
        query = environ.get("QUERY_STRING", "")
        kind = "object" if "/" in path else ("list" if "list-type" in query or not query else "bucket")
        self.counts[f"{environ['REQUEST_METHOD']} {kind}"] += 1
        start = time.perf_counter()
        try:
            return list(self.app(environ, start_response))
        finally:
            self.seconds += time.perf_counter() - start


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def dask_cluster(env: dict[str, str]):
    """A ``dask scheduler`` and a ``dask worker`` (2 processes, 1 thread each) on 127.0.0.1; yields the address
    and the worker command's pid."""
    address = f"tcp://127.0.0.1:{free_port()}"
    logs = WORK / "dask"
    logs.mkdir(parents=True, exist_ok=True)
    scheduler = subprocess.Popen([str(BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port",
                                  address.rpartition(":")[2], "--no-dashboard"], env=env,
                                 stdout=subprocess.DEVNULL, stderr=open(logs / "scheduler.log", "wb"))  # noqa: SIM115
    worker = subprocess.Popen([str(BIN / "dask"), "worker", address, "--nworkers", str(WORKERS), "--nthreads", "1",
                               "--no-dashboard", "--memory-limit", "0"], env=env, stdout=subprocess.DEVNULL,
                              stderr=open(logs / "worker.log", "wb"))  # noqa: SIM115
    try:
        wait_for_workers(address, env)
        yield address, worker.pid
    finally:
        for process in (worker, scheduler):
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def wait_for_workers(address: str, env: dict[str, str], seconds: float = 120.0) -> None:
    code = (f"from distributed import Client; c = Client({address!r}, timeout=60); "
            f"c.wait_for_workers({WORKERS}, timeout={seconds}); c.close()")
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=seconds + 60)


def dask_run(size: str, server: S3Server) -> tuple[dict[str, StageFigures], dict[str, StageFigures],
                                                 dict[str, tuple[int, list[str]]]]:
    """``size`` (the dedup chain) with its raw files in S3, twice: on the local pool writing to local disk, and on
    the Dask cluster writing to S3; the figures per stage of each, and how each stage's outputs compare
    (:func:`same_outputs`). The document IDs name the source files, so both runs read the same objects."""
    raw = f"s3://scale/raw/{size}"
    timed, env, fs = server
    fs.put(str(build_scale_corpus.DATA / size) + "/", f"scale/raw/{size}/", recursive=True)
    local_work, remote_work = WORK / f"{size}-s3-local", WORK / f"{size}-s3-dask"
    for work in (local_work, remote_work):
        shutil.rmtree(work, ignore_errors=True)
    config = write_config(local_work, size, raw, "out", f"{{kind: local, workers: {WORKERS}}}")
    local = {stage: run_stage(config, stage, env=env) for stage in STAGES}
    remote = {}
    with dask_cluster(env) as (address, worker_pid):
        config = write_config(remote_work, size, raw, "s3://scale/out",
                              f"{{kind: dask, address: '{address}', workers: {WORKERS}}}")
        for stage in STAGES:
            before, seconds = Counter(timed.counts), timed.seconds
            remote[stage] = run_stage(config, stage, env=env, workers_of=worker_pid)
            remote[stage].requests = Counter(timed.counts) - before
            remote[stage].store_s = timed.seconds - seconds
            remote[stage].output_mb = remote_bytes(fs, f"scale/out/{OUTPUTS[stage]}") / 1e6
            print(f"  {size} on Dask over S3, {stage}: {describe(remote[stage])}", flush=True)
    fs.get("scale/out/", str(remote_work / "remote") + "/", recursive=True)
    comparison = {stage: same_outputs(remote_work / "remote", local_work / "out", stage) for stage in STAGES}
    return local, remote, comparison


S3Server = tuple  # what s3_server yields: (TimedRequests, environment, s3fs client)


@contextmanager
def s3_server() -> Iterator[S3Server]:
    """moto's S3 server on 127.0.0.1, run by this process, with a bucket ``scale``; yields its request counter
    (:class:`TimedRequests`), the environment of a process that uses it (this one's is set so too) and an s3fs
    client of it. One for the whole run: the store clients of this process keep the first endpoint they see."""
    import s3fs
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's server logs every request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    server._server.app = timed = TimedRequests(server._server.app)
    host, port = server.get_host_and_port()
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": f"http://{host}:{port}"}
    env.pop("AWS_PROFILE", None)
    os.environ.update({key: env[key] for key in env if key.startswith("AWS_")})
    try:
        fs = s3fs.S3FileSystem(use_listings_cache=False)
        fs.mkdir("scale")
        yield timed, env, fs
    finally:
        server.stop()


# stages/export.py's run alone, in a process of its own: export's driver, without the runner around it
EXPORT_ONLY = """\
import sys
from pipeline.config import load_config
from stages import export
export.run(load_config(sys.argv[-1]))
"""


def export_s3(sizes: list[str], server: S3Server) -> Iterator[str]:
    """Export alone over S3 at each size: the tokenizer and shards of its local run (``--sizes SIZE``) uploaded to
    the server as the stages commit them, then :func:`stages.export.run` in its own process, writing there; its
    peak resident set and largest anonymous memory (sampled every 50 ms), its CPU and wall seconds, its requests,
    and whether the files it wrote are byte for byte those of the local run's export."""
    from pipeline.engine import storage

    for size in sizes:
        if not (WORK / size / "dedup" / "out" / "export").is_dir():
            raise SystemExit(f"no local run of {size} ({results.relative(str(WORK / size))}); run --sizes {size} first")
    timed, env, fs = server
    for size in sizes:
        local_out, work, out = WORK / size / "dedup" / "out", WORK / f"{size}-export-s3", f"s3://scale/export-{size}"
        shutil.rmtree(work, ignore_errors=True)
        with storage.local_output_dir(f"{out}/shards") as staging:
            shutil.copytree(local_out / "shards", staging, dirs_exist_ok=True)
        with storage.output_file(f"{out}/tokenizer/tokenizer.json") as tmp:
            shutil.copyfile(local_out / "tokenizer" / "tokenizer.json", tmp)
        config = write_config(work, size, str(build_scale_corpus.DATA / size), out,
                              f"{{kind: local, workers: {WORKERS}}}")
        before = Counter(timed.counts)
        figures = run_stage(config, "export", env=env, command=[sys.executable, "-c", EXPORT_ONLY])
        requests = ", ".join(f"{n:,} {kind}" for kind, n in sorted((Counter(timed.counts) - before).items()))
        fs.get(f"scale/export-{size}/export/", str(work / "remote") + "/", recursive=True)
        remote, local = committed_files(work / "remote"), local_files(local_out / "export")
        same = sum(remote.get(name) == data for name, data in local.items())
        yield (f"{size}: export alone over S3, {sum(map(len, local.values())) / 1e6:,.0f} MB exported: resident "
               f"{figures.driver_peak_mb:.0f} MB ({figures.driver_anon_mb:.0f} anonymous), {figures.cpu_s:.1f} s "
               f"CPU, {figures.wall_s:.1f} s wall, load {figures.load:.1f}; {same} of {len(local)} files "
               f"byte-identical to the local run's ({len(remote)} written); S3 requests: {requests}")


def remote_bytes(fs, prefix: str) -> int:
    return sum(info["size"] for info in fs.find(prefix, detail=True).values()) if fs.exists(prefix) else 0


def committed_files(mirror: Path) -> dict[str, bytes]:
    """The files of a remote output, copied to ``mirror``, as its commit file names them (the attempt prefix
    left out)."""
    if mirror.is_file():
        return {"": mirror.read_bytes()}
    commit = json.loads((mirror / "_lmprep_commit.json").read_bytes())
    return {name: (mirror / commit["attempt"] / name).read_bytes() for name in commit["files"]}


def local_files(path: Path) -> dict[str, bytes]:
    if path.is_file():
        return {"": path.read_bytes()}
    return {str(file.relative_to(path)): file.read_bytes() for file in path.rglob("*") if file.is_file()}


def same_outputs(remote_copy: Path, local_out: Path, stage: str) -> tuple[int, list[str]]:
    """The files of ``stage``'s remote output (copied to ``remote_copy``) equal byte for byte to the local run's,
    and those that differ (or are on one side only)."""
    output = OUTPUTS[stage] if stage != "tokenizer" else "tokenizer/tokenizer.json"
    remote, local = committed_files(remote_copy / output), local_files(local_out / output)
    common = sorted(set(remote) & set(local))
    differing = [name for name in common if remote[name] != local[name]]
    for name in differing:
        print(f"  {stage}/{name} differs: {first_difference(remote[name], local[name])}")
    return len(common) - len(differing), sorted(differing + sorted(set(remote) ^ set(local)))


def first_difference(remote: bytes, local: bytes) -> str:
    at = next((i for i, (a, b) in enumerate(zip(remote, local, strict=False)) if a != b), min(len(remote), len(local)))
    return f"at byte {at}: {remote[max(0, at - 60):at + 60]!r} against {local[max(0, at - 60):at + 60]!r}"


def same_content(name: str, remote: bytes, local: bytes, names: tuple[str, str]) -> bool:
    """Whether two files hold the same values once the remote source names are replaced by the local ones."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def values(data: bytes) -> str:
        if name.endswith(".arrow"):
            try:
                return repr(pa.ipc.open_file(pa.BufferReader(data)).read_all().to_pylist())
            except pa.ArrowInvalid:  # the prepared parts are Arrow streams
                return repr(pa.ipc.open_stream(pa.BufferReader(data)).read_all().to_pylist())
        if name.endswith(".parquet"):
            return repr(pq.read_table(pa.BufferReader(data)).to_pylist())
        return data.decode("utf-8", "replace")

    return values(remote).replace(*names) == values(local)


def report_dask(size: str, local: dict[str, StageFigures], remote: dict[str, StageFigures],
                comparison: dict[str, tuple[int, list[str]]]) -> None:
    print(f"{size} (dedup chain), raw files in S3: on a Dask cluster writing to S3 against local processes writing "
          f"to local disk")
    for stage in STAGES:
        theirs, ours = remote[stage], local[stage]
        same, differing = comparison[stage]
        requests = ", ".join(f"{count:,} {kind}" for kind, count in sorted(theirs.requests.items()))
        print(f"  {stage}: {same} files byte-identical, {len(differing)} differing{': ' if differing else ''}"
              f"{', '.join(differing[:5])}; {theirs.wall_s:.1f} s wall (local {ours.wall_s:.1f}), {theirs.cpu_s:.1f} s "
              f"CPU (local {ours.cpu_s:.1f}), driver {theirs.driver_peak_mb:.0f} MB (local {ours.driver_peak_mb:.0f}), "
              f"largest worker {theirs.worker_peak_mb:.0f} MB (local {ours.worker_peak_mb:.0f}), {theirs.tasks} tasks, "
              f"overhead per task {overhead(theirs)} (local {overhead(ours)}); S3 requests: {requests or 'none'}; "
              f"server {theirs.store_s:.1f} s = {theirs.store_s / max(WORKERS * theirs.wall_s, 1e-9):.0%} of the "
              f"workers' time")


def overhead(figures: StageFigures) -> str:
    """``(workers × wall − Σ task seconds) / tasks``: what a task costs beyond its own work (the driver's phases
    count in it); "–" for a stage without tasks."""
    return f"{(WORKERS * figures.wall_s - figures.task_s) / figures.tasks:.2f} s" if figures.tasks else "–"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", choices=sorted(build_scale_corpus.SIZES),
                        help="the sizes to run [all three, unless --dask or --plan is given]")
    parser.add_argument("--dask", choices=sorted(build_scale_corpus.SIZES),
                        help="run this size on a Dask cluster over S3, beside local processes")
    parser.add_argument("--plan", nargs="*", choices=sorted(PLAN_CASES),
                        help="prepare over the builder's many small files and one huge file (and the 1/16 corpus "
                             "beside them): the task plan, the listings, the driver's memory")
    parser.add_argument("--worker-heap", choices=sorted(build_scale_corpus.SIZES),
                        help="prepare's first round at this size, its first --tasks tasks in one process: the heap "
                             "after each task, what releasing the allocators' free memory gives back and costs, "
                             "then (tracemalloc) what grew between tasks, by line of code")
    parser.add_argument("--tasks", type=int, default=15, help="the tasks of --worker-heap [%(default)s]")
    parser.add_argument("--export-s3", nargs="+", choices=sorted(build_scale_corpus.SIZES),
                        help="export alone over S3 at these sizes, from the shards of their local runs (--sizes)")
    parser.add_argument("--plot", type=Path, default=ROOT / "docs" / "scale.png")
    results.add_arguments(parser)
    args = parser.parse_args()
    if args.smoke:
        build_scale_corpus.build(smoke=True)
        build_scale_corpus.write_small_files(100)
        build_scale_corpus.write_huge_file(0.004)
        args.sizes, args.dask, args.plan = list(build_scale_corpus.SIZES), "sixteenth", list(PLAN_CASES)
        args.worker_heap, args.export_s3 = "sixteenth", ["sixteenth"]
        args.plot = WORK / "scale.png"
    elif not (args.sizes or args.dask or args.plan is not None or args.worker_heap or args.export_s3):
        args.sizes = list(build_scale_corpus.SIZES)
    needed = {*(args.sizes or ()), *(size for size in (args.dask, args.worker_heap) if size), *(args.plan or ()),
              *(args.export_s3 or ())}
    missing = sorted(name for name in needed if not (build_scale_corpus.DATA / name).is_dir())
    if missing:
        raise SystemExit(f"no corpus for {', '.join(missing)}; run benchmarks/build_scale_corpus.py first")
    if args.sizes:
        run_sizes(sorted(args.sizes, key=list(build_scale_corpus.SIZES).index), args.plot)
    for case in args.plan or ():
        print(plan_case(case), flush=True)
    if args.dask or args.export_s3:
        with s3_server() as server:
            if args.dask:
                report_dask(args.dask, *dask_run(args.dask, server))
            for line in export_s3(sorted(args.export_s3 or (), key=list(build_scale_corpus.SIZES).index), server):
                print(line, flush=True)
    if args.worker_heap:
        for trace in (False, True):
            worker_heap(args.worker_heap, args.tasks, trace)


def run_sizes(sizes: list[str], plot_path: Path) -> None:
    megabytes = {size: raw_megabytes(size) for size in sizes}
    runs = {}
    for size in sizes:
        print(f"{size}: {megabytes[size]:,.1f} MB of text", flush=True)
        runs[size] = local_run(size)
    print(table(megabytes, runs))
    plot(megabytes, runs, plot_path)
    print(f"plot: {results.relative(str(plot_path.resolve()))}")


MODES = ("--dask", "--plan", "--worker-heap", "--export-s3")  # each writes a section of its own, bench_scale_<mode>

if __name__ == "__main__":
    results.run(next((f"bench_scale_{mode[2:].replace('-', '_')}" for mode in MODES
                      if mode in sys.argv[1:] and "--sizes" not in sys.argv[1:] and "--smoke" not in sys.argv[1:]),
                     "bench_scale"), main)
