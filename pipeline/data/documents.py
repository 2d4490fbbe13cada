"""Prepared documents on disk: Arrow IPC stream files whose first column is ``text``.

The prepare stage writes them and every later stage streams them back in
record batches, so no stage holds the corpus in memory and document
boundaries are kept exactly (a document may contain any character).

A kept part (:data:`KEPT_SCHEMA`) has, beside ``text``, ``source`` (the
document's index in ``data.sources``) and ``document`` (its ID, as in
``rejected/``: the raw file, or the byte range or row groups a task read of it,
then ``#`` and the document's number there), then the metadata columns the sources
and steps declare (``language`` and ``language_score`` from the ``language`` step;
:mod:`pipeline.data.record`). Readers that need only the text read the first column.

A prepared directory holds one part file per input partition and split,
``train/part-00000.arrow``, ``val/part-00000.arrow``, …, and ``parts.json``
listing every part in corpus order with its documents, UTF-8 bytes and sha256,
so a later stage plans its tasks (and fingerprints the data) without opening
the parts.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from pipeline.data.cleaning import SPLITS
from pipeline.engine import atomic, hashing, locations, storage
from pipeline.errors import DataError, FileTooLargeError

PARTS_FILE = "parts.json"
MAX_PARTS_BYTES = 64 << 20  # parts.json: some 200 bytes per part, one part per partition and split
SCHEMA = pa.schema([pa.field("text", pa.large_string(), nullable=False)])
ORIGIN_FIELDS = (pa.field("source", pa.int32(), nullable=False),
                 pa.field("document", pa.large_string(), nullable=False))
KEPT_SCHEMA = pa.schema([*SCHEMA, *ORIGIN_FIELDS])
BATCH_DOCUMENTS = 4096
PIECE_BYTES = 1 << 20  # a longer document is read back in pieces by the stages that can use them (tokenizer training)


class DocumentWriter:
    """Appends documents to an Arrow stream, flushing a record batch every ``batch_size``.

    A ``schema`` beside ``text`` (which comes first) takes one value per further column with each
    document; its columns are large strings or integers.
    """

    def __init__(self, path: str | os.PathLike[str], *, schema: pa.Schema = SCHEMA,
                 batch_size: int = BATCH_DOCUMENTS):
        self._sink = pa.OSFile(str(path), "wb")
        self._writer = pa.ipc.new_stream(self._sink, schema)
        self._schema = schema
        self._pending: list[tuple] = []
        self._batch_size = batch_size

    def write(self, text: str, *fields: str | int) -> None:
        self._pending.append((text, *fields))
        if len(self._pending) >= self._batch_size:
            self._flush()

    def close(self) -> None:
        self._flush()
        self._writer.close()
        self._sink.close()

    def __enter__(self) -> DocumentWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _flush(self) -> None:
        if self._pending:
            columns = [_column(field.type, list(values)) for field, values in zip(self._schema, zip(*self._pending))]
            self._writer.write_batch(pa.record_batch(columns, schema=self._schema))
            self._pending = []


def _column(kind: pa.DataType, values: list) -> pa.Array:
    """One column of a record batch, built from buffers (see :func:`text_column`)."""
    if kind == pa.large_string():
        return text_column(values)
    if kind == pa.bool_():
        return pa.array(values, type=kind)  # bit-packed: not a numpy buffer
    data = np.array(values, dtype=kind.to_pandas_dtype())
    return pa.Array.from_buffers(kind, len(values), [None, pa.py_buffer(data)])


def arrow_view(array: np.ndarray) -> pa.Array:
    """A numpy array as an Arrow array over the same memory (a copy only if it is not contiguous): ``pa.array``
    would give the same array but imports pandas, where it is installed, on its first call (docs/performance.md)."""
    array = np.ascontiguousarray(array)
    return pa.Array.from_buffers(pa.from_numpy_dtype(array.dtype), len(array), [None, pa.py_buffer(array)])


def numpy_view(column: pa.Array) -> np.ndarray:
    """A fixed-width Arrow array without nulls as a read-only numpy view of its memory: ``Array.to_numpy`` gives the
    same view but imports pandas, where it is installed (0.3 s of CPU in a command that reads shards)."""
    dtype = np.dtype(column.type.to_pandas_dtype())
    data = column.buffers()[1]
    if data is None:  # an empty array may have no buffer
        return np.empty(0, dtype=dtype)
    return np.frombuffer(data, dtype=dtype)[column.offset : column.offset + len(column)]


def text_column(texts: list[str]) -> pa.LargeStringArray:
    """``texts`` as an Arrow column, built from its UTF-8 bytes and offsets.

    ``pa.array`` would give the same column but imports pandas, where it is
    installed, on its first call, at a cost in CPU and memory in every worker
    process (docs/performance.md).
    """
    encoded = [text.encode("utf-8") for text in texts]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)), out=offsets[1:])
    return pa.LargeStringArray.from_buffers(len(encoded), pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded)))


def write_documents(path: str | os.PathLike[str], texts: Iterable[str], *, source: int = 0,
                    name: str | None = None) -> None:
    """``texts`` as a kept part of ``source``, each document's ID ``<name>#<n>`` (``name`` defaults to the path)."""
    name = os.fspath(path) if name is None else name
    with DocumentWriter(path, schema=KEPT_SCHEMA) as writer:
        for number, text in enumerate(texts):
            writer.write(text, source, f"{name}#{number}")


def document_origins(path: str | os.PathLike[str], batch: pa.RecordBatch) -> tuple[np.ndarray, pa.LargeStringArray]:
    """The ``source`` and ``document`` columns of a kept part's record batch; DataError naming the file without them."""
    names = batch.schema.names
    for wanted in ORIGIN_FIELDS:
        if wanted.name not in names or batch.schema.field(wanted.name).type != wanted.type:
            raise DataError(f"{path}: no {wanted.name!r} column of {wanted.type}, so its documents cannot be traced "
                            "to their source; re-run 'lmprep run prepare'")
    column = batch.column("source")
    if column.null_count:
        raise DataError(f"{path}: its 'source' column has nulls; re-run 'lmprep run prepare'")
    return numpy_view(column), batch.column("document")


def iter_document_batches(path: str | os.PathLike[str]) -> Iterator[list[str]]:
    """Yield the documents of a prepared file, one record batch at a time."""
    for batch in record_batches(path):
        yield batch.column(0).to_pylist()


def record_batches(path: str | os.PathLike[str], *, mapped: bool = True,
                   content: bytes | None = None) -> Iterator[pa.RecordBatch]:
    """The record batches of a prepared file, memory-mapped or (``mapped=False``) read: mapped pages stay in the
    resident set until the file is closed, so a reader of a whole large file would have its peak RSS grow with it;
    or parsed from ``content``, the file's bytes a caller read already (the batches are views of them).
    DataError naming a file that is not a prepared one."""
    try:
        if content is not None:
            source = pa.BufferReader(content)
        else:
            source = pa.memory_map(str(path)) if mapped else pa.OSFile(str(path))
        reader = pa.ipc.open_stream(source)
    except (OSError, pa.ArrowInvalid) as exc:
        raise DataError(f"{path}: not a prepared document file ({exc}); re-run 'lmprep run prepare'") from exc
    if reader.schema.field("text").type != pa.large_string():
        raise DataError(f"{path}: expected a 'text' column of large_string")
    yield from reader


def iter_documents(path: str | os.PathLike[str]) -> Iterator[str]:
    for batch in iter_document_batches(path):
        yield from batch


def iter_document_pieces(path: str | os.PathLike[str], *, piece_bytes: int = PIECE_BYTES) -> Iterator[tuple[str, bool]]:
    """Every document of a prepared file as ``(text, ends_document)`` pieces, as ``sources.read_document_pieces``
    reads raw files: a document longer than ``piece_bytes`` (at least 4, the longest character) comes in pieces of
    at most that many UTF-8 bytes, cut between characters and decoded from the mapped file one at a time, so that
    it is never one Python string (a 200 MB line would be 200 MB, and a list of its chunks gigabytes)."""
    for batch in record_batches(path):
        column = batch.column(0)
        offsets = text_offsets(column)
        if len(column) == 0 or int(np.diff(offsets).max()) <= piece_bytes:
            yield from ((text, True) for text in column.to_pylist())
            continue
        data = np.frombuffer(column.buffers()[2], dtype=np.uint8)
        for start, end in zip(offsets[:-1].tolist(), offsets[1:].tolist()):
            yield from _pieces_of(data, start, end, piece_bytes)


def _pieces_of(data: np.ndarray, start: int, end: int, piece_bytes: int) -> Iterator[tuple[str, bool]]:
    """The text of ``data[start:end]`` (UTF-8) in pieces of at most ``piece_bytes``, cut before a byte that starts a
    character (one that is not ``0b10xxxxxx``), the last one marked as ending the document."""
    while end - start > piece_bytes:
        cut = start + piece_bytes
        while data[cut] & 0xC0 == 0x80:
            cut -= 1
        yield data[start:cut].tobytes().decode("utf-8"), False
        start = cut
    yield data[start:end].tobytes().decode("utf-8"), True


def iter_records(path: str | os.PathLike[str]) -> Iterator[tuple]:
    """Every row of a document file written with a wider ``schema``, as a tuple in column order."""
    for batch in pa.ipc.open_stream(pa.memory_map(str(path))):
        yield from zip(*(column.to_pylist() for column in batch.columns))


def count_bytes(path: str | os.PathLike[str]) -> int:
    """UTF-8 bytes of text in a prepared file, read from the Arrow buffers without decoding."""
    total = 0
    for batch in pa.ipc.open_stream(pa.memory_map(str(path))):
        offsets = text_offsets(batch.column(0))
        total += int(offsets[-1] - offsets[0])
    return total


def text_offsets(column: pa.LargeStringArray) -> np.ndarray:
    """The ``len(column) + 1`` byte offsets of a text column into its data buffer, as a zero-copy view."""
    offsets = np.frombuffer(column.buffers()[1], dtype=np.int64)
    return offsets[column.offset : column.offset + len(column) + 1]


def part_name(split: str, index: int) -> str:
    """A part file's path relative to the prepared directory."""
    return f"{split}/part-{index:05d}.arrow"


def part_path(directory: str | os.PathLike[str], split: str, index: int) -> Path:
    return Path(directory) / part_name(split, index)


@dataclass(frozen=True)
class PreparedPart:
    """One part file as ``parts.json`` lists it (``file`` relative to the prepared directory)."""

    index: int
    file: str
    documents: int
    bytes: int
    sha256: str


def write_parts(directory: str | os.PathLike[str], parts: dict[str, list[PreparedPart]]) -> None:
    listing = {split: [asdict(p) for p in parts[split]] for split in SPLITS}
    storage.write_bytes(locations.join(directory, PARTS_FILE), (atomic.dumps_json(listing) + "\n").encode("utf-8"))


def read_parts(directory: str | os.PathLike[str], split: str) -> list[PreparedPart]:
    """The parts of ``split`` in corpus order (``directory`` as :func:`pipeline.engine.storage.committed` gives it)."""
    path = locations.join(directory, PARTS_FILE)
    try:
        return [PreparedPart(**entry) for entry in json.loads(storage.read_bounded(path, MAX_PARTS_BYTES,
                                                                                   what="list of parts"))[split]]
    except FileNotFoundError:
        raise DataError(f"{path}: missing, so {directory} is not a prepared directory; "
                        "run 'lmprep run prepare'") from None
    except FileTooLargeError as exc:
        raise DataError(f"{exc}; re-run 'lmprep run prepare'") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise DataError(f"{path}: malformed list of prepared parts ({exc!r}); re-run 'lmprep run prepare'") from None


def write_prepared(directory: str | os.PathLike[str], splits: dict[str, list[Iterable[str]]]) -> None:
    """A prepared directory from texts given per split and part (benchmarks, tests, other producers): every
    document of source 0, its ID the part and its number there (``train/part-00000.arrow#7``)."""
    listing = {}
    for split in SPLITS:
        listing[split] = []
        for index, texts in enumerate(splits.get(split, [])):
            path = part_path(directory, split, index)
            path.parent.mkdir(parents=True, exist_ok=True)
            write_documents(path, texts, name=part_name(split, index))
            listing[split].append(PreparedPart(index=index, file=path.relative_to(directory).as_posix(),
                                               documents=sum(1 for _ in iter_documents(path)),
                                               bytes=count_bytes(path), sha256=hashing.sha256_file(path)))
    write_parts(directory, listing)


def split_fingerprint(parts: Iterable[PreparedPart]) -> str:
    """The content hash of a split: its parts' checksums in order."""
    return hashing.canonical_hash([[part.file, part.sha256] for part in parts])


def iter_split_documents(directory: str | os.PathLike[str], split: str) -> Iterator[str]:
    """Every document of a prepared split, in corpus order."""
    directory = storage.committed(directory)
    for part in read_parts(directory, split):
        with storage.local_copy(locations.join(directory, part.file)) as path:
            yield from iter_documents(path)


def iter_split_document_pieces(directory: str | os.PathLike[str], split: str) -> Iterator[tuple[str, bool]]:
    """:func:`iter_document_pieces` of every part of a prepared split, in corpus order."""
    directory = storage.committed(directory)
    for part in read_parts(directory, split):
        with storage.local_copy(locations.join(directory, part.file)) as path:
            yield from iter_document_pieces(path)


def document_metadata(directory: str | os.PathLike[str], split: str, document: str) -> dict[str, Any] | None:
    """The metadata columns (those after ``text``, ``source`` and ``document``) of the kept document whose ID is
    ``document``, or None when no part of the split holds it; reads the ``document`` column of each part in turn."""
    directory = storage.committed(directory)
    for part in read_parts(directory, split):
        with storage.local_copy(locations.join(directory, part.file)) as path:
            for batch in record_batches(path):
                if "document" not in batch.schema.names:
                    return None
                found = batch.column("document").to_pylist()
                if document in found:
                    row = found.index(document)
                    fixed = {field.name for field in KEPT_SCHEMA}
                    return {name: batch.column(name)[row].as_py() for name in batch.schema.names if name not in fixed}
    return None
