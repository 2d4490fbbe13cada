"""Giving a long-lived worker's freed memory back to the system between its tasks.

A worker process runs task after task, and the allocators keep what a task freed for the next one:
glibc's free lists and pyarrow's memory pool. Their retained memory adds up to the peak of the largest
task seen so far plus what earlier tasks left scattered between live blocks, so a worker's resident set
grew task after task though the memory in use did not (docs/scale.md, "Memory"). Releasing both after a
task bounds a worker's heap by the task it runs, at a cost of a few milliseconds per task (about 1 % of
the CPU of prepare's tasks at 1 GB: ``benchmarks/bench_scale.py --worker-heap``), and of the pages the next
task faults in again: a worker releases once its heap has grown by more than :data:`KEPT_BYTES` since its
last release (:func:`release_after_task`), so that small tasks reuse what the one before them freed.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys

KEPT_BYTES = 16 << 20  # of heap growth a worker keeps between releases
_released_at: list[int] = []  # this process's heap (bytes) after its last release


def release_after_task() -> None:
    """:func:`release_free_memory` if the heap has grown by more than :data:`KEPT_BYTES` since this process's
    last release (or it has none, or its heap cannot be read), and note the heap after it.

    Released after every task, an encode worker's small tasks (a part of about a megabyte) each faulted their
    few megabytes in again: 171,000 page faults and about 0.2 s of CPU over 139 MB (docs/performance.md).
    """
    heap = _heap_bytes()
    if heap is not None and _released_at and heap - _released_at[0] <= KEPT_BYTES:
        return
    release_free_memory()
    _released_at[:] = [_heap_bytes() or 0]


def release_free_memory() -> None:
    """Return to the system what pyarrow's default memory pool and glibc's allocator hold free.

    pyarrow is released only where a task imported it (importing it costs more than a task's release);
    ``malloc_trim`` only where the C library is glibc.
    """
    pyarrow = sys.modules.get("pyarrow")
    if pyarrow is not None:
        pyarrow.default_memory_pool().release_unused()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> ctypes._CFuncPtr | None:
    """glibc's ``malloc_trim``, or None where the C library has none (musl, macOS)."""
    try:
        trim = ctypes.CDLL(None).malloc_trim  # the C library's symbols are the process's own
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def _heap_bytes() -> int | None:
    """This process's anonymous resident memory (resident less file-backed pages, ``/proc/self/statm``), or None
    where there is no such file."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            _, resident, shared = statm.read().split()[:3]
    except (OSError, ValueError):
        return None
    return (int(resident) - int(shared)) * os.sysconf("SC_PAGE_SIZE")
