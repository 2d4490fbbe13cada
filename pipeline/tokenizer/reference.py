"""BPE written plainly (as minbpe does): the definition, and the Python path where the native core is not built.

Read this first. The native core (``_native.cpp``, through ``trainer.py`` and ``encoder.py``) learns exactly
the merges :func:`train` learns and gives exactly the IDs :func:`encode` gives, only much faster; the tests
check both on random text. Without the core, ``trainer.py`` trains with :func:`train_from_counts` and
``encoder.py`` encodes each distinct chunk with :func:`encode_chunk`. The rules:

- The split pattern cuts each text into chunks (``patterns.splitter``); no pair crosses a chunk or a
  text. Identical chunks are folded into one with their count, which weighs each of its pairs.
- Base IDs (``layout``): a chunk starts as its UTF-8 bytes (byte kind, IDs 0–255), or as one ID per
  character (char kind: 0 is unknown, the training chunks' distinct characters follow from 1 in
  code-point order).
- Each training step merges the most frequent pair; ties go to the smallest ``(left, right)``. Merge
  ``i`` makes the ID ``base + i``. Training stops early when no pair occurs ``min_frequency`` times;
  with ``merge_newlines=False`` a pair holding the newline never merges.
- A merge replaces its pair left to right without overlap: ``a a a`` becomes ``aa a``.
- Encoding applies the merges lowest rank first; a merge's result only takes part in later merges,
  so this is the same as replaying all merges in training order.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from pipeline.errors import counted
from pipeline.tokenizer import patterns
from pipeline.tokenizer.layout import UNKNOWN_ID, base_id_count

Pair = tuple[int, int]


def get_stats(chunks: Mapping[tuple[int, ...], int]) -> Counter[Pair]:
    """How often each adjacent pair occurs: each chunk's pairs count as many times as the chunk does."""
    stats: Counter[Pair] = Counter()
    for ids, count in chunks.items():
        for pair in zip(ids, ids[1:]):
            stats[pair] += count
    return stats


def merge(ids: Sequence[int], pair: Pair, new_id: int) -> list[int]:
    """``ids`` with every occurrence of ``pair`` replaced by ``new_id``, left to right without overlap."""
    merged, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
            merged.append(new_id)
            i += 2
        else:
            merged.append(ids[i])
            i += 1
    return merged


def char_ids(alphabet: Sequence[str]) -> dict[str, int]:
    """The char kind's base ID of each character of the alphabet (0 is the unknown ID)."""
    return {char: i for i, char in enumerate(alphabet, start=UNKNOWN_ID + 1)}


def base_ids(chunk: str, kind: str, char_id: Mapping[str, int]) -> list[int]:
    """The IDs a chunk starts as, before any merge (``char_id``: :func:`char_ids`, unused by the byte kind)."""
    if kind == "byte":
        return list(chunk.encode("utf-8"))
    return [char_id.get(char, UNKNOWN_ID) for char in chunk]


def train(texts: Iterable[str], *, kind: str, pattern: str, num_merges: int, min_frequency: int = 2,
          merge_newlines: bool = True) -> tuple[list[Pair], list[str], str | None]:
    """``(merges, alphabet, stop_reason)`` learned from ``texts``; the alphabet is empty for the byte kind."""
    split = patterns.splitter(pattern)
    chunk_counts = Counter(chunk for text in texts for chunk in split(text))
    return train_from_counts(chunk_counts, kind=kind, num_merges=num_merges, min_frequency=min_frequency,
                             merge_newlines=merge_newlines)


def train_from_counts(chunk_counts: Mapping[str, int], *, kind: str, num_merges: int, min_frequency: int = 2,
                      merge_newlines: bool = True) -> tuple[list[Pair], list[str], str | None]:
    """:func:`train` from the distinct chunks and their counts."""
    alphabet = sorted(set("".join(chunk_counts))) if kind == "char" else []
    char_id = char_ids(alphabet)
    chunks: Counter[tuple[int, ...]] = Counter()
    for chunk, count in chunk_counts.items():
        chunks[tuple(base_ids(chunk, kind, char_id))] += count
    chunks = _with_pairs(chunks)
    newline = base_ids("\n", kind, char_id)[0]  # the unknown ID if the text has none: no pair holds it
    first_id = base_id_count(kind, len(alphabet))
    merges: list[Pair] = []
    while len(merges) < num_merges:
        stats = {pair: count for pair, count in get_stats(chunks).items()
                 if count >= min_frequency and (merge_newlines or newline not in pair)}
        if not stats:
            return merges, alphabet, (f"no pair occurs at least {counted(min_frequency, 'time')} after "
                                      f"{counted(len(merges), 'merge')}")
        pair = min(stats, key=lambda p: (-stats[p], p))  # the most frequent; on ties the smallest pair
        new_id = first_id + len(merges)
        merged: Counter[tuple[int, ...]] = Counter()
        for ids, count in chunks.items():
            merged[tuple(merge(ids, pair, new_id)) if pair[0] in ids else ids] += count
        chunks = _with_pairs(merged)
        merges.append(pair)
    return merges, alphabet, None


def _with_pairs(chunks: Counter[tuple[int, ...]]) -> Counter[tuple[int, ...]]:
    """The chunks that still hold a pair: one of a single ID never takes part in a merge again (dropping it
    changes no count, it only saves recounting it)."""
    return Counter({ids: count for ids, count in chunks.items() if len(ids) > 1})


def lowest_ranked_pair(ids: Sequence[int], ranks: Mapping[Pair, int]) -> Pair | None:
    """The adjacent pair that merges first (the lowest rank), or None when no pair of ``ids`` merges."""
    return min((pair for pair in zip(ids, ids[1:]) if pair in ranks), key=ranks.__getitem__, default=None)


def encode_chunk(ids: Sequence[int], ranks: Mapping[Pair, int], results: Sequence[int]) -> list[int]:
    """Apply merges to one chunk's IDs, lowest rank first; merge ``rank`` makes ``results[rank]``."""
    ids = list(ids)
    while (pair := lowest_ranked_pair(ids, ranks)) is not None:
        ids = merge(ids, pair, results[ranks[pair]])
    return ids


def encode(text: str, *, kind: str, pattern: str, merges: Sequence[Pair], alphabet: Sequence[str] = ()) -> list[int]:
    """The IDs of ``text`` for the tokenizer :func:`train` describes (special-token strings are plain text)."""
    ranks = {pair: rank for rank, pair in enumerate(merges)}
    first_id = base_id_count(kind, len(alphabet))
    results = range(first_id, first_id + len(merges))
    char_id = char_ids(alphabet)
    ids: list[int] = []
    for chunk in patterns.splitter(pattern)(text):
        ids += encode_chunk(base_ids(chunk, kind, char_id), ranks, results)
    return ids
