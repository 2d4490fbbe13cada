"""Byte-pair-encoding training: learn an ordered list of merges from texts.

Tie-break rule: each step merges the pair with the highest count; among pairs with equal counts, the
smallest ``(left_id, right_id)`` pair wins. With the byte kind this reproduces ``rustbpe`` merge for
merge (it keeps a max-heap ordered the same way), and it reproduces the classic worked examples:
``"aaabdaaabac"`` gives (97, 97) -> 256, (97, 98) -> 257, (256, 257) -> 258.

Kinds:

- ``byte``: ids 0..255 are byte values, chunks are UTF-8 encoded, merges get 256, 257, ...
- ``char``: id 0 is "unknown", the distinct characters of the training chunks follow from id 1 in
  code-point order (the ``alphabet``), merges get ``len(alphabet) + 1``, ...

Algorithm (incremental, as rustbpe and HF tokenizers do; the corpus is read once):

1. Count distinct pre-split chunks in worker processes (``_train_count``).
2. Lay the symbols of all distinct chunks out in one flat array with neighbour links
   (``_train_pairs.Chunks``). Each id has a symbol, a code point that skips the surrogate block;
   ids run up to ``_train_pairs.MAX_ID`` (1,112,062): one per Unicode scalar value, less the
   separator U+10FFFF.
3. Keep pair -> count, pair -> positions where it was born, and a max-heap of (count, pair) with lazy
   refresh, for the pairs that may still be merged: a popped entry whose count went stale is pushed
   back with the current count. Only a merge creates pairs (all of them contain the new id), so an
   old pair's count never grows and the pair -> positions index never needs more than the positions
   listed when the pair was born.
4. A merge visits only the positions listed for its pair and updates counts around each merged
   occurrence, summed per distinct neighbouring pair: in a loop for a few positions, with numpy for
   many.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import regex

from pipeline.engine.progress import Progress
from pipeline.errors import TokenizerError
from pipeline.tokenizer import _train_pairs as pairs
from pipeline.tokenizer._train_count import count_chunks

KINDS = ("byte", "char")
# Heap entries are one int, ``-count << KEY_SHIFT | pair_code``: ascending order is highest count, then
# smallest pair, and int comparisons make heap operations cheaper than on (count, pair) tuples.
KEY_SHIFT = 2 * pairs.SHIFT
CODE_MASK = (1 << KEY_SHIFT) - 1


@dataclass(frozen=True)
class TrainResult:
    """What training learned.

    ``merges[i]`` is the pair merged at step ``i``; it creates id ``first_merge_id + i``, where the first
    merge id is 256 for the byte kind and ``len(alphabet) + 1`` for the char kind.
    """

    merges: list[tuple[int, int]]
    alphabet: list[str]
    stop_reason: str | None


def train_merges(
    texts: Iterable[str],
    *,
    kind: str,
    pattern: str,
    num_merges: int,
    min_frequency: int = 2,
    merge_newlines: bool = True,
    workers: int = 0,
    progress: bool = False,
) -> TrainResult:
    """Learn up to ``num_merges`` merges from ``texts`` (each text is one training sequence).

    ``pattern`` pre-splits each text into chunks (``""``: the whole text is one chunk); pairs never
    cross texts or chunks. Training stops early, with ``stop_reason`` saying why, when no allowed pair
    occurs at least ``min_frequency`` times. ``merge_newlines=False`` forbids every pair that contains
    the newline symbol, so no learned token contains ``"\\n"``. ``workers=0`` uses all cores.
    """
    _check_options(kind=kind, pattern=pattern, num_merges=num_merges, min_frequency=min_frequency, workers=workers)
    _check_id_range((256 if kind == "byte" else 1) + num_merges)  # the ids known before counting
    chunk_counts = count_chunks(texts, pattern=pattern, workers=workers, progress=progress)
    return merges_from_counts(chunk_counts, kind=kind, num_merges=num_merges, min_frequency=min_frequency,
                              merge_newlines=merge_newlines, progress=progress)


def merges_from_counts(
    chunk_counts: dict[str, int],
    *,
    kind: str,
    num_merges: int,
    min_frequency: int = 2,
    merge_newlines: bool = True,
    progress: bool = False,
) -> TrainResult:
    """The merge phase of :func:`train_merges`, from the distinct pre-split chunks and their counts
    (as :func:`count_chunks` gives them, however the counting was spread over processes or machines).

    The caller's ``chunk_counts`` is emptied: each structure is freed as soon as the next one is
    built, since peak memory is a goal."""
    _check_options(kind=kind, pattern="", num_merges=num_merges, min_frequency=min_frequency, workers=0)
    counts = np.fromiter(chunk_counts.values(), dtype=np.int64, count=len(chunk_counts))
    distinct = list(chunk_counts)
    chunk_counts.clear()
    symbols, alphabet = _base_symbols(distinct, kind)
    del distinct
    chunks = pairs.Chunks(symbols, counts)
    del symbols, counts
    first_id = 256 if kind == "byte" else len(alphabet) + 1
    _check_id_range(first_id + num_merges)
    newline_id = None if merge_newlines else _newline_id(kind, alphabet)
    forbidden = None if newline_id is None else pairs.symbol_of(newline_id)
    trainer = _Trainer(chunks, first_id=first_id, min_frequency=min_frequency, forbidden=forbidden)
    merges, stop_reason = trainer.run(num_merges, progress=progress)
    return TrainResult(merges=merges, alphabet=alphabet, stop_reason=stop_reason)


def _check_options(*, kind: str, pattern: str, num_merges: int, min_frequency: int, workers: int) -> None:
    if kind not in KINDS:
        raise TokenizerError(f"unknown tokenizer kind {kind!r}; use one of {', '.join(KINDS)}")
    if num_merges < 0:
        raise TokenizerError(f"number of merges must be >= 0, got {num_merges}; raise the vocabulary size")
    if min_frequency < 1:
        raise TokenizerError(f"min_frequency must be >= 1, got {min_frequency}")
    if workers < 0:
        raise TokenizerError(f"workers must be >= 0 (0 = all cores), got {workers}")
    if pattern:
        try:
            regex.compile(pattern)
        except regex.error as error:
            raise TokenizerError(f"invalid split pattern {pattern!r}: {error}; fix the regex") from None


def _check_id_range(end_id: int) -> None:
    """Every id needs a code point of its own below the separator (``_train_pairs.MAX_ID``)."""
    if end_id > pairs.MAX_ID + 1:
        raise TokenizerError(
            f"training would need {end_id} ids for base tokens and merges, but it holds at most "
            f"{pairs.MAX_ID + 1}; lower the vocabulary size or the number of merges"
        )


def _newline_id(kind: str, alphabet: list[str]) -> int | None:
    if kind == "byte":
        return ord("\n")
    return alphabet.index("\n") + 1 if "\n" in alphabet else None


def _base_symbols(chunks: list[str], kind: str) -> tuple[np.ndarray, list[str]]:
    """The base symbols of all chunks in one array (``_train_pairs.Chunks`` layout), and the alphabet."""
    if kind == "byte":
        return pairs.utf8_symbols(chunks), []
    alphabet = sorted(set().union(*map(set, chunks))) if chunks else []
    table = {ord(char): pairs.symbol_of(i + 1) for i, char in enumerate(alphabet)}
    return pairs.code_point_symbols([chunk.translate(table) for chunk in chunks]), alphabet


class _Trainer:
    """The merge loop over distinct chunks: pair counts, pair -> positions index and a lazy max-heap.

    Pairs, counts and the heap are all in symbols (``_train_pairs.symbol_of``), whose order is the
    ids' order; ``forbidden`` is a symbol too.
    """

    def __init__(self, chunks: pairs.Chunks, *, first_id: int, min_frequency: int, forbidden: int | None):
        self.chunks = chunks
        self.first_id = first_id
        self.min_frequency = min_frequency
        self.forbidden = forbidden
        counts, where = chunks.initial_pairs(base=pairs.symbol_of(first_id))
        self.pair_counts = {code: count for code, count in counts.items() if self._eligible(code, count)}
        self.where = {code: where[code] for code in self.pair_counts}
        self.heap = [-count << KEY_SHIFT | code for code, count in self.pair_counts.items()]
        heapq.heapify(self.heap)

    def run(self, num_merges: int, *, progress: bool) -> tuple[list[tuple[int, int]], str | None]:
        merges: list[tuple[int, int]] = []
        with Progress("tokenizer: merging", total=num_merges, unit="merges", enabled=progress) as bar:
            while len(merges) < num_merges:
                code = self._pop_best()
                if code is None:
                    return merges, f"no pair occurs at least {self.min_frequency} times after {len(merges)} merges"
                left, right = pairs.unpack(code)
                merges.append((pairs.id_of(left), pairs.id_of(right)))
                self._merge(code, pairs.symbol_of(self.first_id + len(merges) - 1))
                bar.update()
        return merges, None

    def _eligible(self, code: int, count: int) -> bool:
        return count >= self.min_frequency and self._allowed(code)

    def _allowed(self, code: int) -> bool:
        return self.forbidden is None or self.forbidden not in pairs.unpack(code)

    def _pop_best(self) -> int | None:
        """The pair with the highest current count (smallest pair on ties), refreshing stale entries."""
        heap, pair_counts = self.heap, self.pair_counts
        while heap:
            key = heapq.heappop(heap)
            code = key & CODE_MASK
            current = pair_counts.get(code)
            if current == -(key >> KEY_SHIFT):
                return code
            if current is not None:
                heapq.heappush(heap, -current << KEY_SHIFT | code)
        return None

    def _merge(self, code: int, new_symbol: int) -> None:
        """Replace the pair by ``new_symbol`` wherever it occurs and update counts, index and heap.

        Only pairs that may still be merged are tracked: counts never grow, so a pair that falls
        below ``min_frequency`` leaves the counts and the index for good (its heap entry goes stale).
        """
        born, dropped, born_at = self.chunks.merge(self.where.pop(code), code, new_symbol)
        pair_counts, where, min_frequency = self.pair_counts, self.where, self.min_frequency
        del pair_counts[code]  # every occurrence is merged
        for pair_code, drop in dropped.items():
            count = pair_counts.get(pair_code, 0) - drop
            if count >= min_frequency:
                pair_counts[pair_code] = count
            elif pair_code in pair_counts:
                del pair_counts[pair_code], where[pair_code]
        self._index_born(born, born_at)

    def _index_born(self, born: dict[int, int], born_at: dict[int, Sequence[int]]) -> None:
        """Track the born pairs that may be merged: their counts, positions and heap entries."""
        heap, pair_counts, where, min_frequency = self.heap, self.pair_counts, self.where, self.min_frequency
        anything_allowed = self.forbidden is None
        for pair_code, count in born.items():
            if count >= min_frequency and (anything_allowed or self._allowed(pair_code)):
                heapq.heappush(heap, -count << KEY_SHIFT | pair_code)
                pair_counts[pair_code] = count
                where[pair_code] = born_at[pair_code]

