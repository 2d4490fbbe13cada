"""Order-preserving, memory-bounded mapping over any ``concurrent.futures.Executor``."""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, Future
from typing import TypeVar

_T = TypeVar("_T")
_R = TypeVar("_R")


def worker_count(requested: int) -> int:
    """The processes to start for ``requested`` workers: 0 means one per core, and more than the cores
    are capped to the cores. The work is CPU-bound, so extra processes would only cost memory, and
    every parallel output is identical for any worker count."""
    cores = os.cpu_count() or 1
    return min(requested, cores) if requested else cores


def ordered_map(executor: Executor, function: Callable[[_T], _R], items: Iterable[_T], *,
                max_in_flight: int) -> Iterator[_R]:
    """Like ``executor.map`` (results in input order) but with at most ``max_in_flight`` submitted items.

    ``Executor.map`` submits every item up front, which would hold the whole
    corpus in memory. Input order makes the results independent of the number
    of workers; pending work is cancelled if the consumer stops early or fails.
    """
    pending: deque[Future[_R]] = deque()
    try:
        for item in items:
            pending.append(executor.submit(function, item))
            if len(pending) >= max_in_flight:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        for future in pending:
            future.cancel()
