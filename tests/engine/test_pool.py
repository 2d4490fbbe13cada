"""ordered_map: input order whatever the completion order, and a bound on submitted work; process pools whose
workers ignore Ctrl-C, hold none of the driver's locks and die with it."""

from __future__ import annotations

import contextlib
import fcntl
import multiprocessing
import multiprocessing.synchronize
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import running

from pipeline.engine.pool import keep_from_workers, ordered_map, process_pool

REPO = Path(__file__).resolve().parents[2]


def _slow_square(n: int) -> int:
    time.sleep(0.001 * (5 - n % 5))  # later items finish first
    return n * n


def test_results_come_in_input_order():
    with ThreadPoolExecutor(4) as pool:
        assert list(ordered_map(pool, _slow_square, range(20), max_in_flight=4)) == [n * n for n in range(20)]


def test_items_are_pulled_lazily_up_to_the_bound():
    pulled = []

    def items():
        for n in range(100):
            pulled.append(n)
            yield n

    with ThreadPoolExecutor(2) as pool:
        results = ordered_map(pool, _slow_square, items(), max_in_flight=3)
        assert next(results) == 0
        assert len(pulled) == 3
        results.close()


def test_worker_count_is_one_per_core_and_never_more(monkeypatch):
    from pipeline.engine.pool import worker_count

    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert [worker_count(n) for n in (0, 1, 2, 64, 256)] == [2, 1, 2, 2, 2]


def test_encode_starts_no_more_processes_than_cores(monkeypatch):
    from pipeline.config import Config, EncodeConfig
    from pipeline.engine import executor
    from pipeline.shards import corpus
    from stages import encode

    started = []

    def no_pool(workers):
        started.append(workers)
        raise RuntimeError("not starting")

    monkeypatch.setattr("os.cpu_count", lambda: 2)
    monkeypatch.setattr(executor, "process_pool", no_pool)
    monkeypatch.setattr(corpus, "share_tokenizer", lambda path: None)
    monkeypatch.setattr(encode, "special_id", lambda *args, **kwargs: None)
    with pytest.raises(RuntimeError, match="not starting"):
        encode.run(Config(encode=EncodeConfig(workers=64)))
    assert started == [2]


_both_workers: multiprocessing.synchronize.Barrier | None = None  # inherited by the forked workers


def _sigint_handler_once_both_run(_: object) -> object:
    """The worker's SIGINT handler, once the other worker runs this too: so both have started."""
    assert _both_workers is not None
    _both_workers.wait(timeout=60)
    return signal.getsignal(signal.SIGINT)


def test_pool_workers_ignore_ctrl_c_and_do_not_hold_the_drivers_lock(tmp_path, monkeypatch):
    """The driver handles Ctrl-C alone, and a lock it registered ends with its own descriptor."""
    monkeypatch.setattr(sys.modules[__name__], "_both_workers", multiprocessing.Barrier(2))
    fd = os.open(tmp_path / "run.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    with keep_from_workers(fd), process_pool(2) as pool:
        assert list(pool.map(_sigint_handler_once_both_run, range(2))) == [signal.SIG_IGN] * 2
        os.close(fd)  # the workers still run: the lock must be free all the same
        with open(tmp_path / "run.lock") as again:
            fcntl.flock(again, fcntl.LOCK_EX | fcntl.LOCK_NB)


DRIVER = """\
import os, sys, time
from pipeline.engine import pool
if sys.argv[1] == "watchdog":
    pool._set_parent_death_signal = lambda: False  # as where there is no prctl
with pool.process_pool(1) as workers:
    print(workers.submit(os.getpid).result(), flush=True)
    time.sleep(60)
"""


@pytest.mark.parametrize("how", ["parent death signal", "watchdog"])
def test_pool_workers_die_with_a_killed_driver(tmp_path, how):
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, how.split()[0]], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(REPO)}, start_new_session=True)
    try:
        worker = int(driver.stdout.readline())
        driver.kill()
        driver.wait(5)
        deadline = time.monotonic() + 5
        while running(worker):
            assert time.monotonic() < deadline, f"the worker outlived its driver ({how})"
            time.sleep(0.05)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(driver.pid, signal.SIGKILL)
        driver.wait(5)
        driver.stdout.close()



CTRL_C_DURING_FORK = """\
import os, signal
from pipeline.engine.pool import process_pool
os.register_at_fork(before=lambda: os.kill(os.getpid(), signal.SIGINT))  # Ctrl-C just as a worker forks
try:
    with process_pool(1) as pool:
        pool.submit(int).result()
    print("not interrupted")
except KeyboardInterrupt:
    print("interrupted")
"""


def _sigint_as_from_a_terminal() -> None:
    """A command started at a terminal has SIGINT at its default and unblocked; a process of the test runner may
    have it ignored or blocked (an ignored or blocked signal stays so across exec), and the Ctrl-C would then
    never come (the test failed so, now and then, in the whole tier, and never alone)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def test_ctrl_c_while_the_workers_fork_is_not_lost():
    """Raised in an at-fork handler, a KeyboardInterrupt is dropped by Python: the pool holds SIGINT back."""
    result = subprocess.run([sys.executable, "-c", CTRL_C_DURING_FORK], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, preexec_fn=_sigint_as_from_a_terminal)
    assert result.stdout == "interrupted\n" and "Exception ignored" not in result.stderr, result.stderr
