"""Counting distinct pre-split chunks across worker processes: the first pass of BPE training.

Training never looks at the corpus again after this pass: merges work on the distinct chunks and
their counts, so memory grows with the number of distinct chunks, not with the corpus size.

Texts are grouped into blocks of about ``BLOCK_CHARS`` characters; each worker splits and counts a
block and returns a small ``{chunk: count}`` dict that the parent folds into the total. Blocks of a
few MB keep the regex working on short strings (the split dominates the cost: ~10 MB/s per process)
and keep peak memory low, while the number of round trips stays small.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from functools import partial

import regex

BLOCK_CHARS = 4_000_000


def count_chunks(
    texts: Iterable[str], *, pattern: str, workers: int = 0, progress: bool = False
) -> dict[str, int]:
    """Count every pre-split chunk of ``texts``: pieces matched by ``pattern``, or whole texts if it is ``""``.

    Each text is split on its own, so chunks never cross texts. Empty chunks are dropped. The counts do
    not depend on ``workers`` (blocks are cut by text size alone, and addition commutes).
    """
    processes = workers or os.cpu_count() or 1
    count_block = partial(_count_block, pattern)
    blocks = _blocks(texts, progress=progress)
    if processes == 1:
        return _fold(map(count_block, blocks))
    with ProcessPoolExecutor(processes) as pool:
        return _fold(_map_bounded(pool, count_block, blocks, depth=2 * processes))


def _count_block(pattern: str, texts: list[str]) -> Counter[str]:
    """Split one block of texts and count its chunks (runs in a worker process)."""
    if not pattern:
        counts = Counter(texts)
    else:
        findall = regex.compile(pattern).findall
        counts = Counter()
        for text in texts:
            counts.update(findall(text))
    counts.pop("", None)
    return counts


def _fold(partials: Iterable[Counter[str]]) -> dict[str, int]:
    """Add the per-block counts into one dict, largest first so that most updates hit existing keys."""
    total: Counter[str] = Counter()
    for counts in partials:
        if len(counts) > len(total):
            total, counts = counts, total
        total.update(counts)
    return total


def _blocks(texts: Iterable[str], *, progress: bool) -> Iterator[list[str]]:
    """Group texts into lists of about ``BLOCK_CHARS`` characters (a long text forms a block of its own)."""
    bar = _progress_bar(progress)
    block: list[str] = []
    size = 0
    for text in texts:
        block.append(text)
        size += len(text)
        if size >= BLOCK_CHARS:
            yield block
            bar.update(size / 1e6)
            block, size = [], 0
    if block:
        yield block
        bar.update(size / 1e6)
    bar.close()


def _map_bounded(pool: ProcessPoolExecutor, func, items: Iterator, *, depth: int) -> Iterator:
    """``pool.map`` in input order that keeps at most ``depth`` items in flight (bounded memory)."""
    pending: list[Future] = []
    for item in items:
        pending.append(pool.submit(func, item))
        if len(pending) >= depth:
            yield pending.pop(0).result()
    for future in pending:
        yield future.result()


def _progress_bar(enabled: bool):
    """A tqdm bar in MB of text read, or a silent stand-in."""
    if not enabled:
        return _NoBar()
    from tqdm import tqdm

    return tqdm(desc="counting chunks", unit="MB", unit_scale=False, bar_format="{desc}: {n:.0f} MB [{elapsed}]")


class _NoBar:
    def update(self, _n: float) -> None:
        pass

    def close(self) -> None:
        pass
