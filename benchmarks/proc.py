"""Processes as Linux's ``/proc`` shows them: a process's descendants, its CPU seconds and resident set.

What the benchmarks need of a process tree, from the standard library alone (``resource`` covers a
process and its waited-for children only; a pool's workers are often neither), and :func:`run_tree`, a
command run with its tree watched: wall, CPU of the tree, peak resident set of the process and of its
largest descendant.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def children(pid: int) -> list[int]:
    """The direct children of ``pid`` (of all its threads); none once it is gone."""
    found: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except FileNotFoundError:
        return found
    for task in tasks:
        try:
            found += [int(child) for child in (task / "children").read_text().split()]
        except FileNotFoundError:
            continue
    return found


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``: its children, theirs, and so on."""
    found, queue = [], children(pid)
    while queue:
        child = queue.pop()
        found.append(child)
        queue += children(child)
    return found


def cpu_seconds(pid: int) -> float | None:
    """User plus system CPU seconds of ``pid`` so far; ``None`` once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime (fields 14 and 15 of proc(5))


def rss_bytes(pid: int) -> int | None:
    """The resident set of ``pid`` now; ``None`` once it is gone."""
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
    except (FileNotFoundError, ProcessLookupError):
        return None


def peak_rss_bytes(pid: int) -> int | None:
    """The peak resident set of ``pid`` so far (``VmHWM``); ``None`` once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    line = next((line for line in status.splitlines() if line.startswith("VmHWM:")), None)
    return int(line.split()[1]) * 1024 if line else None


@dataclass(frozen=True)
class TreeRun:
    returncode: int
    wall_s: float
    cpu_s: float  # the process's and every descendant's it (or they) waited for
    peak_bytes: int  # the process's VmHWM
    descendant_peak_bytes: int  # the largest VmHWM among its descendants (a forked worker's counts shared pages)


def run_tree(command: list[str], *, sample_seconds: float = 0.02, **popen) -> TreeRun:
    """Run ``command`` to its end, its tree sampled every ``sample_seconds`` (a peak is a high-water mark, so a
    sample misses only what grew in a process's last moments); ``popen``: ``subprocess.Popen``'s arguments."""
    start = time.perf_counter()
    process = subprocess.Popen(command, **popen)
    peak = descendant_peak = 0
    while True:  # wait4, not poll: the exit's resource usage covers the process and the workers it reaped
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            break
        peak = max(peak, peak_rss_bytes(process.pid) or 0)
        for child in descendants(process.pid):
            descendant_peak = max(descendant_peak, peak_rss_bytes(child) or 0)
        time.sleep(sample_seconds)
    process.returncode = os.waitstatus_to_exitcode(status)
    return TreeRun(returncode=process.returncode, wall_s=time.perf_counter() - start,
                   cpu_s=usage.ru_utime + usage.ru_stime, peak_bytes=peak,
                   descendant_peak_bytes=descendant_peak)
