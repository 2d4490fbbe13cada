"""Giving a long-lived worker's freed memory back to the system between its tasks.

A worker process runs task after task, and the allocators keep what a task freed for the next one:
glibc's free lists and pyarrow's memory pool. Their retained memory adds up to the peak of the largest
task seen so far plus what earlier tasks left scattered between live blocks, so a worker's resident set
grew task after task though the memory in use did not (docs/scale.md, "Memory"). Releasing both after
each task bounds a worker's heap by the task it runs, at a cost of a few milliseconds per task (about 1 % of
the CPU of prepare's tasks at 1 GB: ``benchmarks/bench_scale.py --worker-heap``).
"""

from __future__ import annotations

import ctypes
import functools
import sys


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
