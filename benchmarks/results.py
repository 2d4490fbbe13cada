"""Where the benchmarks put their figures: one section per benchmark in ``benchmarks/RESULTS.md``, stamped.

Every benchmark runs its ``main`` through :func:`run`, which lets what it prints through and, at the
end, writes it to the results file under the benchmark's heading, replacing that benchmark's previous
section, with a stamp: the commit measured (``-dirty`` when the work tree had changes), the date (UTC), the
command line, the machine's cores and its load average (1, 5 and 15 minutes) before and after the run. A
``--smoke`` run (a few seconds, tiny inputs, figures that mean nothing) is stamped as one. The figures in
``docs/performance.md`` are copied from this file, with their stamp.

``--results PATH`` (every benchmark takes it) writes another file instead, as the smoke test does.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
DATA_VARIABLE = "LMPREP_BENCH_DATA"  # where a smoke run's subprocesses find its data
SMOKE_VARIABLE = "LMPREP_BENCH_SMOKE"  # set for a smoke run's subprocesses, which get no --smoke
if "--smoke" in sys.argv[1:]:
    os.environ[SMOKE_VARIABLE] = "1"
SMOKE = os.environ.get(SMOKE_VARIABLE) == "1"  # a benchmark's sizes may depend on it at import
_SMOKE_DATA: list[Path] = []
HEADER = """\
# Benchmark results

Written by the benchmarks in this directory (`benchmarks/results.py`): each run replaces its own
section, stamped with the commit it measured, the date and the machine's load. Sections marked
*smoke* come from `--smoke` runs, which check that a benchmark runs; their figures mean nothing.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--smoke`` and ``--results``, which every benchmark takes."""
    parser.add_argument("--smoke", action="store_true",
                        help="tiny inputs, one repeat: check that the benchmark runs (seconds); figures mean nothing")
    parser.add_argument("--results", type=Path, default=RESULTS, help="the results file to write [%(default)s]")


def commit() -> str:
    """The commit of the checkout, ``-dirty`` when tracked files changed; ``unknown`` outside git."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("-dirty" if dirty else "")


def load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def relative(text: str) -> str:
    """``text`` with the checkout's own path left out: a results file names no directory of this machine."""
    return text.replace(f"{ROOT}/", "").replace(str(ROOT), ".")


def stamp(*, smoke: bool, load_before: str, argv: list[str]) -> str:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    kind = "smoke run (figures mean nothing)" if smoke else "measured"
    script = relative(str(Path(argv[0]).resolve()))
    return (f"{kind} at commit `{commit()}`, {now}, `{' '.join(['python', script, *argv[1:]])}`; "
            f"{os.cpu_count()} cores, load average {load_before} before, {load()} after; "
            f"Python {platform.python_version()}")


class _Tee(io.TextIOBase):
    def __init__(self, stream) -> None:
        self.stream, self.captured = stream, io.StringIO()

    def write(self, text: str) -> int:
        self.captured.write(text)
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()


def run(name: str, main: Callable[[], None], *, children: tuple[str, ...] = ("--child",)) -> None:
    """Run a benchmark's ``main``, its output shown as usual; when it returns, write that output as ``name``'s
    section. A run of the benchmark as its own subprocess (an argument starting with one of ``children``)
    records nothing: its parent prints what counts."""
    if any(arg.startswith(children) or arg.endswith("-child") for arg in sys.argv[1:]):
        main()
        return
    parser = argparse.ArgumentParser(add_help=False)
    add_arguments(parser)
    args, _ = parser.parse_known_args()
    before = load()
    tee = _Tee(sys.stdout)
    try:
        with contextlib.redirect_stdout(tee):
            main()
    finally:
        for directory in _SMOKE_DATA:
            shutil.rmtree(directory, ignore_errors=True)
    write_section(args.results, name, stamp(smoke=args.smoke, load_before=before, argv=sys.argv),
                  tee.captured.getvalue())


def data_dir() -> Path:
    """Where a benchmark keeps its generated data: ``benchmarks/.data`` (git-ignored), or for a ``--smoke`` run
    and the subprocesses it starts a temporary directory of its own, removed when the run ends."""
    if SMOKE and DATA_VARIABLE not in os.environ:
        os.environ[DATA_VARIABLE] = tempfile.mkdtemp(prefix="lmprep-bench-smoke-")
        _SMOKE_DATA.append(Path(os.environ[DATA_VARIABLE]))
    return Path(os.environ.get(DATA_VARIABLE) or ROOT / "benchmarks" / ".data")


def smoke_directory(name: str) -> Path:
    """A fresh directory for a smoke run's project, inside :func:`data_dir`."""
    return Path(tempfile.mkdtemp(prefix=f"{name}-", dir=data_dir()))


def write_section(path: Path, name: str, stamp_line: str, output: str) -> None:
    text = path.read_text("utf-8") if path.exists() else HEADER
    body = relative(output.rstrip("\n")).replace("```", "'''")
    section = f"## {name}\n\n{stamp_line}\n\n```text\n{body}\n```\n"
    pattern = re.compile(rf"^## {re.escape(name)}\n.*?(?=^## |\Z)", flags=re.MULTILINE | re.DOTALL)
    if pattern.search(text):
        text = pattern.sub(lambda _: section + "\n", text, count=1).rstrip("\n") + "\n"
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, "utf-8")
    tmp.replace(path)
