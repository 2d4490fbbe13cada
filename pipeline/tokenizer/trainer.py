"""Byte-pair-encoding training: learn an ordered list of merges from texts.

The algorithm is ``reference.train`` (read it first: recount every pair, merge the best, repeat). With the
native core (``backend``) training runs in C++ (``_native_train.h``), incrementally, as rustbpe and HF
tokenizers do, and learns exactly the reference's merges, which the tests check on random text; without
it, ``reference.train_from_counts`` itself is the fallback (slow: docs/native.md says how slow).

Tie-break rule: each step merges the pair with the highest count; among pairs with equal counts, the
smallest ``(left_id, right_id)`` pair wins. With the byte kind this reproduces ``rustbpe`` merge for
merge (it keeps a max-heap ordered the same way), and it reproduces the classic worked examples:
``"aaabdaaabac"`` gives (97, 97) -> 256, (97, 98) -> 257, (256, 257) -> 258.

Kinds:

- ``byte``: ids 0..255 are byte values, chunks are UTF-8 encoded, merges get 256, 257, ...
- ``char``: id 0 is "unknown", the distinct characters of the training chunks follow from id 1 in
  code-point order (the ``alphabet``), merges get ``len(alphabet) + 1``, ... With a
  ``character_coverage`` below 1 the alphabet is only the most frequent characters that make up that
  share of the text (as sentencepiece's option of that name); the others become "unknown" and each
  chunk is cut at them for training, so no merge contains the unknown token.

Steps (the corpus is read once):

1. Count distinct pre-split chunks (``_train_count``): with threads in the native core for the patterns
   it splits by hand, else in worker processes.
2. Native core: lay the symbols of all distinct chunks out in one flat array (``_train_pairs``), and
   run the merge loop over it (``_native.PairMerger``): pair counts, the positions where each pair was
   born and a lazy max-heap, updated around each merged occurrence instead of recounting.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import regex

from pipeline.engine.progress import Progress
from pipeline.errors import TokenizerError, counted, shorten
from pipeline.tokenizer import _train_pairs as pairs
from pipeline.tokenizer import backend, reference
from pipeline.tokenizer._train_count import tally
from pipeline.tokenizer.layout import base_id_count
from pipeline.tokenizer.patterns import compile_checked

KINDS = ("byte", "char")
NATIVE_MAX_SYMBOLS = 2**32 - 2  # positions the native merge loop indexes with 32 bits
PROGRESS_MERGES = 1000  # merges per native call while a progress bar shows them
_SURROGATE = regex.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class TrainResult:
    """What training learned.

    ``merges[i]`` is the pair merged at step ``i``; it creates id ``first_merge_id + i``, where the first
    merge id is 256 for the byte kind and ``len(alphabet) + 1`` for the char kind.
    """

    merges: list[tuple[int, int]]
    alphabet: list[str]
    stop_reason: str | None
    coverage_note: str | None = None  # how many characters ``character_coverage`` left out, if any


def train_merges(
    texts: Iterable[str],
    *,
    kind: str,
    pattern: str,
    num_merges: int,
    min_frequency: int = 2,
    merge_newlines: bool = True,
    character_coverage: float = 1.0,
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
    _check_id_range(base_id_count(kind) + num_merges)  # the ids known before counting
    chunk_counts = tally(texts, pattern=pattern, workers=workers, progress=progress)
    return merges_from_counts(chunk_counts, kind=kind, num_merges=num_merges, min_frequency=min_frequency,
                              merge_newlines=merge_newlines, character_coverage=character_coverage,
                              progress=progress)


def merges_from_counts(
    chunk_counts,
    *,
    kind: str,
    num_merges: int,
    min_frequency: int = 2,
    merge_newlines: bool = True,
    character_coverage: float = 1.0,
    progress: bool = False,
) -> TrainResult:
    """The merge phase of :func:`train_merges`, from the distinct pre-split chunks and their counts: a dict (as
    :func:`count_chunks` gives it) or ``_train_count.tally``'s counts, however the counting was spread over
    processes or machines. From a native ``ChunkCounter`` the byte kind's symbols come straight from its
    table, with no dict of chunks between.

    The caller's ``chunk_counts`` is emptied: each structure is freed as soon as the next one is
    built, since peak memory is a goal."""
    _check_options(kind=kind, pattern="", num_merges=num_merges, min_frequency=min_frequency, workers=0)
    if not isinstance(chunk_counts, dict):
        result = None if kind != "byte" else _merges_from_byte_layout(
            chunk_counts, num_merges=num_merges, min_frequency=min_frequency, merge_newlines=merge_newlines,
            progress=progress)
        if result is not None:
            return result
        chunk_counts = chunk_counts.pop_counts()
    coverage_note = None
    if kind == "char" and character_coverage < 1:
        chunk_counts, coverage_note = _drop_rare_characters(chunk_counts, character_coverage)
    if backend.native is None:
        return _train_in_python(chunk_counts, kind=kind, num_merges=num_merges, min_frequency=min_frequency,
                                merge_newlines=merge_newlines, coverage_note=coverage_note)
    counts = np.fromiter(chunk_counts.values(), dtype=np.int64, count=len(chunk_counts))
    distinct = list(chunk_counts)
    chunk_counts.clear()
    symbols, alphabet = _base_symbols(distinct, kind)
    del distinct
    first_id = base_id_count(kind, len(alphabet))
    _check_id_range(first_id + num_merges)
    loop = _merge_loop(symbols, counts, first_id=first_id, min_frequency=min_frequency,
                       forbidden_id=None if merge_newlines else _newline_id(kind, alphabet))
    del symbols, counts
    merges, stop_reason = loop(num_merges, progress=progress)
    return TrainResult(merges=merges, alphabet=alphabet, stop_reason=stop_reason, coverage_note=coverage_note)


def _merges_from_byte_layout(counter, *, num_merges: int, min_frequency: int, merge_newlines: bool,
                             progress: bool) -> TrainResult | None:
    """The byte kind's merges from a ``ChunkCounter``'s ``pop_byte_layout`` (which empties it), or None, the counts
    kept, where a chunk holds a lone surrogate."""
    _check_id_range(base_id_count("byte") + num_merges)
    layout = counter.pop_byte_layout()
    if layout is None:
        return None
    symbols, counts = np.frombuffer(layout[0], dtype=np.int32), np.frombuffer(layout[1], dtype=np.int64)
    del layout
    loop = _merge_loop(symbols, counts, first_id=base_id_count("byte"), min_frequency=min_frequency,
                       forbidden_id=None if merge_newlines else _newline_id("byte", []))
    del symbols, counts
    merges, stop_reason = loop(num_merges, progress=progress)
    return TrainResult(merges=merges, alphabet=[], stop_reason=stop_reason)


def _train_in_python(chunk_counts: dict[str, int], *, kind: str, num_merges: int, min_frequency: int,
                     merge_newlines: bool, coverage_note: str | None) -> TrainResult:
    """The fallback without the native core: ``reference.train_from_counts``, the same refusals."""
    if kind == "byte" and any(map(_SURROGATE.search, chunk_counts)):
        raise _surrogate_error(list(chunk_counts))
    alphabet_size = len(set().union(*map(set, chunk_counts))) if kind == "char" else 0
    _check_id_range(base_id_count(kind, alphabet_size) + num_merges)
    merges, alphabet, stop_reason = reference.train_from_counts(
        chunk_counts, kind=kind, num_merges=num_merges, min_frequency=min_frequency, merge_newlines=merge_newlines)
    chunk_counts.clear()
    return TrainResult(merges=merges, alphabet=alphabet, stop_reason=stop_reason, coverage_note=coverage_note)


def _merge_loop(symbols, counts, *, first_id: int, min_frequency: int, forbidden_id: int | None):
    """``run(num_merges, progress=...) -> (merges, stop_reason)``: the native merge loop over a layout of
    ``_train_pairs`` (int32 symbols, int64 counts). It copies what it needs, so the caller's arrays can go."""
    if len(symbols) >= NATIVE_MAX_SYMBOLS:
        raise TokenizerError(f"the distinct chunks hold {len(symbols):,} symbols, more than the "
                             f"{NATIVE_MAX_SYMBOLS:,} the merge loop indexes; train on less text")
    merger = backend.native.PairMerger(symbols, counts, first_id, min_frequency,
                                       -1 if forbidden_id is None else forbidden_id)
    return functools.partial(_merge_natively, merger, min_frequency=min_frequency)


def _merge_natively(merger, num_merges: int, *, min_frequency: int,
                    progress: bool) -> tuple[list[tuple[int, int]], str | None]:
    """The native merge loop (``_native.PairMerger``): in one call, or ``PROGRESS_MERGES`` at a time when a
    progress bar shows them."""
    merges: list[tuple[int, int]] = []
    step = PROGRESS_MERGES if progress else num_merges
    with Progress("tokenizer: merging", total=num_merges, unit="merges", enabled=progress) as bar:
        while len(merges) < num_merges:
            wanted = min(step, num_merges - len(merges))
            batch = merger.merge(wanted)
            merges += batch
            bar.update(len(batch))
            if len(batch) < wanted:
                return merges, _stop_reason(min_frequency, len(merges))
    return merges, None


def _stop_reason(min_frequency: int, merges: int) -> str:
    return f"no pair occurs at least {counted(min_frequency, 'time')} after {counted(merges, 'merge')}"


def _drop_rare_characters(chunk_counts: dict[str, int], coverage: float) -> tuple[dict[str, int], str | None]:
    """The chunks cut at every character outside the fewest most frequent ones that make up ``coverage``
    of the text (ties: the smaller code point first), and a note saying how many were left out.

    The caller's ``chunk_counts`` is emptied, as :func:`merges_from_counts` does."""
    frequency: Counter[str] = Counter()
    for chunk, count in chunk_counts.items():
        for char, times in Counter(chunk).items():
            frequency[char] += times * count
    total, covered, kept = frequency.total(), 0, set()
    for char, times in sorted(frequency.items(), key=lambda item: (-item[1], item[0])):
        if covered >= coverage * total:
            break
        kept.add(char)
        covered += times
    rare = sorted(set(frequency) - kept)
    if not rare:
        return chunk_counts, None
    cut = regex.compile("[" + "".join(regex.escape(char) for char in rare) + "]")
    pieces: Counter[str] = Counter()
    for chunk, count in chunk_counts.items():
        for piece in cut.split(chunk):
            if piece:
                pieces[piece] += count
    chunk_counts.clear()
    note = (f"{len(rare):,} of {len(frequency):,} characters ({(total - covered) / total:.3%} of the text) are "
            f"outside character_coverage {coverage:g} and encode as the unknown ID 0")
    return dict(pieces), note


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
        compile_checked(pattern)


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
    """The base symbols of all chunks in one array (the layout of ``_train_pairs``), and the alphabet."""
    if kind == "byte":
        try:
            return pairs.utf8_symbols(chunks), []
        except UnicodeEncodeError:
            raise _surrogate_error(chunks) from None
    alphabet = sorted(set().union(*map(set, chunks))) if chunks else []
    table = {ord(char): pairs.symbol_of(i + 1) for i, char in enumerate(alphabet)}
    return pairs.code_point_symbols([chunk.translate(table) for chunk in chunks]), alphabet


def _surrogate_error(chunks: list[str]) -> TokenizerError:
    """The byte kind's refusal of a lone surrogate, naming the smallest chunk holding one (chunks come in
    any order)."""
    chunk = min(chunk for chunk in chunks if _SURROGATE.search(chunk))
    return TokenizerError(f"training text contains {_SURROGATE.search(chunk).group()!r} in the chunk "
                          f"{shorten(repr(chunk))}, which is not encodable as UTF-8 (a lone surrogate): the byte "
                          "kind cannot train on it; clean the text first")
