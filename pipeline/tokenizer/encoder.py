"""Fast exact encoding: a chunk cache over rank-based BPE.

The plain form of this encoder is ``reference.encode`` (read it first); every path here gives its IDs.
Encoding replays the merges in training order. Applying, again and again, the
lowest-ranked merge among adjacent pairs (leftmost first) gives the same IDs:
a merge's result only takes part in later-ranked merges, so no earlier merge
can become possible again.

Real text repeats its chunks (words with their leading space), so each distinct
chunk is encoded once and kept as its IDs packed into ``uint32`` bytes. A text
then becomes ``b"".join(map(cache.__getitem__, chunks))`` viewed with
``np.frombuffer``: no Python loop per chunk once the cache is warm, and the
regex split is the only real cost left (~10 MB/s per process on English).

Text that repeats little still brings new chunks all the time (a 34 MB corpus
without a repeated line has 178k distinct chunks among 7.5M), and BPE one chunk
at a time in Python costs ~7 µs each. So a batch's new chunks are merged
together with numpy (:func:`merge_rows`): one merge per chunk per step, the
same lowest-rank-leftmost rule as :func:`merge_short`, ~3 µs a chunk. With the native core
(``backend``), the new chunks go to its merge loop instead, all in one call without the GIL.
"""

from __future__ import annotations

import heapq
import sys
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import chain
from typing import Literal

import numpy as np

from pipeline.tokenizer import backend, patterns

_NO_MERGE = 1 << 62
_SHORT_CHUNK = 48  # below: list scan with C-level min/index; above: heap + linked list
_CACHE_MAX_CHUNK = 256  # longer chunks are encoded but not cached (a whole document, with pattern none)
DEFAULT_CACHE_BYTES = 256 * 10**6  # per process; the cache starts over when full
_ENTRY_OVERHEAD = 64  # bytes a dict entry costs beyond its key and value objects (slot, index, growth slack)
_BULK_MIN_CHUNKS = 64  # fewer new chunks of a length group than this: BPE one by one (numpy's per-call cost dominates)
_ROW_WIDTHS = (2, 4, 8, 16, 32, 64, 128, 256)  # chunks are merged in matrices of these widths (in base IDs);
# longer ones one by one: a matrix's steps grow with the square of its width
_GROUP_CHARS = 1 << 20  # texts are split and their new chunks encoded a group of about this many characters at a time

MergeTable = Mapping[tuple[int, int], int]
NATIVE_NO_SPLIT = 3  # ``_native``'s split mode for pattern none: each text is one chunk


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
        tokens[i] = result_of[rank]
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


NO_RANK = np.iinfo(np.int32).max
PAD = NO_RANK - 1  # fills rows of different lengths; larger than any ID, so no pair contains it
_KEY_BASE = PAD + 1  # a pair's key is left * _KEY_BASE + right: distinct for all IDs and PAD, and < 2**62


class PairRanks:
    """Vectorised ``rank_of``: the merge rank of many ID pairs at once.

    A pair's key goes to one slot of a hash table 8 times larger than the
    merges (Fibonacci hashing); a key that lost its slot to another one is
    found by binary search in all keys, sorted. At this load ~1 query in 8
    needs that search, so a lookup costs a few numpy gathers per pair.
    """

    def __init__(self, rank_of: MergeTable, result_of: Sequence[int]):
        self.rank_of, self.result_of = rank_of, result_of
        self.results = np.asarray(result_of, dtype=np.int32)
        pairs = np.array(list(rank_of), dtype=np.int64).reshape(-1, 2)
        keys = pairs[:, 0] * _KEY_BASE + pairs[:, 1]
        ranks = np.fromiter(rank_of.values(), dtype=np.int32, count=len(rank_of))
        order = np.argsort(keys)
        self._sorted_keys = np.append(keys[order], np.iinfo(np.int64).max)  # a sentinel keeps searches in range
        self._sorted_ranks = np.append(ranks[order], NO_RANK)
        self._shift = np.uint64(64 - max(4, (8 * len(keys)).bit_length()))
        self._slot_keys = np.full(1 << (64 - int(self._shift)), -1, dtype=np.int64)
        self._slot_ranks = np.full(self._slot_keys.size, NO_RANK, dtype=np.int32)
        slots, first = np.unique(self._slots(keys), return_index=True)
        self._slot_keys[slots], self._slot_ranks[slots] = keys[first], ranks[first]

    def _slots(self, keys: np.ndarray) -> np.ndarray:
        return (keys.view(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) >> self._shift

    def lookup(self, left: np.ndarray, right: np.ndarray) -> np.ndarray:
        """The rank of each pair ``(left[i], right[i])`` (any shape), or ``NO_RANK`` where none merges."""
        keys = left.astype(np.int64) * _KEY_BASE + right
        slots = self._slots(keys)
        found = self._slot_keys[slots]
        ranks = np.where(found == keys, self._slot_ranks[slots], NO_RANK)
        unsure = np.flatnonzero((found != keys) & (found != -1))  # the slot holds another key
        if unsure.size:
            wanted = keys.reshape(-1)[unsure]
            index = np.searchsorted(self._sorted_keys, wanted)
            ranks.reshape(-1)[unsure] = np.where(self._sorted_keys[index] == wanted, self._sorted_ranks[index], NO_RANK)
        return ranks


def merge_rows(ids: np.ndarray, table: PairRanks) -> np.ndarray:
    """Merge every row of ``ids`` (``int32``, padded on the right with ``PAD``) like :func:`merge_short`.

    Each step merges, in every row still merging, the leftmost pair of lowest
    rank. A merged-away position becomes ``PAD`` in place and a linked list of
    live positions keeps neighbours, so a step costs one ``argmin`` over the
    rows plus a few gathers and scatters. Rows that are done leave once they
    are half of the rows; the last few rows finish one by one, where numpy's
    cost per call would dominate.

    >>> table = PairRanks({(97, 98): 0, (256, 256): 1}, [256, 257])
    >>> merged = merge_rows(np.array([[97, 98, 97, 98], [98, 97, PAD, PAD]], np.int32), table)
    >>> [[i for i in row if i != PAD] for row in merged.tolist()]
    [[257], [98, 97]]
    """
    out = ids.copy()
    state = _MergeState(ids, table)
    origin = np.arange(len(ids))
    while len(origin) >= _BULK_MIN_CHUNKS:
        done = state.step()
        if done.sum() * 2 >= len(origin):
            out[origin[done]] = state.rows(done)
            origin = origin[~done]
            state.keep(~done)
    for row, ids_left in zip(origin.tolist(), state.rows(np.ones(len(origin), dtype=bool)).tolist()):
        merged = apply_merges([i for i in ids_left if i != PAD], table.rank_of, table.result_of)
        out[row] = PAD
        out[row, :len(merged)] = merged
    return out


class _MergeState:
    """The rows of :func:`merge_rows` being merged, flattened with a ``PAD`` sentinel at each end of a row.

    ``ranks[i]`` is the rank of the pair (position ``i``, next live position);
    ``following``/``preceding`` hold flat indices of the live neighbours, so a
    step needs no masks: a sentinel's pairs never merge.
    """

    def __init__(self, ids: np.ndarray, table: PairRanks):
        count, width = ids.shape
        self.table = table
        self.width = width + 2
        self.ids = np.full((count, self.width), PAD, dtype=np.int32)
        self.ids[:, 1:-1] = ids
        self.ranks = np.full(self.ids.shape, NO_RANK, dtype=np.int32)
        self.ranks[:, 1:-2] = table.lookup(ids[:, :-1], ids[:, 1:])
        starts = self._starts()
        columns = np.arange(self.width)
        self.following = starts + np.minimum(columns + 1, self.width - 1)
        self.preceding = starts + np.maximum(columns - 1, 0)

    def _starts(self) -> np.ndarray:
        return np.arange(0, self.ids.size, self.width).reshape(-1, 1)

    def rows(self, which: np.ndarray) -> np.ndarray:
        """The chosen rows' IDs, without the sentinels."""
        return self.ids[which, 1:-1]

    def keep(self, which: np.ndarray) -> None:
        old_starts = self._starts()[which]
        self.ids, self.ranks = self.ids[which], self.ranks[which]
        shift = self._starts() - old_starts
        self.following, self.preceding = self.following[which] + shift, self.preceding[which] + shift

    def step(self) -> np.ndarray:
        """Merge once in every row that can; return which rows could not (they are done)."""
        ids, ranks = self.ids.reshape(-1), self.ranks.reshape(-1)
        following, preceding = self.following.reshape(-1), self.preceding.reshape(-1)
        at = self._starts()[:, 0] + self.ranks.argmin(axis=1)
        best = ranks[at]
        done = best == NO_RANK
        if done.any():
            at, best = at[~done], best[~done]
        gone = following[at]
        after = following[gone]
        ids[at], ids[gone], ranks[gone] = self.table.results[best], PAD, NO_RANK
        following[at], preceding[after] = after, at
        before = preceding[at]
        lefts, rights = np.concatenate((at, before)), np.concatenate((after, at))  # the two new pairs, one lookup
        ranks[lefts] = self.table.lookup(ids[lefts], ids[rights])
        return done


class ChunkCache:
    """chunk → its IDs packed as native ``uint32`` bytes, bounded in bytes.

    Memory is bounded in bytes, not entries: 100k distinct 250-character chunks
    (a char tokenizer without pre-split) take ~100 MB while 100k words take
    ~12 MB. Each entry counts its key and value objects (``sys.getsizeof``) plus
    ``_ENTRY_OVERHEAD`` for the dict's own slot; new entries that would take the
    total past ``max_bytes`` empty the cache first, so it starts over on endless
    streams. Chunks longer than ``_CACHE_MAX_CHUNK`` characters are encoded but
    never kept.
    """

    def __init__(self, base_ids: Callable[[str], list[int]], rank_of: MergeTable, result_of: Sequence[int], *,
                 unit: Literal["byte", "char", "chunk"], max_bytes: int = DEFAULT_CACHE_BYTES):
        """``base_ids`` maps a text to one base ID per UTF-8 byte or per character (``unit``), so that many
        chunks are mapped at once by mapping their concatenation; with ``unit="chunk"`` (a word-level
        vocabulary, no merges) it maps each whole chunk to its one ID."""
        self._base_ids = base_ids
        self._unit = unit
        self._rank_of = rank_of
        self._result_of = result_of
        self._pair_ranks: PairRanks | None = None
        self._native = backend.native  # chosen once: a cache merges its misses one way all its life
        self._merger = None  # the native core's merge table, built on first use
        self._entries: dict[str, bytes] = {}  # a plain dict: set.difference(dict) runs in C
        self.max_bytes = max_bytes
        self.nbytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def table(self, chunks: set[str]) -> dict[str, bytes]:
        """A dict holding the packed IDs of every chunk in ``chunks``: the cache itself when it can keep them."""
        encoded = self._encode_many(chunks.difference(self._entries))
        if self._keep(encoded):
            return self._entries
        # some could not be kept (too long, or past the bound): a table for these chunks alone
        table = {chunk: self._entries[chunk] for chunk in chunks.difference(encoded) if chunk in self._entries}
        table.update(encoded)
        table.update(self._encode_many(chunks.difference(table)))  # kept before, lost when the cache started over
        return table

    def _keep(self, encoded: dict[str, bytes]) -> bool:
        """Add ``encoded`` to the cache; False if some of it was not kept or the cache started over for it."""
        size = _ENTRY_OVERHEAD * len(encoded) + sum(map(sys.getsizeof, encoded)) + sum(map(sys.getsizeof,
                                                                                           encoded.values()))
        if self.nbytes + size <= self.max_bytes and max(map(len, encoded), default=0) <= _CACHE_MAX_CHUNK:
            self._entries.update(encoded)
            self.nbytes += size
            return True
        if self.nbytes + size > self.max_bytes:
            self._entries.clear()
            self.nbytes = 0
        for chunk, packed in encoded.items():
            entry = _ENTRY_OVERHEAD + sys.getsizeof(chunk) + sys.getsizeof(packed)
            if len(chunk) <= _CACHE_MAX_CHUNK and self.nbytes + entry <= self.max_bytes:
                self._entries[chunk] = packed
                self.nbytes += entry
        return False

    def _encode_many(self, chunks: Iterable[str]) -> dict[str, bytes]:
        """The packed IDs of each chunk: rows of similar length merged together, very long ones one by one."""
        chunks = list(chunks)
        if self._unit == "chunk":
            return {chunk: array("I", self._base_ids(chunk)).tobytes() for chunk in chunks}
        base_ids = self._base_ids("".join(chunks))
        units = map(str.encode, chunks) if self._unit == "byte" else chunks
        lengths = np.fromiter(map(len, units), dtype=np.int64, count=len(chunks))
        if self._native is not None:
            return dict(zip(chunks, self._native_merger().merge_packed(array("I", base_ids), lengths)))
        flat = np.array(base_ids, dtype=np.int32)
        starts = np.cumsum(lengths) - lengths
        packed: list[bytes] = [b""] * len(chunks)
        low = -1
        for width in _ROW_WIDTHS:
            rows = np.flatnonzero((lengths > low) & (lengths <= width))
            low = width
            if rows.size >= _BULK_MIN_CHUNKS:
                merged = merge_rows(_padded_rows(flat, starts[rows], lengths[rows], width), self._table())
                for row, ids in zip(rows.tolist(), _packed_rows(merged)):
                    packed[row] = ids
            else:
                for row in rows.tolist():
                    packed[row] = self._encode_one(flat[starts[row]:starts[row] + lengths[row]].tolist())
        for row in np.flatnonzero(lengths > low).tolist():
            packed[row] = self._encode_one(flat[starts[row]:starts[row] + lengths[row]].tolist())
        return dict(zip(chunks, packed))

    def _encode_one(self, ids: list[int]) -> bytes:
        return array("I", apply_merges(ids, self._rank_of, self._result_of)).tobytes()

    def _native_merger(self):
        if self._merger is None:
            self._merger = native_merger(self._native, self._rank_of, self._result_of)
        return self._merger

    def _table(self) -> PairRanks:
        if self._pair_ranks is None:
            self._pair_ranks = PairRanks(self._rank_of, self._result_of)
        return self._pair_ranks


def _padded_rows(flat: np.ndarray, starts: np.ndarray, lengths: np.ndarray, width: int) -> np.ndarray:
    """Rows ``flat[starts[i]:starts[i] + lengths[i]]`` in a matrix of ``width`` columns, padded with ``PAD``."""
    rows = np.full((len(lengths), width), PAD, dtype=np.int32)
    row_of = np.repeat(np.arange(len(lengths)), lengths)
    column = np.arange(row_of.size) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    rows[row_of, column] = flat[np.repeat(starts, lengths) + column]
    return rows


def _packed_rows(rows: np.ndarray) -> list[bytes]:
    """Each row's IDs other than ``PAD``, as native ``uint32`` bytes."""
    live = rows != PAD
    data = rows[live].astype(np.uint32).tobytes()
    ends = (np.cumsum(live.sum(axis=1)) * 4).tolist()
    return [data[start:end] for start, end in zip([0, *ends], ends)]


class ChunkEncoder:
    """Text → IDs for one tokenizer: split, look every chunk up in the cache, join, view as numpy.

    Texts are split a group of about ``_GROUP_CHARS`` characters at a time, so
    the new chunks of a group are encoded together and the chunk lists in memory
    stay small whatever the batch.
    """

    def __init__(self, split: Callable[[str], list[str]], cache: ChunkCache):
        self._split = split
        self._cache = cache

    def bound_cache(self, max_bytes: int) -> None:
        self._cache.max_bytes = max_bytes

    def packed(self, text: str) -> bytes:
        """The IDs of ``text`` as native uint32 bytes."""
        return self._packed_group([text])[0]

    def array(self, text: str) -> np.ndarray:
        return np.frombuffer(self.packed(text), dtype=np.uint32)

    def ids(self, text: str) -> list[int]:
        return self.array(text).tolist()

    def flat(self, texts: Sequence[str], threads: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """All texts' IDs concatenated (``uint32``) and ``len(texts) + 1`` offsets (``int64``). One thread
        whatever ``threads`` says: the Python path holds the GIL, so more would only take turns."""
        parts = [part for group in _groups(texts) for part in self._packed_group(group)]
        offsets = np.zeros(len(parts) + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, parts), dtype=np.int64, count=len(parts)), out=offsets[1:])
        offsets //= 4
        ids = np.frombuffer(b"".join(parts), dtype=np.uint32)
        return ids, offsets

    def lists(self, texts: Sequence[str], threads: int = 1) -> list[list[int]]:
        """Each text's IDs as a list: :meth:`flat`, split (the new chunks of all texts are merged together)."""
        ids, offsets = self.flat(texts, threads)
        flat, bounds = ids.tolist(), offsets.tolist()
        return [flat[start:end] for start, end in zip(bounds, bounds[1:])]

    def _packed_group(self, texts: Sequence[str]) -> list[bytes]:
        chunk_lists = list(map(self._split, texts))
        lookup = self._cache.table(set(chain.from_iterable(chunk_lists))).__getitem__
        return [b"".join(map(lookup, chunks)) for chunks in chunk_lists]


def _groups(texts: Sequence[str]) -> Iterator[Sequence[str]]:
    """Consecutive runs of ``texts`` of about ``_GROUP_CHARS`` characters (at least one text each)."""
    start, size = 0, 0
    for end, text in enumerate(texts, start=1):
        size += len(text)
        if size >= _GROUP_CHARS:
            yield texts[start:end]
            start, size = end, 0
    if start < len(texts):
        yield texts[start:]


def native_merger(native, rank_of: MergeTable, result_of: Sequence[int]):
    """The native core's table of these merges (``_native.Merger``), in rank order."""
    pairs = sorted(rank_of, key=rank_of.__getitem__)
    results = [result_of[rank_of[pair]] for pair in pairs]
    return native.Merger([a for a, _ in pairs], [b for _, b in pairs], results)


class NativeChunkEncoder:
    """:class:`ChunkEncoder` done by the native core in one pass per call, without the GIL: the hand-written
    split, its own chunk cache (bounded in bytes as :class:`ChunkCache` is) and the merges of the misses."""

    def __init__(self, cache):
        self._cache = cache  # a ``_native.Encoder``: the split and the merge table travel with its cache

    def bound_cache(self, max_bytes: int) -> None:
        self._cache.max_bytes = max_bytes

    def packed(self, text: str) -> bytes:
        return self._cache.encode(text)

    def array(self, text: str) -> np.ndarray:
        return np.frombuffer(self.packed(text), dtype=np.uint32)

    def ids(self, text: str) -> list[int]:
        return self.array(text).tolist()

    def flat(self, texts: Sequence[str], threads: int = 1) -> tuple[np.ndarray, np.ndarray]:
        ids, offsets = self._cache.encode_flat(texts, threads)
        return np.frombuffer(ids, dtype=np.uint32), np.frombuffer(offsets, dtype=np.int64).copy()

    def lists(self, texts: Sequence[str], threads: int = 1) -> list[list[int]]:
        return self._cache.encode_lists(texts, threads)


def native_encoder(pattern: str, base: Sequence[int] | Mapping[str, int], unknown: int | None, rank_of: MergeTable,
                   result_of: Sequence[int]) -> NativeChunkEncoder | None:
    """The native encoder of a byte (``base``: the 256 base IDs by byte value) or char tokenizer (``base``:
    character -> ID), or None where the Python path encodes: no native core, or a custom pattern."""
    native = backend.native
    mode = NATIVE_NO_SPLIT if pattern == "" else patterns.NATIVE_SPLIT_MODES.get(pattern)
    if native is None or mode is None:
        return None
    base = dict(base) if isinstance(base, Mapping) else list(base)
    cache = native.Encoder(native_merger(native, rank_of, result_of), mode, base, unknown or 0)
    return NativeChunkEncoder(cache)
