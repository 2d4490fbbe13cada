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
  the last 50 ms of a process's life);
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

    python benchmarks/build_scale_corpus.py
    python benchmarks/bench_scale.py [--sizes sixteenth quarter full] [--dask quarter] [--smoke]

``--smoke``: the builder's 2 MB corpus at its three sizes, a 1,024-ID tokenizer, and the Dask run at the
smallest size, in a temporary directory (seconds, once the processes are up).
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
import time
from collections import Counter
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
    - exact_dedup: {{}}
    - gopher_quality: {{min_words: 50}}
    - gopher_repetition: {{}}
    - c4: {{min_sentences: 5}}
    - fineweb: {{}}
    - language: {{languages: [en], min_score: 0.5}}
    - near_dedup: {{threshold: 0.8}}
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
SOURCES = {"txt": '    - {{glob: "{raw}/*.txt", separator: "<|endoftext|>"}}',
           "jsonl.gz": '    - {{glob: "{raw}/*.jsonl.gz", field: text}}',
           "parquet": '    - {{glob: "{raw}/*.parquet", field: text}}'}
OUTPUTS = {"prepare": "prepared", "tokenizer": "tokenizer", "encode": "shards", "export": "export"}
TASK_LINE = re.compile(r"^task .*: done on .* in ([\d.]+) s")


@dataclass
class StageFigures:
    wall_s: float
    cpu_s: float
    driver_cpu_s: float
    driver_peak_mb: float
    worker_peak_mb: float
    written_mb: float
    output_mb: float
    tasks: int
    task_s: float
    load: float
    requests: Counter[str] = field(default_factory=Counter)
    store_s: float = 0.0


def vmhwm_bytes(pid: int) -> int | None:
    """The peak resident set of ``pid`` so far (``VmHWM``); ``None`` once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None


def reset_peaks(pids: list[int]) -> None:
    """Start each process's ``VmHWM`` again from its current resident set (``clear_refs`` 5), so that a
    long-lived Dask worker's peak is the stage's own."""
    for pid in pids:
        try:
            Path(f"/proc/{pid}/clear_refs").write_text("5")
        except OSError:
            continue


def run_stage(config: Path, stage: str, *, env: dict[str, str], workers_of: int | None = None) -> StageFigures:
    """``lmprep run STAGE`` in its own process, its tree sampled until it exits; ``workers_of`` is the pid
    whose descendants are the workers when they are not the driver's (a Dask worker process)."""
    outside = [] if workers_of is None else proc.descendants(workers_of)
    reset_peaks(outside)
    cpu_outside = {pid: proc.cpu_seconds(pid) or 0.0 for pid in outside}
    start = time.perf_counter()
    with open(config.parent / f"{stage}.out", "wb") as out:
        process = subprocess.Popen([str(BIN / "lmprep"), "run", stage, "--config", str(config)], env=env,
                                   stdout=out, stderr=subprocess.STDOUT, cwd=config.parent)
    driver_peak = worker_peak = 0
    driver_cpu = 0.0
    while True:  # wait4, not poll: the exit's resource usage covers the driver and the workers it reaped
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            break
        driver_peak = max(driver_peak, vmhwm_bytes(process.pid) or 0)
        driver_cpu = proc.cpu_seconds(process.pid) or driver_cpu
        for pid in proc.descendants(process.pid) + (proc.descendants(workers_of) if workers_of else []):
            worker_peak = max(worker_peak, vmhwm_bytes(pid) or 0)
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
                        written_mb=usage.ru_oublock * 512 / 1e6,
                        output_mb=tree_bytes(config.parent / "out" / OUTPUTS[stage]) / 1e6, tasks=tasks,
                        task_s=task_s, load=os.getloadavg()[0])


def stage_tasks(log: Path) -> tuple[int, float]:
    """The tasks a stage's log names as done, and their seconds added up."""
    seconds = [float(match[1]) for line in log.read_text("utf-8").splitlines() if (match := TASK_LINE.match(line))]
    return len(seconds), sum(seconds)


def tree_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(file.stat().st_size for file in path.rglob("*") if file.is_file()) if path.exists() else 0


def write_config(work: Path, size: str, raw: str, out: str, executor: str) -> Path:
    """The config of one run of ``size`` (a source for each format its directory holds: a smoke run's tiny
    corpus may lack one) with its raw files at ``raw`` and its outputs under ``out``."""
    work.mkdir(parents=True, exist_ok=True)
    path = work / "lmprep.yaml"
    formats = [kind for kind in SOURCES if any((build_scale_corpus.DATA / size).glob(f"*.{kind}"))]
    sources = "\n".join(SOURCES[kind].format(raw=raw) for kind in formats)
    path.write_text(CONFIG.format(sources=sources, out=out, executor=executor, workers=WORKERS,
                                  vocab=1024 if results.SMOKE else 65536), "utf-8")
    return path


def local_run(size: str) -> dict[str, StageFigures]:
    work = WORK / size
    shutil.rmtree(work, ignore_errors=True)
    executor = f"{{kind: local, workers: {WORKERS}}}"
    config = write_config(work, size, str(build_scale_corpus.DATA / size), "out", executor)
    figures = {}
    for stage in STAGES:
        figures[stage] = run_stage(config, stage, env=dict(os.environ))
        print(f"  {size} {stage}: {describe(figures[stage])}", flush=True)
    return figures


def describe(figures: StageFigures) -> str:
    return (f"{figures.wall_s:.1f} s wall, {figures.cpu_s:.1f} s CPU (driver {figures.driver_cpu_s:.1f}), "
            f"driver {figures.driver_peak_mb:.0f} MB, largest worker {figures.worker_peak_mb:.0f} MB, "
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


METRICS = {"wall s": "wall_s", "CPU s": "cpu_s", "driver MB": "driver_peak_mb", "worker MB": "worker_peak_mb",
           "written MB": "written_mb", "tasks": "tasks"}


def table(megabytes: dict[str, float], runs: dict[str, dict[str, StageFigures]]) -> str:
    """One row per stage and size, and a row per stage with the fitted exponents."""
    header = "| stage | corpus MB | " + " | ".join(METRICS) + " |"
    rows = [header, "|" + "---|" * (len(METRICS) + 2)]
    for stage in STAGES:
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
    for stage in STAGES:
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


def dask_run(size: str) -> tuple[dict[str, StageFigures], dict[str, tuple[int, int, list[str]]]]:
    """``size`` with raw files and outputs in S3 and tasks on the Dask cluster; its figures per stage and how
    each stage's output compares with the local run's (:func:`same_as_local`)."""
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
        fs.put(str(build_scale_corpus.DATA / size) + "/", f"scale/raw/{size}/", recursive=True)
        work = WORK / f"{size}-dask"
        shutil.rmtree(work, ignore_errors=True)
        figures = {}
        with dask_cluster(env) as (address, worker_pid):
            config = write_config(work, size, f"s3://scale/raw/{size}", "s3://scale/out",
                                  f"{{kind: dask, address: '{address}', workers: {WORKERS}}}")
            for stage in STAGES:
                before, seconds = Counter(timed.counts), timed.seconds
                figures[stage] = run_stage(config, stage, env=env, workers_of=worker_pid)
                figures[stage].requests = Counter(timed.counts) - before
                figures[stage].store_s = timed.seconds - seconds
                figures[stage].output_mb = remote_bytes(fs, f"scale/out/{OUTPUTS[stage]}") / 1e6
                print(f"  {size} on Dask over S3, {stage}: {describe(figures[stage])}", flush=True)
        fs.get("scale/out/", str(work / "remote") + "/", recursive=True)
        comparison = {stage: same_as_local(work / "remote", size, stage) for stage in STAGES}
    finally:
        server.stop()
    return figures, comparison


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


def same_as_local(remote_copy: Path, size: str, stage: str) -> tuple[int, int, list[str]]:
    """How the remote output of ``stage`` compares with the local run's: files equal byte for byte, files equal
    once the document IDs' source names are mapped (``s3://scale/raw/SIZE/part-0000.txt`` for the local path
    relative to the project), and the files that differ otherwise."""
    output = OUTPUTS[stage] if stage != "tokenizer" else "tokenizer/tokenizer.json"
    remote, local = committed_files(remote_copy / output), local_files(WORK / size / "out" / output)
    names = (f"s3://scale/raw/{size}/", os.path.relpath(build_scale_corpus.DATA / size, WORK / size) + "/")
    exact = mapped = 0
    differing = sorted(set(remote) ^ set(local))
    for name in sorted(set(remote) & set(local)):
        if remote[name] == local[name]:
            exact += 1
        elif same_content(name, remote[name], local[name], names):
            mapped += 1
        else:
            differing.append(name)
            print(f"  {stage}/{name} differs: {first_difference(remote[name], local[name])}")
    return exact, mapped, differing


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
                comparison: dict[str, tuple[int, int, list[str]]]) -> None:
    print(f"{size} on a Dask cluster over S3, against the local run:")
    for stage in STAGES:
        theirs, ours = remote[stage], local[stage]
        exact, mapped, differing = comparison[stage]
        print(f"  {stage}: {exact} files byte-identical, {mapped} equal once the source names are mapped (the IDs "
              f"name the s3:// URL, not the local path), {len(differing)} differing{': ' if differing else ''}"
              f"{', '.join(differing[:5])}")
        requests = ", ".join(f"{count:,} {kind}" for kind, count in sorted(theirs.requests.items()))
        print(f"  {stage}: {theirs.wall_s:.1f} s wall (local {ours.wall_s:.1f}), {theirs.cpu_s:.1f} s CPU "
              f"(local {ours.cpu_s:.1f}), {theirs.tasks} tasks; overhead per task {overhead(theirs):.2f} s "
              f"(local {overhead(ours):.2f}); S3: {requests or 'none'}; server {theirs.store_s:.1f} s = "
              f"{theirs.store_s / max(WORKERS * theirs.wall_s, 1e-9):.0%} of the workers' time")


def overhead(figures: StageFigures) -> float:
    return (WORKERS * figures.wall_s - figures.task_s) / max(figures.tasks, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", choices=sorted(build_scale_corpus.SIZES),
                        default=list(build_scale_corpus.SIZES))
    parser.add_argument("--dask", choices=sorted(build_scale_corpus.SIZES),
                        help="also run this size on a Dask cluster over S3")
    parser.add_argument("--plot", type=Path, default=ROOT / "docs" / "scale.png")
    results.add_arguments(parser)
    args = parser.parse_args()
    if args.smoke:
        build_scale_corpus.build(smoke=True)
        args.dask = args.dask or "sixteenth"
        args.plot = WORK / "scale.png"
    missing = [size for size in args.sizes if not (build_scale_corpus.DATA / size).is_dir()]
    if missing:
        raise SystemExit(f"no corpus for {', '.join(missing)}; run benchmarks/build_scale_corpus.py first")
    sizes = sorted(args.sizes, key=list(build_scale_corpus.SIZES).index)
    megabytes = {size: raw_megabytes(size) for size in sizes}
    runs = {}
    for size in sizes:
        print(f"{size}: {megabytes[size]:,.1f} MB of text", flush=True)
        runs[size] = local_run(size)
    print(table(megabytes, runs))
    plot(megabytes, runs, args.plot)
    print(f"plot: {results.relative(str(args.plot.resolve()))}")
    if args.dask:
        local = runs.get(args.dask) or local_run(args.dask)
        remote, comparison = dask_run(args.dask)
        report_dask(args.dask, local, remote, comparison)


if __name__ == "__main__":
    results.run("bench_scale_dask" if "--dask" in sys.argv and "--smoke" not in sys.argv else "bench_scale", main)
