"""Counting distinct pre-split chunks across worker processes: the first pass of BPE training.

Training never looks at the corpus again after this pass: merges work on the distinct chunks and
their counts, so memory grows with the number of distinct chunks, not with the corpus size.

Texts are grouped into blocks of about ``BLOCK_CHARS`` characters. With the native core and a pattern
it splits by hand (``gpt4``, ``gpt2``, the word kind's, or none), one ``_native.ChunkCounter`` splits and
counts each block with threads of this process, each counting its slice of the block into a table of
its own, and the tables are added up once at the end: no counts are pickled. Otherwise each worker
process splits and counts a block and returns a small ``{chunk: count}`` dict that the parent folds into
the total. Blocks of a few MB keep the regex working on short strings (the split dominates the cost)
and keep peak memory low, while the number of round trips stays small.

Counts that travel between processes (the tokenizer stage's partition tasks) are :func:`tally`'s: the
``ChunkCounter`` itself where the native core counted, which pickles as one ``bytes`` buffer (its
``serialize``) and is summed natively (:func:`add_counts`), so that no Python object is made per chunk on
either side; else a ``Counter``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from functools import partial

from pipeline.engine.pool import ordered_map, process_pool, worker_count
from pipeline.engine.progress import Progress
from pipeline.tokenizer import backend
from pipeline.tokenizer.patterns import native_mode, splitter

BLOCK_CHARS = 4_000_000


def count_chunks(
    texts: Iterable[str], *, pattern: str, workers: int = 0, progress: bool = False
) -> dict[str, int]:
    """Count every pre-split chunk of ``texts``: pieces matched by ``pattern``, or whole texts if it is ``""``.

    Each text is split on its own, so chunks never cross texts. Empty chunks are dropped. The counts do
    not depend on ``workers`` (blocks are cut by text size alone, and addition commutes), nor on the
    backend: the native core splits exactly as the regex does.
    """
    return as_dict(tally(texts, pattern=pattern, workers=workers, progress=progress))


def tally(texts: Iterable[str], *, pattern: str, workers: int = 0, progress: bool = False):
    """:func:`count_chunks`'s counts as they travel best: a ``_native.ChunkCounter`` where the native core
    counts ``pattern``, else a ``Counter``. :func:`as_dict` makes either a dict, :func:`add_counts` sums them."""
    counter = native_counter(texts, pattern=pattern, workers=workers, progress=progress)
    if counter is not None:
        return counter
    processes = worker_count(workers)
    blocks = _blocks(texts, progress=progress)
    count_block = partial(_count_block, pattern)
    if processes == 1:
        return _fold(map(count_block, blocks))
    with process_pool(processes) as pool:
        return _fold(ordered_map(pool, count_block, blocks, max_in_flight=2 * processes))


def native_counter(texts: Iterable[str], *, pattern: str, workers: int = 0, progress: bool = False):
    """A ``_native.ChunkCounter`` that counted ``texts`` with ``worker_count(workers)`` threads, or None where
    the native core does not count ``pattern`` (``texts`` is then left unread)."""
    mode = native_mode(pattern)
    if mode is None:
        return None
    counter = backend.native.ChunkCounter(mode, worker_count(workers))
    for block in _blocks(texts, progress=progress):
        counter.add(block)
    return counter


def as_dict(counts) -> dict[str, int]:
    """The counts of :func:`tally` as a dict (a ``ChunkCounter`` starts over)."""
    return counts if isinstance(counts, dict) else counts.pop_counts()


def add_counts(left, right):
    """The sum of two of :func:`tally`'s counts, into the larger where both are ``Counter``s (most updates then hit
    existing keys), natively where both are ``ChunkCounter``s, and as a ``Counter`` where one of each come (a
    worker without the native core)."""
    if isinstance(left, dict) != isinstance(right, dict):
        left, right = Counter(as_dict(left)), Counter(as_dict(right))
    if not isinstance(left, dict):
        left.absorb(right)
        return left
    if len(right) > len(left):
        left, right = right, left
    left.update(right)
    return left


def _count_block(pattern: str, texts: list[str]) -> Counter[str]:
    """Split one block of texts and count its chunks (runs in a worker process)."""
    split = splitter(pattern)
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(split(text))
    return counts


def _fold(partials: Iterable[Counter[str]]) -> Counter[str]:
    """Add the per-block counts into one (:func:`add_counts`)."""
    total: Counter[str] = Counter()
    for counts in partials:
        total = add_counts(total, counts)
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


def _progress_bar(enabled: bool) -> Progress:
    """Progress in MB of text read."""
    return Progress("tokenizer: counting chunks", total=None, unit="MB", enabled=enabled)
