"""Decontamination: n-gram overlap between documents and the evaluation sets a model will be tested on.

As in GPT-3's paper (Brown et al. 2020, appendix C), text is lower-cased and split into words (runs of
letters and digits, punctuation dropped), and a document overlaps an evaluation set when one of its
``n``-word sequences (13 by default) is also one of the set's. Each evaluation set is named; a document is
either dropped (``mode="drop"``) or has the words of each overlapping n-gram cut out (``"remove_span"``).

Memory is bounded by the evaluation sets, never by the corpus: each set's n-grams are kept as a sorted
array of 64-bit hashes (8 bytes an n-gram) and a document's n-grams are hashed and looked up in it, none
kept. The hash of an n-gram combines its words' xxh64 hashes (a polynomial over 2**64, then a final mix),
so a document n-gram that is in no set is taken for one of a set's ``m`` n-grams with probability about
``m / 2**64``: a document of ``k`` n-grams is a false positive with probability about ``k * m / 2**64``,
below 1e-9 for a million-word document against a hundred million evaluation n-grams (there is no exact
check after a hash hit: that would need the n-grams' text). benchmarks/bench_web.py counts the false
positives on documents that have no overlap.
"""

from __future__ import annotations

import gzip
import json
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.errors import DataError, counted, describe, json_error_reason, shorten

if TYPE_CHECKING:
    import numpy as np

WORD = re.compile(r"[^\W_]+")
"""A word: a run of letters and digits (GPT-3's normalisation: lower case, punctuation removed)."""
DEFAULT_N = 13
MODES = ("drop", "remove_span")
_MULTIPLIER = 0x100000001B3  # FNV's 64-bit prime: an odd multiplier, so no word is lost mod 2**64
_MIX = (0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53)  # MurmurHash3's 64-bit finaliser
_EXAMPLES_KEPT = 20  # the document IDs a report names per evaluation set; the rest are counted


@dataclass(frozen=True)
class EvalSet:
    """An evaluation set: its name in reports, its file, and for .jsonl/.parquet the fields holding text
    (empty: every string field, joined in order, so a question and its answer are one item)."""

    name: str
    path: Path | str
    fields: tuple[str, ...] = ()


def ngram_hashes(words: Sequence[str], n: int) -> np.ndarray:
    """The hash of each ``n``-word window of ``words``, in order (empty when there are fewer than ``n``)."""
    import numpy as np
    import xxhash

    if len(words) < n:
        return np.empty(0, dtype=np.uint64)
    word_hashes = np.fromiter((xxhash.xxh64_intdigest(word.encode("utf-8", "surrogatepass")) for word in words),
                              dtype=np.uint64, count=len(words))
    windows = len(words) - n + 1
    combined = np.zeros(windows, dtype=np.uint64)
    multiplier, (mix_1, mix_2) = np.uint64(_MULTIPLIER), map(np.uint64, _MIX)
    with np.errstate(over="ignore"):
        for offset in range(n):
            combined = combined * multiplier + word_hashes[offset : offset + windows]
        combined ^= combined >> np.uint64(33)
        combined *= mix_1
        combined ^= combined >> np.uint64(33)
        combined *= mix_2
        combined ^= combined >> np.uint64(33)
    return combined


def words_of(text: str) -> list[re.Match[str]]:
    """The words of ``text``, matched in the text as it is (lower-casing can change its length)."""
    return list(WORD.finditer(text))


def _hashes_of(text: str, n: int) -> np.ndarray:
    """The hashes of the n-grams of ``text``'s words, each word lower-cased."""
    return ngram_hashes([word.lower() for word in WORD.findall(text)], n)


@dataclass
class SetReport:
    """One evaluation set's overlaps: documents hit, n-grams matched, and the first documents' IDs."""

    items: int = 0
    ngrams: int = 0
    too_short: int = 0  # items with fewer than n words: they can never be matched
    documents: int = 0
    matched: int = 0
    examples: list[str] = field(default_factory=list)

    def add(self, document_id: str, matched: int) -> None:
        self.documents += 1
        self.matched += matched
        if len(self.examples) < _EXAMPLES_KEPT:
            self.examples.append(document_id)


@dataclass(frozen=True)
class Verdict:
    """What decontamination did to one document: n-grams matched per set (sets without a match absent),
    and the text left (the same text when nothing matched; None when the document is dropped)."""

    matches: dict[str, int]
    text: str | None


class Decontaminator:
    """The evaluation sets' n-gram hashes, and the reports of the documents checked against them."""

    def __init__(self, sets: Sequence[EvalSet], *, n: int = DEFAULT_N, mode: str = "drop"):
        if mode not in MODES:
            raise DataError(f"decontamination mode {describe(mode)} is not one of {', '.join(MODES)}")
        if n < 1:
            raise DataError(f"decontamination n must be at least 1, not {n}")
        self.n, self.mode = n, mode
        self.hashes: dict[str, np.ndarray] = {}
        self.reports: dict[str, SetReport] = {}
        for eval_set in sets:
            self.hashes[eval_set.name], self.reports[eval_set.name] = self._load(eval_set)

    def _load(self, eval_set: EvalSet) -> tuple[np.ndarray, SetReport]:
        import numpy as np

        report, chunks = SetReport(), []
        for item in read_items(eval_set):
            report.items += 1
            hashes = _hashes_of(item, self.n)
            report.too_short += not len(hashes)
            chunks.append(hashes)
        unique = np.unique(np.concatenate(chunks)) if chunks else np.empty(0, dtype=np.uint64)
        if not len(unique):
            raise DataError(f"{eval_set.path}: evaluation set {eval_set.name!r} has no item of {self.n} words or "
                            f"more ({counted(report.items, 'item')}), so nothing could match it")
        report.ngrams = len(unique)
        return unique, report

    def check(self, document_id: str, text: str) -> Verdict:
        """Look ``text``'s n-grams up in every set; count the document in the sets it overlaps."""
        import numpy as np

        hashes = _hashes_of(text, self.n)
        matches, hit = {}, np.zeros(len(hashes), dtype=bool)
        for name, table in self.hashes.items():
            found = _members(hashes, table)
            if found.any():
                matches[name] = int(found.sum())
                self.reports[name].add(document_id, matches[name])
                hit |= found
        if not matches:
            return Verdict({}, text)
        if self.mode == "drop":
            return Verdict(matches, None)
        return Verdict(matches, _cut(text, words_of(text), hit, self.n))


def _members(hashes: np.ndarray, table: np.ndarray) -> np.ndarray:
    import numpy as np

    places = np.searchsorted(table, hashes)
    places[places == len(table)] = 0
    return table[places] == hashes


def _cut(text: str, words: list[re.Match[str]], hit: np.ndarray, n: int) -> str:
    """``text`` without the words of each matched n-gram (from the first word's start to the last's end)."""
    import numpy as np

    depth = np.zeros(len(words) + 1, dtype=np.int32)
    np.add.at(depth, np.flatnonzero(hit), 1)
    np.add.at(depth, np.flatnonzero(hit) + n, -1)
    inside = (np.cumsum(depth[:-1]) > 0).astype(np.int8)
    edges = np.diff(np.concatenate(([0], inside, [0])))
    pieces, last = [], 0
    for first, final in zip(np.flatnonzero(edges == 1), np.flatnonzero(edges == -1) - 1):
        pieces.append(text[last:words[first].start()])
        last = words[final].end()
    return re.sub(r"[ \t]{2,}", " ", "".join(pieces) + text[last:]).strip()


def read_items(eval_set: EvalSet) -> Iterator[str]:
    """The items of an evaluation set file: lines of a .txt, records of a .jsonl or rows of a .parquet
    (either possibly gzip-compressed except Parquet); a missing file is an error naming it."""
    path = str(eval_set.path)
    if not os.path.isfile(path):
        raise DataError(f"{path}: evaluation set {eval_set.name!r} does not exist")
    kind = path.removesuffix(".gz").rsplit(".", 1)[-1]
    if kind == "txt":
        return (line for line in _lines(path) if line.strip())
    if kind in ("jsonl", "ndjson"):
        return _jsonl_items(eval_set)
    if kind == "parquet":
        return _parquet_items(eval_set)
    raise DataError(f"{path}: evaluation set {eval_set.name!r} is not .txt, .jsonl or .parquet")


def _lines(path: str) -> Iterator[str]:
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as lines:
            yield from lines
    except (UnicodeDecodeError, OSError, EOFError) as exc:
        raise DataError(f"{path}: cannot be read as UTF-8 text ({exc})") from None


def _jsonl_items(eval_set: EvalSet) -> Iterator[str]:
    for number, line in enumerate(_lines(str(eval_set.path)), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (ValueError, RecursionError) as exc:
            raise DataError(f"{eval_set.path}: line {number} is not JSON ({json_error_reason(exc)})") from None
        if not isinstance(record, dict):
            raise DataError(f"{eval_set.path}: line {number} is not a JSON object")
        yield _item_text(record, eval_set, f"line {number}")


def _parquet_items(eval_set: EvalSet) -> Iterator[str]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        rows = pq.ParquetFile(eval_set.path).iter_batches(columns=list(eval_set.fields) or None)
        for number, row in enumerate(row for batch in rows for row in batch.to_pylist()):
            yield _item_text(row, eval_set, f"row {number}")
    except (OSError, pa.ArrowException) as exc:
        raise DataError(f"{eval_set.path}: not a readable Parquet file ({shorten(str(exc))})") from None


def _item_text(record: dict, eval_set: EvalSet, where: str) -> str:
    if not eval_set.fields:
        return " ".join(value for value in record.values() if isinstance(value, str))
    missing = [name for name in eval_set.fields if name not in record]
    if missing:
        raise DataError(f"{eval_set.path}: {where} has no field {missing[0]!r} (fields: {', '.join(record)})")
    return " ".join(str(record[name]) for name in eval_set.fields if record[name] is not None)


def load_eval_sets(entries: Iterable[tuple[str, str | os.PathLike[str]]]) -> list[EvalSet]:
    """Evaluation sets from (name, path) pairs; names must be unique (they key the report)."""
    sets = [EvalSet(name, Path(path)) for name, path in entries]
    names = [eval_set.name for eval_set in sets]
    duplicated = sorted({name for name in names if names.count(name) > 1})
    if duplicated:
        raise DataError(f"evaluation set name {duplicated[0]!r} is given twice; give each set its own name")
    return sets
