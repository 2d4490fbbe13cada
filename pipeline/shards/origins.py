"""Where each shard row comes from: its source and its document ID, as the shard columns hold them.

A document ID, as prepare gives it (``data/raw/qa.txt#284``, ``raw/big.jsonl[0:67108864]#17``), is the
raw file (or the byte range or row groups of it that one task read), ``#``, and the document's number
there. A shard stores it in two columns so that the file names are not repeated on every row: ``file``,
dictionary-encoded (each distinct file once per shard, ``int32`` indices), and ``document``, the number
(``int64``). ``source`` (``int32``) is the document's index in ``data.sources``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from pipeline.data.documents import arrow_view, text_column

SOURCE, FILE, DOCUMENT = "source", "file", "document"
FIELDS = (pa.field(SOURCE, pa.int32(), nullable=False),
          pa.field(FILE, pa.dictionary(pa.int32(), pa.large_string()), nullable=False),
          pa.field(DOCUMENT, pa.int64(), nullable=False))

SourceCounts = tuple[tuple[int, int, int], ...]
"""Per source present, ``(source, rows, tokens)``, by source index."""


@dataclass(frozen=True)
class Origins:
    """The source, file and number of each document of a run of documents."""

    sources: np.ndarray  # int32
    files: Sequence[str]
    numbers: np.ndarray  # int64

    @classmethod
    def from_ids(cls, sources: np.ndarray, ids: Sequence[str]) -> Origins:
        """From prepare's document IDs, ``<file>#<number>``; ValueError naming an ID of another form."""
        files, numbers = [], np.empty(len(ids), dtype=np.int64)
        for row, document_id in enumerate(ids):
            file, hash_sign, number = document_id.rpartition("#")
            if not hash_sign or not number.isdigit():
                raise ValueError(f"document ID {document_id!r} is not <file>#<number>")
            files.append(file)
            numbers[row] = int(number)
        return cls(np.asarray(sources, dtype=np.int32), files, numbers)

    @classmethod
    def numbered(cls, count: int, *, source: int = 0, file: str = "documents") -> Origins:
        """``count`` documents of one source, numbered from 0 in ``file`` (tests, benchmarks, other producers)."""
        return cls(np.full(count, source, dtype=np.int32), [file] * count, np.arange(count, dtype=np.int64))

    def __len__(self) -> int:
        return len(self.sources)

    def __getitem__(self, rows: slice) -> Origins:
        return Origins(self.sources[rows], self.files[rows], self.numbers[rows])

    @staticmethod
    def join(parts: Sequence[Origins]) -> Origins:
        return Origins(np.concatenate([part.sources for part in parts]).astype(np.int32, copy=False),
                       [file for part in parts for file in part.files],
                       np.concatenate([part.numbers for part in parts]).astype(np.int64, copy=False))

    def columns(self) -> list[pa.Array]:
        """The ``source``, ``file`` (each distinct file once, in order of first appearance) and ``document`` columns."""
        distinct = dict.fromkeys(self.files)
        index = {file: i for i, file in enumerate(distinct)}
        indices = np.fromiter((index[file] for file in self.files), dtype=np.int32, count=len(self.files))
        dictionary = text_column(list(distinct))
        return [arrow_view(self.sources), pa.DictionaryArray.from_arrays(arrow_view(indices), dictionary),
                arrow_view(self.numbers)]


def source_counts(sources: np.ndarray, lengths: np.ndarray) -> SourceCounts:
    """``(source, rows, tokens)`` of each source among documents of these sources and token ``lengths``."""
    if not len(sources):
        return ()
    rows = np.bincount(sources)
    tokens = np.bincount(sources, weights=lengths, minlength=len(rows)).astype(np.int64)
    return tuple((int(source), int(rows[source]), int(tokens[source])) for source in np.flatnonzero(rows))


def document_id(file: str, number: int) -> str:
    return f"{file}#{number}"


_PIECE = re.compile(r"(.*?)((?: (?:bytes|row groups) \d+-(?:\d+|end))?)", re.DOTALL)
"""A document ID's piece: the file, then the byte range or row groups one task read, if not the whole file."""


def renamed_file(document_id: str, rename: Callable[[str], str]) -> str:
    """``document_id`` with its file as ``rename`` gives it, its byte range (or row groups) and number kept:
    IDs name files relative to the config's directory, which a user opens from elsewhere."""
    piece, _, number = document_id.rpartition("#")
    file, part = _PIECE.fullmatch(piece).groups()
    return f"{rename(file)}{part}#{number}"
