"""Fast exact encoding: a chunk cache over rank-based BPE.

Encoding replays the merges in training order. Applying, again and again, the
lowest-ranked merge among adjacent pairs (leftmost first) gives the same IDs:
a merge's result only takes part in later-ranked merges, so no earlier merge
can become possible again.

Real text repeats its chunks (words with their leading space), so each distinct
chunk is encoded once and kept as its IDs packed into ``uint32`` bytes. A text
then becomes ``b"".join(map(cache.__getitem__, chunks))`` viewed with
``np.frombuffer``: no Python loop per chunk once the cache is warm, and the
regex split is the only real cost left (~10 MB/s per process on English).
"""

from __future__ import annotations

import heapq
from array import array
from collections.abc import Callable, Mapping, Sequence

import numpy as np

_NO_MERGE = 1 << 62
_SHORT_CHUNK = 48  # below: list scan with C-level min/index; above: heap + linked list
_CACHE_MAX_CHUNK = 256  # longer chunks are encoded but not cached (a whole document, with pattern none)
_CACHE_MAX_ENTRIES = 2_000_000  # cleared when full: bounded memory on endless streams

MergeTable = Mapping[tuple[int, int], int]


def merge_short(ids: list[int], rank_of: MergeTable, result_of: Sequence[int]) -> list[int]:
    """Apply merges to ``ids`` lowest rank first; O(n²) but all in C for short chunks.

    >>> merge_short([97, 98, 97, 98], {(97, 98): 0, (256, 256): 1}, [256, 257])
    [257]
    """
    get = rank_of.get
    ranks = [get(pair, _NO_MERGE) for pair in zip(ids, ids[1:])]
    while ranks:
        best = min(ranks)
        if best == _NO_MERGE:
            break
        i = ranks.index(best)
        new = ids[i] = result_of[best]
        del ids[i + 1]
        del ranks[i]
        if i > 0:
            ranks[i - 1] = get((ids[i - 1], new), _NO_MERGE)
        if i < len(ranks):
            ranks[i] = get((new, ids[i + 1]), _NO_MERGE)
    return ids


def merge_long(ids: list[int], rank_of: MergeTable, result_of: Sequence[int]) -> list[int]:
    """Same result as :func:`merge_short` in O(n log n): a heap of (rank, position) over a linked list.

    Heap entries go stale when a neighbour merges; an entry is used only if the
    pair at its position still has its rank.
    """
    n = len(ids)
    tokens: list[int | None] = list(ids)
    following = list(range(1, n + 1))
    preceding = list(range(-1, n - 1))
    heap = [(r, i) for i, pair in enumerate(zip(ids, ids[1:])) if (r := rank_of.get(pair)) is not None]
    heapq.heapify(heap)
    while heap:
        rank, i = heapq.heappop(heap)
        j = following[i]
        if tokens[i] is None or j >= n or rank_of.get((tokens[i], tokens[j])) != rank:
            continue
        new = tokens[i] = result_of[rank]
        tokens[j] = None
        following[i] = following[j]
        if following[j] < n:
            preceding[following[j]] = i
        for left in (preceding[i], i):
            right = following[left] if left >= 0 else n
            if left >= 0 and right < n:
                r = rank_of.get((tokens[left], tokens[right]))
                if r is not None:
                    heapq.heappush(heap, (r, left))
    return [t for t in tokens if t is not None]


def apply_merges(ids: list[int], rank_of: MergeTable, result_of: Sequence[int]) -> list[int]:
    if len(ids) < _SHORT_CHUNK:
        return merge_short(ids, rank_of, result_of)
    return merge_long(ids, rank_of, result_of)


class ChunkCache(dict):
    """chunk → its IDs packed as native ``uint32`` bytes; a miss runs BPE (``__missing__``)."""

    def __init__(self, base_ids: Callable[[str], list[int]], rank_of: MergeTable, result_of: Sequence[int]):
        super().__init__()
        self._base_ids = base_ids
        self._rank_of = rank_of
        self._result_of = result_of

    def __missing__(self, chunk: str) -> bytes:
        packed = array("I", apply_merges(self._base_ids(chunk), self._rank_of, self._result_of)).tobytes()
        if len(chunk) <= _CACHE_MAX_CHUNK:
            if len(self) >= _CACHE_MAX_ENTRIES:
                self.clear()
            self[chunk] = packed
        return packed


class ChunkEncoder:
    """Text → IDs for one tokenizer: split, look every chunk up in the cache, join, view as numpy."""

    def __init__(self, split: Callable[[str], list[str]], cache: ChunkCache):
        self._split = split
        self._cache = cache

    def packed(self, text: str) -> bytes:
        """The IDs of ``text`` as native uint32 bytes."""
        return b"".join(map(self._cache.__getitem__, self._split(text)))

    def array(self, text: str) -> np.ndarray:
        return np.frombuffer(self.packed(text), dtype=np.uint32)

    def ids(self, text: str) -> list[int]:
        return self.array(text).tolist()

    def flat(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """All texts' IDs concatenated (``uint32``) and ``len(texts) + 1`` offsets (``int64``)."""
        parts = list(map(self.packed, texts))
        offsets = np.zeros(len(parts) + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, parts), dtype=np.int64, count=len(parts)), out=offsets[1:])
        offsets //= 4
        ids = np.frombuffer(b"".join(parts), dtype=np.uint32)
        return ids, offsets
