"""Processes as Linux's ``/proc`` shows them: a process's descendants, its CPU seconds and resident set.

What the benchmarks need of a process tree, from the standard library alone (``resource`` covers a
process and its waited-for children only; a pool's workers are often neither).
"""

from __future__ import annotations

import os
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
