"""How long a no-op ``status`` / ``run`` takes over gigabytes of dependencies.

    python benchmarks/bench_noop.py [--gigabytes 3] [--files 300] [--smoke]

Generates the files once under benchmarks/.data (git-ignored), runs a
two-stage pipeline once to fill the lock and the hash cache (this first pass
hashes everything), then times no-op ``status()`` and ``run()`` calls, which
should cost one ``stat`` per file. Also times a no-op after the hash cache is
deleted, to show what the cache saves.
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from pathlib import Path

import results

from pipeline.engine import atomic
from pipeline.engine.runner import Pipeline, Stage

DATA = results.data_dir() / "noop"
BLOCK = os.urandom(1 << 20)


def generate(root: Path, gigabytes: float, files: int) -> list[str]:
    raw = root / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    size = int(gigabytes * (1 << 30) / files)
    names = []
    for i in range(files):
        path = raw / f"part-{i:05d}.bin"
        if not path.exists() or path.stat().st_size != size:
            with open(path, "wb") as handle:
                for offset in range(0, size, len(BLOCK)):
                    handle.write(BLOCK[: min(len(BLOCK), size - offset)])
        names.append(str(path.relative_to(root)))
    return names


def pipeline(root: Path, deps: list[str]) -> Pipeline:
    def summarize() -> None:
        atomic.write_text(root / "out" / "summary.txt", f"{len(deps)} files\n")

    def report() -> None:
        atomic.write_text(root / "out" / "report.txt", (root / "out" / "summary.txt").read_text())

    stages = [Stage("summarize", tuple(deps), ("out/summary.txt",), ("p",), summarize),
              Stage("report", ("out/summary.txt", "raw"), ("out/report.txt",), ("p",), report)]
    return Pipeline(stages, param_value=lambda key: 1, state_dir="state", root=root)


def timed(label: str, action, repeat: int = 3) -> None:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        best = min(best, time.perf_counter() - start)
    print(f"{label:<42} {best:8.3f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gigabytes", type=float, default=3.0)
    parser.add_argument("--files", type=int, default=300)
    results.add_arguments(parser)
    args = parser.parse_args()
    data = DATA
    if args.smoke:
        args.gigabytes, args.files = 0.001, 3
    start = time.perf_counter()
    deps = generate(data, args.gigabytes, args.files)
    print(f"data: {args.gigabytes:g} GiB in {args.files} files ({time.perf_counter() - start:.1f} s to generate)")
    shutil.rmtree(data / "state", ignore_errors=True)
    shutil.rmtree(data / "out", ignore_errors=True)
    repeat = 1 if args.smoke else 3
    timed("first run (hashes everything twice over)", lambda: pipeline(data, deps).run(), repeat=1)
    timed("no-op status()", lambda: pipeline(data, deps).status(), repeat=repeat)
    timed("no-op run()", lambda: assert_nothing_ran(pipeline(data, deps).run()), repeat=repeat)
    (data / "state" / "hashes.json").unlink()
    timed("no-op run() without the hash cache", lambda: pipeline(data, deps).run(), repeat=1)


def assert_nothing_ran(ran: list[str]) -> None:
    if ran:
        raise SystemExit(f"expected a no-op, but ran {ran}")


if __name__ == "__main__":
    results.run("bench_noop", main)
