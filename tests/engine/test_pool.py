"""ordered_map: input order whatever the completion order, and a bound on submitted work."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from pipeline.engine.pool import ordered_map


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
    from stages import encode

    started = []

    class NoPool:
        def __init__(self, max_workers):
            started.append(max_workers)
            raise RuntimeError("not starting")

    monkeypatch.setattr("os.cpu_count", lambda: 2)
    monkeypatch.setattr(executor, "ProcessPoolExecutor", NoPool)
    monkeypatch.setattr(encode.corpus, "share_tokenizer", lambda path: None)
    monkeypatch.setattr(encode, "special_id", lambda *args, **kwargs: None)
    with pytest.raises(RuntimeError, match="not starting"):
        encode.run(Config(encode=EncodeConfig(workers=64)))
    assert started == [2]
