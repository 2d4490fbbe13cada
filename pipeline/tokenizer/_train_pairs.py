"""Pair bookkeeping for BPE training, written so that C code (str methods, numpy) does the scanning.

A chunk's current symbols are a ``str`` whose characters are token ids (``chr(id)``). A pair
``(left, right)`` is packed into one int, ``left << 21 | right``: ids stay below ``SEPARATOR_ID``
(< 2**21), and int order equals tuple order, so the heap's tie-break on the packed int is the
tie-break on the pair.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

SHIFT = 21
MASK = (1 << SHIFT) - 1
SEPARATOR_ID = 0x10FFFF  # the last code point: joins chunks in bulk operations, never a token id
SEPARATOR = chr(SEPARATOR_ID)
_UTF8_SEPARATOR = SEPARATOR.encode("utf-8")


def pack(left: int, right: int) -> int:
    return left << SHIFT | right


def unpack(code: int) -> tuple[int, int]:
    return code >> SHIFT, code & MASK


def utf8_words(chunks: Sequence[str]) -> list[str]:
    """Each chunk's UTF-8 bytes as a str with one character per byte value (in one C-level pass).

    The chunks are joined by the separator, whose UTF-8 form is then swapped for byte 0xFF, a value
    that never occurs in UTF-8, so the split after decoding as latin-1 is exact.
    """
    joined = SEPARATOR.join(chunks)
    if joined.count(SEPARATOR) != max(len(chunks) - 1, 0):  # a chunk contains U+10FFFF itself
        return [chunk.encode("utf-8").decode("latin-1") for chunk in chunks]
    data = joined.encode("utf-8").replace(_UTF8_SEPARATOR, b"\xff")
    return data.decode("latin-1").split("\xff") if chunks else []


def initial_pairs(words: Sequence[str], counts: np.ndarray, *, base: int) -> tuple[dict[int, int], dict[int, np.ndarray]]:
    """Count every adjacent pair of base ids (weighted by chunk count) and list the chunks holding each pair.

    ``base`` is the first id that is not a base id. Done with numpy over all chunks at once: the
    pairs of each position, a stable argsort to group them by pair, sums per group for the totals.
    """
    ids = np.frombuffer(SEPARATOR.join(words).encode("utf-32-le"), dtype=np.uint32)
    is_separator = ids == SEPARATOR_ID
    inside = ~(is_separator[:-1] | is_separator[1:])
    owner = np.cumsum(is_separator, dtype=np.int64)[:-1][inside]
    local = ids[:-1][inside].astype(np.int64) * base + ids[1:][inside]
    if not len(local):
        return {}, {}
    order = np.argsort(local.astype(np.uint16) if base <= 256 else local, kind="stable")
    local, owner = local[order], owner[order]
    starts = _group_starts(local)
    totals = np.add.reduceat(counts[owner], starts)
    fresh = np.r_[True, (local[1:] != local[:-1]) | (owner[1:] != owner[:-1])]
    local, owner = local[fresh], owner[fresh]
    starts = _group_starts(local)
    ends = np.r_[starts[1:], len(local)]
    pair_counts: dict[int, int] = {}
    where: dict[int, np.ndarray] = {}
    for start, end, value, total in zip(starts.tolist(), ends.tolist(), local[starts].tolist(), totals.tolist()):
        code = pack(value // base, value % base)
        pair_counts[code] = total
        where[code] = owner[start:end]
    return pair_counts, where


def _group_starts(sorted_values: np.ndarray) -> np.ndarray:
    """Indices where a run of equal values begins in a sorted, non-empty array."""
    return np.flatnonzero(np.r_[True, sorted_values[1:] != sorted_values[:-1]])


def merge_chunks(
    words: list[str], counts: Sequence[int], chunk_ids, code: int, new_id: int
) -> tuple[dict[int, int], dict[int, list[int]]]:
    """Merge pair ``code`` into ``new_id`` in the listed chunks (in place in ``words``).

    Returns the count change of every neighbouring pair (summed per pair) and, for each pair born in
    this merge, the chunks that now contain it. The merged pair's own count drops to zero; it is not
    reported. Occurrences are replaced left to right without overlap (``"aaa"`` -> ``[N, a]``).
    """
    left, right = unpack(code)
    pair, new = chr(left) + chr(right), chr(new_id)
    deltas: dict[int, int] = {}
    born_in: dict[int, list[int]] = {}
    if isinstance(chunk_ids, np.ndarray):
        chunk_ids = chunk_ids.tolist()
    for index in chunk_ids:
        old = words[index]
        merged = old.replace(pair, new)
        if merged is old:
            continue
        words[index] = merged
        _occurrence_deltas(merged, new, left, right, counts[index], index, deltas, born_in)
    return deltas, born_in


def _occurrence_deltas(
    merged: str, new: str, left: int, right: int, count: int, index: int,
    deltas: dict[int, int], born_in: dict[int, list[int]],
) -> None:
    """Add the pair-count changes around each occurrence of ``new`` in one merged chunk.

    Left of an occurrence, pair (x, left) becomes (x, new) -- where x is ``new`` itself when two merges
    touch, the old pair was (right, left). Right of it, (right, y) becomes (new, y), unless y is the next
    occurrence (that pair is handled as the next occurrence's left side).
    """
    new_id = ord(new)
    last = len(merged) - 1
    position = merged.find(new)
    while position != -1:
        if position:
            x = ord(merged[position - 1])
            _add(deltas, born_in, x << SHIFT | new_id, count, index)
            removed = (right if x == new_id else x) << SHIFT | left
            deltas[removed] = deltas.get(removed, 0) - count
        if position < last:
            y = ord(merged[position + 1])
            if y != new_id:
                _add(deltas, born_in, new_id << SHIFT | y, count, index)
                removed = right << SHIFT | y
                deltas[removed] = deltas.get(removed, 0) - count
        position = merged.find(new, position + 1)


def _add(deltas: dict[int, int], born_in: dict[int, list[int]], code: int, count: int, index: int) -> None:
    deltas[code] = deltas.get(code, 0) + count
    holders = born_in.get(code)
    if holders is None:
        born_in[code] = [index]
    elif holders[-1] != index:
        holders.append(index)
