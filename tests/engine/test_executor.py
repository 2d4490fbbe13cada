"""Partition tasks on a local executor: result order, the order in which tasks start, failures, and the memory a
worker gives back between tasks."""

from __future__ import annotations

import os
import resource

import pytest

from pipeline.engine import memory, retries
from pipeline.engine.executor import Tasks, _TaskContext, run_task
from pipeline.engine.pool import process_pool
from pipeline.errors import StorageError


def test_map_starts_the_largest_items_first_and_returns_results_in_item_order(start_order):
    results = Tasks(start_order).map(str.upper, ["a", "b", "c", "d"], labels=["0", "1", "2", "3"], sizes=[5, 9, 1, 9])
    assert results == ["A", "B", "C", "D"]
    assert start_order.labels == ["1", "3", "0", "2"]


def test_map_without_sizes_starts_items_in_order(start_order):
    assert Tasks(start_order).map(str.upper, ["a", "b"], labels=["0", "1"]) == ["A", "B"]
    assert start_order.labels == ["0", "1"]


class Unpicklable:
    """What a store client's error may hold (aiohttp's headers): no pickling."""

    def __reduce__(self):
        raise TypeError("can't pickle Unpicklable objects")


def fail_with_an_unpicklable_cause(_item: int) -> None:
    try:
        raise ConnectionError(Unpicklable())
    except ConnectionError:
        raise StorageError("s3://bucket/key: the store said no") from None


def test_a_failed_task_reaches_the_driver_without_the_unpicklable_causes_of_its_error():
    """tblib (installed by importing distributed) pickles an exception's whole chain; the worker used to
    die pickling it, and the stage said 'a worker process died (killed, or out of memory?)'."""
    pytest.importorskip("tblib.pickling_support").install()
    with process_pool(1) as pool, pytest.raises(StorageError) as failure:
        Tasks(pool).map(fail_with_an_unpicklable_cause, [0], labels=["part-0"])
    assert str(failure.value).startswith("s3://bucket/key: the store said no (partition part-0, on ")


def die(_item: int) -> None:
    import os

    os._exit(9)


def test_a_dead_worker_is_one_line_that_does_not_say_the_stage_wrote_nothing():
    """The stage keeps its finished tasks' work in its scratch for the next run: 'the stage wrote nothing'
    was not so."""
    from pipeline.errors import PipelineError

    with process_pool(1) as pool, pytest.raises(PipelineError) as failure:
        Tasks(pool).map(die, [0], labels=["part-0"])
    assert str(failure.value) == ("a worker process died while running partition part-0 (killed, or out of "
                                  "memory?); its previous output is left as it was, run it again (the tasks that "
                                  "finished are not redone where the stage keeps their work)")


class Counted:
    """A task's result that counts how many of its kind are alive at once."""

    alive = peak = 0

    def __init__(self, value: int):
        self.value = value
        Counted.alive += 1
        Counted.peak = max(Counted.peak, Counted.alive)

    def __del__(self):
        Counted.alive -= 1


def add_counted(left: Counted, right: Counted) -> Counted:
    return Counted(left.value + right.value)


def test_a_map_reduce_holds_a_bounded_number_of_results_however_many_items():
    """The driver used to wait for every task before folding, holding every result at once (the tokenizer's
    chunk counts of each part: memory that grew with the corpus)."""
    from concurrent.futures import ThreadPoolExecutor

    Counted.alive = Counted.peak = 0
    with ThreadPoolExecutor(2) as pool:
        total = Tasks(pool, in_flight=4).map_reduce(Counted, add_counted, list(range(200)),
                                                    labels=[str(i) for i in range(200)])
    assert total.value == sum(range(200))
    assert Counted.peak <= 4 + 8 + 2  # the results in flight, the fold's partial sums (log2 200), the pair it adds


def test_a_map_reduce_folds_in_item_order_whatever_the_window():
    """The tree's shape, and so the result down to its order, depends on the item count alone."""
    from concurrent.futures import ThreadPoolExecutor

    items, labels = [[i] for i in range(37)], [str(i) for i in range(37)]
    with ThreadPoolExecutor(3) as pool:
        folds = {window: Tasks(pool, in_flight=window).map_reduce(list, list.__add__, items, labels=labels)
                 for window in (1, 2, 5, 64)}
    assert all(fold == list(range(37)) for fold in folds.values())


_kept: list[bytes] = []  # what a worker keeps between tasks, above the blocks a task freed


def free_scattered_blocks(megabytes: int) -> None:
    """Allocate ``megabytes`` in 100 KB blocks (below glibc's mmap threshold: on the heap), each followed by a
    20 KB block that the worker keeps, and free the 100 KB ones: glibc keeps them between the live blocks, as it
    kept what prepare's tasks freed."""
    blocks = []
    for _ in range(megabytes * 10):
        blocks.append(bytes(100_000))
        _kept.append(bytes(20_000))
    del blocks


def anonymous_kilobytes(_item: int) -> int:
    """This process's anonymous resident memory (``RssAnon``: its heap), in KB."""
    with open("/proc/self/status", encoding="ascii") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("RssAnon:"))


@pytest.mark.skipif(memory._malloc_trim() is None, reason="the C library has no malloc_trim (not glibc)")
def test_a_worker_gives_back_what_a_task_freed_before_its_next_task():
    """A worker's heap grew task after task with what the allocators kept of the tasks before (docs/scale.md,
    "Memory"). Here 27 of the 40 MB a task freed stayed resident beside the 8 MB it kept: 35 MB more after the
    task than before it, 8 MB more now."""
    with process_pool(1) as pool:
        tasks = Tasks(pool)
        before = tasks.map(anonymous_kilobytes, [0], labels=["before"])[0]
        tasks.map(free_scattered_blocks, [40], labels=["frees 40 MB"])
        after = tasks.map(anonymous_kilobytes, [0], labels=["after"])[0]
    assert after - before < 8_000 + 8_000  # what the task kept, and room for the pool's own


def faults_of_a_task_that_uses_4_mb(_item: int) -> int:
    """The KB of pages that filling and freeing 4 MB faults in."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    bytearray(4 << 20)
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) * os.sysconf("SC_PAGE_SIZE") // 1024


@pytest.mark.skipif(memory._heap_bytes() is None, reason="no /proc/self/statm to read the heap from")
def test_small_tasks_reuse_what_the_task_before_them_freed():
    """Released after every task, a worker's heap was given back and each task faulted its pages in again (an
    encode worker's parts of a megabyte: 171,000 page faults over 139 MB, docs/performance.md); a heap that
    grew by less than memory.KEPT_BYTES is kept for the next task."""
    with process_pool(1) as pool:
        faults = Tasks(pool).map(faults_of_a_task_that_uses_4_mb, list(range(6)), labels=list(map(str, range(6))))
    assert max(faults[2:]) < 1_000, faults  # 4,096 KB each, all faulted anew, when every task released


def test_the_free_memory_is_released_after_every_task_on_a_worker_and_never_in_the_driver(monkeypatch):
    releases: list[int] = []
    monkeypatch.setattr(memory, "release_after_task", lambda: releases.append(1))
    elsewhere = _TaskContext(retries.current(), driver=os.getpid() + 1)
    for item in range(3):
        run_task(str, str(item), item, elsewhere)
    with pytest.raises(ValueError):
        run_task(int, "fails", "x", elsewhere)
    assert len(releases) == 4
    run_task(str, "in the driver", 0, _TaskContext.here())
    assert len(releases) == 4
