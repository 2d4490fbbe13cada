"""Partition tasks on a local executor: result order and the order in which tasks start."""

from __future__ import annotations

from pipeline.engine.executor import Tasks


def test_map_starts_the_largest_items_first_and_returns_results_in_item_order(start_order):
    results = Tasks(start_order).map(str.upper, ["a", "b", "c", "d"], labels=["0", "1", "2", "3"], sizes=[5, 9, 1, 9])
    assert results == ["A", "B", "C", "D"]
    assert start_order.labels == ["1", "3", "0", "2"]


def test_map_without_sizes_starts_items_in_order(start_order):
    assert Tasks(start_order).map(str.upper, ["a", "b"], labels=["0", "1"]) == ["A", "B"]
    assert start_order.labels == ["0", "1"]
