"""Pair bookkeeping for BPE training: the symbols of every distinct chunk in one flat array.

Symbols: token id ``i`` is the code point ``symbol_of(i)``, which is ``i`` itself below U+D800 and
skips the surrogate block U+D800..U+DFFF above it, so symbols can pass through str and the UTF-32
codec on their way in (the char kind), and the last code point U+10FFFF, the separator, is never one.
The mapping keeps order, so every comparison of symbols is the comparison of their ids, and the merge
loop works on symbols alone; ids come back only in the learned merges. A pair ``(left, right)`` of
symbols is packed into one int, ``left << 21 | right``: int order equals tuple order, so the heap's
tie-break on the packed int is the tie-break on the pair.

Layout: the symbols of all distinct chunks lie in one int32 array, each chunk between separators.
A merge keeps the left position of each occurrence and marks the right one dead, so positions never
move; ``nxt``/``prv`` link every live position to its live neighbours. Every pair of a chunk is
created all at once: initially, or by the merge that creates the newer of its two symbols (only a
merge changes a position's symbol or neighbour, and it gives that position the new symbol). So the
positions where a pair was born, kept by the trainer, hold all its occurrences, plus stale ones
that later merges took apart: a merge checks each position and skips those.

A merge touching few positions runs as a plain loop over them (``memoryview`` access to the arrays);
one touching many runs as numpy operations over all of them at once.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

SHIFT = 21
MASK = (1 << SHIFT) - 1
SEPARATOR_ID = 0x10FFFF  # the last code point: sits between chunks, never a token's symbol
DEAD = -1  # the symbol of a position merged into its left neighbour
_SURROGATES_START = 0xD800
_SURROGATES = 0x800
MAX_ID = SEPARATOR_ID - 1 - _SURROGATES  # 1,112,062: its symbol is U+10FFFE, the last below the separator
BULK_POSITIONS = 64  # a merge listing at least this many positions runs with numpy


def symbol_of(token_id: int) -> int:
    """The code point that stands for ``token_id`` in the symbol array."""
    return token_id if token_id < _SURROGATES_START else token_id + _SURROGATES


def id_of(symbol: int) -> int:
    """The token id that code point ``symbol`` stands for (the inverse of :func:`symbol_of`)."""
    return symbol if symbol < _SURROGATES_START else symbol - _SURROGATES


def pack(left: int, right: int) -> int:
    return left << SHIFT | right


def unpack(code: int) -> tuple[int, int]:
    return code >> SHIFT, code & MASK


def utf8_symbols(chunks: Sequence[str]) -> np.ndarray:
    """The UTF-8 bytes of all chunks, each chunk between separators, as one int32 symbol array.

    Chunks are joined by byte 0xFF, which never occurs in UTF-8, so the separators are exact.
    """
    data = np.frombuffer(b"\xff" + b"\xff".join(map(str.encode, chunks)) + b"\xff", dtype=np.uint8)
    symbols = data.astype(np.int32)
    symbols[data == 0xFF] = SEPARATOR_ID
    return symbols


def code_point_symbols(words: Sequence[str]) -> np.ndarray:
    """Chunks already written in symbols (one character each), joined into one int32 symbol array."""
    separator = chr(SEPARATOR_ID)
    joined = separator + separator.join(words) + separator
    return np.frombuffer(joined.encode("utf-32-le"), dtype=np.uint32).astype(np.int32)


class Chunks:
    """The symbols of all distinct chunks, their neighbour links and the count of the chunk of each position."""

    def __init__(self, symbols: np.ndarray, counts: np.ndarray):
        size = len(symbols)
        index = np.int32 if size < 2**31 else np.int64
        self.sym = symbols
        self.nxt = np.arange(1, size + 1, dtype=index)
        self.prv = np.arange(-1, size - 1, dtype=index)
        # a position's chunk is the number of separators before it, less one; separators weigh 0
        is_separator = symbols == SEPARATOR_ID
        counts = np.append(counts, 0).astype(np.int32 if counts.max(initial=0) < 2**31 else np.int64)
        self.weight = counts[np.cumsum(is_separator, dtype=index) - is_separator - 1]
        self.weight[is_separator] = 0
        self._sym, self._nxt, self._prv, self._weight = map(memoryview, (self.sym, self.nxt, self.prv, self.weight))

    def initial_pairs(self, base: int) -> tuple[dict[int, int], dict[int, np.ndarray]]:
        """Count every adjacent pair of base symbols (weighted by chunk count) and list its positions.

        ``base`` is above every base symbol. Done with numpy over all positions at once: a stable
        argsort groups the positions by pair, sums per group give the counts.
        """
        sym = self.sym
        at = np.flatnonzero((sym[:-1] != SEPARATOR_ID) & (sym[1:] != SEPARATOR_ID)).astype(self.nxt.dtype)
        if not len(at):
            return {}, {}
        if base <= 256:  # keys below 65536 as uint16: argsort sorts them several times faster
            local = (sym[at] * base + sym[at + 1]).astype(np.uint16)
        else:
            local = sym[at].astype(np.int64) * base + sym[at + 1]
        keys, totals, positions = _grouped(local, at, self.weight[at])
        codes = [pack(value // base, value % base) for value in keys.tolist()]
        return dict(zip(codes, totals.tolist())), dict(zip(codes, positions))

    def merge(self, positions, code: int, new: int) -> tuple[dict[int, int], dict[int, int], dict[int, Sequence[int]]]:
        """Merge pair ``code`` into symbol ``new`` at the listed positions (ascending) where it still occurs.

        Returns the counts of the pairs born in this merge, the count drop of every old neighbouring
        pair (summed per pair), and the positions of each born pair (ascending). The merged pair's own
        count drops to zero; it is not reported (it may appear among the drops when runs repeat).
        Occurrences are replaced left to right without overlap (``"aaa"`` -> ``[N, a]``).
        """
        if len(positions) >= BULK_POSITIONS:
            return self._merge_many(positions, code, new)
        return self._merge_few(positions, code, new)

    def _merge_few(self, positions, code: int, new: int):
        """``merge`` one occurrence at a time, in plain Python: per merge it costs microseconds, not tens.

        A position merged just before is dead by the time the loop reaches it, which gives the left
        to right rule; an occurrence right after the current one takes the pair between them as its
        left side, where the left neighbour is already ``new``.
        """
        left, right = unpack(code)
        sym, nxt, prv, weight = self._sym, self._nxt, self._prv, self._weight
        before: dict[int, int] = {}  # symbol x -> summed weight of occurrences preceded by x
        after: dict[int, int] = {}  # symbol y -> summed weight of occurrences followed by y
        before_at: dict[int, list[int]] = {}
        after_at: dict[int, list[int]] = {}
        for p in positions.tolist() if isinstance(positions, np.ndarray) else positions:
            q = nxt[p]
            if sym[p] != left or sym[q] != right:
                continue
            r = nxt[q]
            sym[p] = new
            sym[q] = DEAD
            nxt[p] = r
            prv[r] = p
            w = weight[p]
            x_at = prv[p]
            x = sym[x_at]
            if x != SEPARATOR_ID:
                before[x] = before.get(x, 0) + w
                if x in before_at:
                    before_at[x].append(x_at)
                else:
                    before_at[x] = [x_at]
            y = sym[r]
            if y != SEPARATOR_ID and not (y == left and sym[nxt[r]] == right):
                after[y] = after.get(y, 0) + w
                if y in after_at:
                    after_at[y].append(p)
                else:
                    after_at[y] = [p]
        return _pair_deltas(left, right, new, before, after, before_at, after_at)

    def _merge_many(self, positions, code: int, new: int):
        """``merge`` with numpy over all listed positions: the same rules as ``_merge_few``, vectorised."""
        left, right = unpack(code)
        sym, nxt, prv = self.sym, self.nxt, self.prv
        p = np.asarray(positions, dtype=nxt.dtype)
        q = nxt[p]
        found = (sym[p] == left) & (sym[q] == right)
        p, q = p[found], q[found]
        if left == right:
            p, q = _left_to_right(p, q)
        r = nxt[q]
        y = sym[r]
        follows = np.zeros(len(p) + 1, dtype=bool)  # occurrence i starts where occurrence i - 1 ends
        follows[1:-1] = r[:-1] == p[1:]
        sym[q] = DEAD
        sym[p] = new
        nxt[p] = r
        prv[r] = p
        w = self.weight[p]
        x_at = prv[p]
        x = sym[x_at]
        has_x = x != SEPARATOR_ID
        has_y = (y != SEPARATOR_ID) & ~follows[1:]
        before, before_at = _sums(x[has_x], x_at[has_x], w[has_x])
        after, after_at = _sums(y[has_y], p[has_y], w[has_y])
        return _pair_deltas(left, right, new, before, after, before_at, after_at)


def _left_to_right(p: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For a pair of equal symbols, keep every other occurrence of each run (``"aaaa"`` -> ``[N, N]``)."""
    chained = np.zeros(len(p), dtype=bool)
    chained[1:] = q[:-1] == p[1:]
    if not chained.any():
        return p, q
    index = np.arange(len(p))
    run_start = np.maximum.accumulate(np.where(chained, 0, index))
    keep = (index - run_start) % 2 == 0
    return p[keep], q[keep]


def _sums(symbols: np.ndarray, positions: np.ndarray, weights: np.ndarray):
    """Per distinct neighbour symbol: the summed weight of its occurrences and their positions."""
    if not len(symbols):
        return {}, {}
    keys, totals, groups = _grouped(symbols, positions, weights)
    keys = keys.tolist()
    return dict(zip(keys, totals.tolist())), dict(zip(keys, groups))


def _grouped(keys: np.ndarray, positions: np.ndarray, weights: np.ndarray):
    """Group positions by key: per distinct key (ascending), the summed weight and the positions, in
    their original (ascending) order, as the sort is stable."""
    order = np.argsort(keys, kind="stable")
    keys = keys[order]
    ends = (np.flatnonzero(keys[1:] != keys[:-1]) + 1).tolist()
    starts = [0, *ends]
    ends.append(len(keys))
    totals = np.add.reduceat(weights[order], starts, dtype=np.int64)
    positions = positions[order]
    return keys[starts], totals, [positions[start:end] for start, end in zip(starts, ends)]


def _pair_deltas(left, right, new, before, after, before_at, after_at):
    """Turn neighbour sums into the counts of born pairs, the count drops of old ones, and born pairs' positions.

    Left of an occurrence, pair (x, left) becomes (x, new) -- where x is the new symbol itself when two
    occurrences touch, the old pair was (right, left). Right of it, (right, y) becomes (new, y); when y
    starts the next occurrence, that pair is counted as the next occurrence's left side. Born pairs
    hold ``new`` and old ones do not, so the two dicts never share a key.
    """
    born: dict[int, int] = {}
    dropped: dict[int, int] = {}
    born_at: dict[int, Sequence[int]] = {}
    for x, total in before.items():
        code = x << SHIFT | new
        born[code] = total
        born_at[code] = before_at[x]
        old = (right if x == new else x) << SHIFT | left
        dropped[old] = dropped.get(old, 0) + total
    for y, total in after.items():
        code = new << SHIFT | y  # y is never new, so no pair of the loop above
        born[code] = total
        born_at[code] = after_at[y]
        old = right << SHIFT | y
        dropped[old] = dropped.get(old, 0) + total
    return born, dropped, born_at
