"""Counting distinct pre-split chunks across worker processes: the first pass of BPE training.

Training never looks at the corpus again after this pass: merges work on the distinct chunks and
their counts, so memory grows with the number of distinct chunks, not with the corpus size.

Texts are grouped into blocks of about ``BLOCK_CHARS`` characters. With the native core and a pattern
it splits by hand (``gpt4``, ``gpt2``, the word kind's, or none), one ``_native.ChunkCounter`` splits and
counts each block with threads of this process, each counting its slice of the block into a table of
its own, and the tables are added up once at the end: no counts are pickled. Otherwise each worker
process splits and counts a block and returns a small ``{chunk: count}`` dict that the parent folds into
the total. Blocks of a few MB keep the regex working on short strings (the split dominates the cost:
~10 MB/s per process) and keep peak memory low, while the number of round trips stays small.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from functools import partial

import regex

from pipeline.engine.pool import ordered_map, process_pool, worker_count
from pipeline.engine.progress import Progress
from pipeline.tokenizer import backend
from pipeline.tokenizer.patterns import GPT4, native_mode, splitter

BLOCK_CHARS = 4_000_000
JOIN_SEGMENTS = 2_000
_SEGMENT_END = regex.compile(r"\n(?=\S)")
_ASCII_SEGMENT_END = re.compile(_SEGMENT_END.pattern, re.ASCII)  # the same cuts on ASCII text, 35% faster
# The GPT-4 split pattern (nanochat's form): every chunk that contains a newline ends with it, and
# whitespace alternatives holding a newline are tried first, so a newline followed by a non-space
# character is always a chunk boundary. Not true of the GPT-2 pattern (its ``\s+(?!\S)`` looks past it).
LINE_SAFE_PATTERNS = frozenset({GPT4})


def count_chunks(
    texts: Iterable[str], *, pattern: str, workers: int = 0, progress: bool = False
) -> dict[str, int]:
    """Count every pre-split chunk of ``texts``: pieces matched by ``pattern``, or whole texts if it is ``""``.

    Each text is split on its own, so chunks never cross texts. Empty chunks are dropped. The counts do
    not depend on ``workers`` (blocks are cut by text size alone, and addition commutes), nor on the
    backend: the native core splits exactly as the regex does.
    """
    counter = native_counter(texts, pattern=pattern, workers=workers, progress=progress)
    if counter is not None:
        return counter.pop_counts()
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


def _count_block(pattern: str, texts: list[str]) -> Counter[str]:
    """Split one block of texts and count its chunks (runs in a worker process)."""
    split = splitter(pattern)
    if pattern in LINE_SAFE_PATTERNS:
        counts = _count_by_segment(split, texts)
    else:
        counts = Counter()
        for text in texts:
            counts.update(split(text))
    counts.pop("", None)
    return counts


def _count_by_segment(split: Callable[[str], list[str]], texts: list[str]) -> Counter[str]:
    """Split each distinct segment once: much of a block's text may repeat a segment seen before.

    Segments end at a newline followed by a non-space character, which the patterns in
    ``LINE_SAFE_PATTERNS`` always treat as a chunk boundary (no match crosses it, no lookahead sees
    past it), so counting per segment gives exactly the counts of splitting whole texts. A text's first
    segment may start with a space and its last one has no newline, so those two are split one by one;
    every other segment is split in one call per repeat count (``_count_joined``).
    """
    cut, cut_ascii = _SEGMENT_END.split, _ASCII_SEGMENT_END.split
    inner: Counter[str] = Counter()  # segments after a boundary, without their (removed) newline
    outer: Counter[str] = Counter()  # the first and last segment of each text, with their ending
    for text in texts:
        pieces = cut_ascii(text) if text.isascii() else cut(text)
        outer[pieces.pop()] += 1
        if pieces:
            outer[pieces[0] + "\n"] += 1
            inner.update(pieces[1:])
    counts: Counter[str] = Counter()
    for segment, repeats in outer.items():
        _add(counts, split(segment), repeats)
    _count_joined(counts, inner, split)
    return counts


def _count_joined(counts: Counter[str], segments: Counter[str], split: Callable[[str], list[str]]) -> None:
    """Split the segments grouped by repeat count, each group joined by newlines into one string.

    Every segment starts with a non-space character, so each joining newline is a chunk boundary. One
    call per group instead of one per segment lets the split use the stdlib ``re`` twin of the pattern
    on long stretches (``patterns.splitter``), and keeps per-call overhead out: on 20 MB of the
    benchmark corpus the split takes 0.33 s instead of 0.94 s. Segments seen once, most of them in text
    without repetition, are picked out in one pass. At most ``JOIN_SEGMENTS`` segments go into one
    string, so the list of chunks a call returns stays small (one list for a whole block raised a
    worker's peak by ~40 MB).
    """
    groups: dict[int, list[str]] = {1: [segment for segment, repeats in segments.items() if repeats == 1]}
    for segment, repeats in segments.items():
        if repeats > 1:
            groups.setdefault(repeats, []).append(segment)
    for repeats, group in groups.items():
        for start in range(0, len(group), JOIN_SEGMENTS):
            _add(counts, split("\n".join(group[start : start + JOIN_SEGMENTS]) + "\n"), repeats)


def _add(counts: Counter[str], chunks: list[str], repeats: int) -> None:
    if repeats == 1:
        counts.update(chunks)
    else:
        for chunk, count in Counter(chunks).items():
            counts[chunk] += count * repeats


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


def _progress_bar(enabled: bool) -> Progress:
    """Progress in MB of text read."""
    return Progress("tokenizer: counting chunks", total=None, unit="MB", enabled=enabled)
