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

from pipeline.data.documents import arrow_view, numpy_view, text_column

SOURCE, FILE, DOCUMENT = "source", "file", "document"
FIELDS = (pa.field(SOURCE, pa.int32(), nullable=False),
          pa.field(FILE, pa.dictionary(pa.int32(), pa.large_string()), nullable=False),
          pa.field(DOCUMENT, pa.int64(), nullable=False))

SourceCounts = tuple[tuple[int, int, int], ...]
"""Per source present, ``(source, rows, tokens)``, by source index."""


@dataclass(frozen=True)
class Origins:
    """The source, file and number of each document of a run of documents.

    The files stay an Arrow string array, one per document, parsed, sliced, joined and dictionary-encoded by
    Arrow's kernels: a Python loop cost 0.6 µs a document, over half the encoder's time on documents of 100
    characters (0.13 µs here).
    """

    sources: np.ndarray  # int32
    files: pa.Array  # large_string, one per document
    numbers: np.ndarray  # int64

    @classmethod
    def from_ids(cls, sources: np.ndarray, ids: pa.LargeStringArray) -> Origins:
        """From prepare's document IDs, ``<file>#<number>``; ValueError naming an ID of another form."""
        import pyarrow.compute as pc  # here, not with the shard readers (0.05 s); the encode stage loads it first

        # no Python value goes into a kernel: pyarrow converts one through pandas, which it imports (0.2 s)
        pieces = pc.split_pattern(ids, "#", max_splits=1, reverse=True)  # [file, number], or [ID] without a '#'
        files = numbers = None
        if not ids.null_count and (numpy_view(pc.list_value_length(pieces)) == 2).all():
            files_and_numbers = pieces.flatten()
            every_other = np.arange(0, len(files_and_numbers), 2)
            files = files_and_numbers.take(arrow_view(every_other))
            numbers = _as_int64(files_and_numbers.take(arrow_view(every_other + 1)))
        if numbers is None:
            raise ValueError(f"document ID {_first_malformed(ids)!r} is not <file>#<number>")
        return cls(np.asarray(sources, dtype=np.int32), files, numbers)

    @classmethod
    def numbered(cls, count: int, *, source: int = 0, file: str = "documents") -> Origins:
        """``count`` documents of one source, numbered from 0 in ``file`` (tests, benchmarks, other producers)."""
        return cls(np.full(count, source, dtype=np.int32), text_column([file] * count),
                   np.arange(count, dtype=np.int64))

    def __len__(self) -> int:
        return len(self.sources)

    def __getitem__(self, rows: slice) -> Origins:
        return Origins(self.sources[rows], self.files[rows], self.numbers[rows])

    @staticmethod
    def join(parts: Sequence[Origins]) -> Origins:
        return Origins(np.concatenate([part.sources for part in parts]).astype(np.int32, copy=False),
                       pa.concat_arrays([part.files for part in parts]),
                       np.concatenate([part.numbers for part in parts]).astype(np.int64, copy=False))

    def columns(self) -> list[pa.Array]:
        """The ``source``, ``file`` (each distinct file once, in order of first appearance) and ``document`` columns."""
        files = self.files.dictionary_encode()
        return [arrow_view(self.sources),
                pa.DictionaryArray.from_arrays(files.indices, files.dictionary),
                arrow_view(self.numbers)]


_DOCUMENT_ID = re.compile(r"(?P<file>.*)#(?P<number>[0-9]{1,19})", re.DOTALL)
"""The file is everything before the last ``#``, which a number follows: 1 to 19 ASCII digits, within int64.
:meth:`Origins.from_ids` reads it with Arrow's kernels, and this pattern names the first ID that breaks it."""


def _as_int64(numbers: pa.LargeStringArray) -> np.ndarray | None:
    """The numbers as int64; None unless each is 1 to 19 ASCII digits within int64's range."""
    import pyarrow.compute as pc

    if not pc.all(pc.ascii_is_decimal(numbers)).as_py() or (pc.max(pc.binary_length(numbers)).as_py() or 0) > 19:
        return None
    try:
        return numpy_view(pc.cast(numbers, pa.int64()))
    except pa.ArrowInvalid:  # past int64
        return None


def _first_malformed(ids: pa.LargeStringArray) -> str | None:
    return next(document_id for document_id in ids.to_pylist()
                if document_id is None or not (match := _DOCUMENT_ID.fullmatch(document_id))
                or int(match["number"]) >= 1 << 63)


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
