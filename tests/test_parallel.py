"""ordered_map: input order whatever the completion order, and a bound on submitted work."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from pipeline.parallel import ordered_map


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
