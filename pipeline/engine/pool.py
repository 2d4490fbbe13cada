"""Worker processes that never outlive their driver, order-preserving, memory-bounded mapping over any
``concurrent.futures.Executor``, and the pairwise fold of a map-reduce whose shape the item count alone sets.

A worker forked by a pool shares its driver's open files: the run lock among them, and the pipe of
``lmprep run | tee log``. A worker left running after its driver was killed would keep the lock
held and the pipe open for ever, so every worker of :func:`process_pool` dies with its driver and
holds none of the descriptors registered with :func:`keep_from_workers`.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, Future
from typing import TYPE_CHECKING, Any, TypeVar

from pipeline.errors import PipelineError

if TYPE_CHECKING:
    from concurrent.futures import ProcessPoolExecutor

_T = TypeVar("_T")
_R = TypeVar("_R")

PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when the thread that forked it ends
WATCHDOG_SECONDS = 0.5  # where there is no prctl: how often a worker checks that its driver still lives
KILL_SECONDS = 5.0  # the longest wait for a killed worker to be gone
_driver_only_fds: set[int] = set()  # descriptors no worker may keep (the run lock)


@contextlib.contextmanager
def keep_from_workers(fd: int) -> Iterator[None]:
    """While in this block, the workers that :func:`process_pool` starts close ``fd`` as they start.

    ``fork`` copies every descriptor whatever its close-on-exec flag, and a ``flock`` lock lasts as long
    as any copy of its descriptor is open: without this, a worker would hold the driver's run lock.
    """
    _driver_only_fds.add(fd)
    try:
        yield
    finally:
        _driver_only_fds.discard(fd)


@contextlib.contextmanager
def process_pool(workers: int) -> Iterator[ProcessPoolExecutor]:
    """A process pool whose workers die with this process, ignore Ctrl-C and hold no driver-only descriptor.

    Ctrl-C goes to the whole process group of a terminal: the driver alone handles it, and on a
    ``KeyboardInterrupt`` in the block it kills the workers rather than waiting for their tasks. The pool
    must be used from a thread that lives as long as it does (on Linux a worker gets its parent-death
    signal when the thread that started it ends).
    """
    from concurrent.futures import ProcessPoolExecutor  # multiprocessing: only where a pool starts

    with ProcessPoolExecutor(workers, initializer=_start_worker, initargs=(os.getpid(),)) as pool:
        try:
            _start_workers(pool)
            yield pool
        except KeyboardInterrupt:
            kill_workers(pool)
            raise


def kill_workers(executor: Executor) -> None:
    """Kill a process pool's workers and wait until they are gone (their tasks' outputs are being thrown
    away); other executors are left."""
    from concurrent.futures import ProcessPoolExecutor

    if isinstance(executor, ProcessPoolExecutor):
        processes = list((executor._processes or {}).values())  # no public way before Python 3.14
        for process in processes:
            with contextlib.suppress(OSError):
                process.kill()
        for process in processes:
            process.join(KILL_SECONDS)


@contextlib.contextmanager
def ctrl_c_held() -> Iterator[Callable[[], None]]:
    """Hold back Ctrl-C until the returned ``release`` is called or the block ends, and raise it then.

    Python runs a signal handler in the main thread between two bytecodes wherever that is, so a
    KeyboardInterrupt could land inside distributed's start-up; within this block the handler only
    notes the Ctrl-C. Only the main thread may set a handler: elsewhere nothing is held back.
    """
    if threading.current_thread() is not threading.main_thread():
        yield lambda: None
        return
    pressed: list[int] = []
    handler = signal.signal(signal.SIGINT, lambda signum, frame: pressed.append(signum))
    released = False

    def release() -> None:
        nonlocal released
        if not released:
            released = True
            signal.signal(signal.SIGINT, handler)
            if pressed:
                raise KeyboardInterrupt

    try:
        yield release
    finally:
        release()


def _start_workers(pool: ProcessPoolExecutor) -> None:
    """Fork the workers now, with Ctrl-C held back until they run.

    A SIGINT that arrives during ``fork`` is raised in an at-fork handler (logging registers one), where
    Python drops it: the run would go on as if Ctrl-C had not been pressed. Held back, it is raised here.
    (With ``fork`` the pool starts all its workers at the first task.)
    """
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        pool.submit(int).result()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def _start_worker(driver: int) -> None:
    """A new worker's set-up: close the driver-only descriptors, ignore SIGINT, die with ``driver``."""
    for fd in _driver_only_fds:
        with contextlib.suppress(OSError):
            os.close(fd)
    _driver_only_fds.clear()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if not _set_parent_death_signal():
        threading.Thread(target=_watch_driver, args=(driver,), name="driver watchdog", daemon=True).start()
    if os.getppid() != driver:  # the driver died before the signal was set
        os._exit(1)


def _set_parent_death_signal() -> bool:
    """Ask Linux to SIGKILL this process when its parent ends; False where there is no ``prctl``."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch_driver(driver: int) -> None:
    """End this process once its parent is no longer ``driver`` (it was re-parented: the driver died)."""
    while os.getppid() == driver:
        time.sleep(WATCHDOG_SECONDS)
    os._exit(1)


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


class TreeFold:
    """Pairwise folding in item order, like a binary counter: ((0+1)+(2+3))+((4+5)+6) ...

    The tree's shape depends on the number of values alone, so the result (down to dict order) is the
    same for any worker count. ``combine`` may return a future (Dask): the tree is then built on the
    cluster while the leaves are still running.
    """

    def __init__(self, combine: Callable[[Any, Any], Any]):
        self._combine = combine
        self._stack: list[tuple[int, Any]] = []  # (level, value), levels strictly decreasing

    def add(self, value: Any) -> None:
        level = 0
        while self._stack and self._stack[-1][0] == level:
            _, left = self._stack.pop()
            value, level = self._combine(left, value), level + 1
        self._stack.append((level, value))

    def result(self) -> Any:
        if not self._stack:
            raise PipelineError("nothing to reduce: no partitions")
        _, value = self._stack.pop()
        while self._stack:
            _, left = self._stack.pop()
            value = self._combine(left, value)
        return value
