"""The readers of raw files that lmprep ships: ``txt``, ``jsonl`` and ``parquet`` (each optionally gzipped), and
a user's reader (``data.sources[i].reader``). Each is an entry of :data:`pipeline.data.registry.READERS`.

A ``.jsonl`` file and a ``.txt`` file split by ``line`` are cut into byte ranges, a Parquet file into runs of
row groups, so one large file is read by several tasks; a byte range holds the lines that *start* inside it.
Other files are one piece each. Fields of a JSON line or columns of a Parquet file that a source names in
``metadata:`` come with each document, checked against their declared type.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

from pipeline.data.reading import (
    CHUNK,
    Piece,
    Record,
    SourceFile,
    TextDecoder,
    gzipped,
    line_number,
    line_parts,
    lines,
    open_binary,
    whole_file,
)
from pipeline.data.record import MetadataField
from pipeline.errors import DataError, json_error_reason, shorten

NAMED_SEPARATORS = ("document", "blank_line", "line")  # any other .txt separator is a literal string
TEXT_LIKE = (".txt", ".text", ".md", ".markdown", ".rst", ".adoc", ".org", ".tex", ".html", ".htm", ".xml",
             ".py", ".pyi", ".c", ".h", ".cc", ".cpp", ".hpp", ".java", ".js", ".ts", ".go", ".rs", ".rb", ".sh",
             ".css", ".sql", ".yaml", ".yml", ".toml", ".ini", ".cfg", ".log")
"""Extensions read as plain text (``txt``): prose, markup and source code."""
_PARQUET_BATCH = 1024


def byte_ranges(file: SourceFile, partition_bytes: int) -> list[Piece]:
    """Consecutive byte ranges of about ``partition_bytes`` covering a file of lines (whole when gzipped)."""
    if gzipped(file.path):
        return whole_file(file)
    size = file.size()
    starts = range(0, max(size, 1), partition_bytes)
    return [Piece(file, start, None if start == starts[-1] else start + partition_bytes,
                  min(partition_bytes, size - start)) for start in starts]


def _range_lines(piece: Piece, stream: BinaryIO) -> Iterator[tuple[int, bytes]]:
    _seek_start(piece, stream)
    return lines(stream, piece.start, piece.end)


def _seek_start(piece: Piece, stream: BinaryIO) -> None:
    if piece.start or piece.end is not None:
        stream.seek(piece.start)


# -- txt ------------------------------------------------------------------


class TxtReader:
    name = "txt"
    extensions = TEXT_LIKE
    fields: tuple[MetadataField, ...] = ()

    def pieces(self, file: SourceFile, partition_bytes: int) -> list[Piece]:
        return byte_ranges(file, partition_bytes) if file.separator == "line" else whole_file(file)

    def read(self, piece: Piece, stream: BinaryIO, decoder: TextDecoder) -> Iterator[Record]:
        for text in _read_txt(piece, stream, decoder):
            yield text, None


def _read_txt(piece: Piece, stream: BinaryIO, decoder: TextDecoder) -> Iterator[str]:
    """The documents of a piece of a text file; with ``prepare.max_chars``, a file read as one document and each
    line of a file of lines come in parts, so that one longer than that is never held whole."""
    file = piece.file
    if decoder.max_chars is not None and file.separator in ("document", "line"):
        texts = (decoder.decode_document(parts, path=file.path) for parts in _document_parts(piece, stream))
    else:
        texts = (decoder.decode(data, path=file.path, offset=offset)
                 for offset, data in _documents(piece, stream, decoder))
    for text in texts:
        if text is not None:
            yield text


def _documents(piece: Piece, stream: BinaryIO, decoder: TextDecoder) -> Iterator[tuple[int, bytes]]:
    """Each document's bytes with their offset, by the file's separator."""
    file = piece.file
    if file.separator == "line":
        return ((offset, line.rstrip(b"\r\n") if line.endswith(b"\n") else line)
                for offset, line in _range_lines(piece, stream))
    if file.separator == "blank_line":
        return _split_blank_lines(stream)
    if file.separator == "document":
        return iter([(0, stream.read())])
    return _split_literal(stream, file.separator.encode("utf-8"),
                          if_absent=lambda: decoder.unsplit.append((file.separator, str(file.path))))


def _document_parts(piece: Piece, stream: BinaryIO) -> Iterator[Iterator[tuple[int, bytes]]]:
    """Each document (the file, or each line) as its parts of at most :data:`CHUNK` bytes with their offsets."""
    if piece.file.separator == "document":
        yield _chunks(stream)
        return
    _seek_start(piece, stream)
    for _, parts in line_parts(stream, piece.start, piece.end):
        yield _without_line_end(parts)


def _chunks(stream: BinaryIO) -> Iterator[tuple[int, bytes]]:
    offset = 0
    while data := stream.read(CHUNK):
        yield offset, data
        offset += len(data)


def _without_line_end(parts: Iterator[tuple[int, bytes]]) -> Iterator[tuple[int, bytes]]:
    """A line's parts without the CRs and the LF that end it, as ``line.rstrip(b"\r\n")`` when it ends in LF.
    Only CRs can come before a line's LF, so a run of them is counted rather than held."""
    crs_at, crs, ended = 0, 0, False
    for offset, part in parts:
        body = part.rstrip(b"\r\n")
        ended = part.endswith(b"\n")
        if body:
            yield from _carriage_returns(crs_at, crs)
            yield offset, body
            crs_at, crs = offset + len(body), 0
        elif not crs:
            crs_at = offset
        crs += len(part) - len(body) - ended
    if not ended:
        yield from _carriage_returns(crs_at, crs)


def _carriage_returns(offset: int, count: int) -> Iterator[tuple[int, bytes]]:
    for start in range(0, count, CHUNK):
        yield offset + start, b"\r" * min(CHUNK, count - start)


def unsplit_warning(separator: str, files: list[str], shown: int = 3) -> str:
    """``warning: the separator 'blankline' never occurs in raw/a.txt: ...; did you mean 'blank_line'?``"""
    names = ", ".join(sorted(files)[:shown]) + (f" and {len(files) - shown} more files" if len(files) > shown else "")
    close = difflib.get_close_matches(separator, NAMED_SEPARATORS, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    each = "each is" if len(files) > 1 else "it is"
    return f"warning: the separator {separator!r} never occurs in {names}: {each} one document{hint}"


def _split_blank_lines(stream: BinaryIO) -> Iterator[tuple[int, bytes]]:
    """Runs of non-blank lines; a line of only spaces/tabs counts as blank. The last newline is dropped."""
    start, offset, lines = 0, 0, []
    for line in stream:
        if line.strip(b" \t\r\n"):
            if not lines:
                start = offset
            lines.append(line)
        elif lines:
            yield start, b"".join(lines).rstrip(b"\r\n")
            lines = []
        offset += len(line)
    if lines:
        yield start, b"".join(lines).rstrip(b"\r\n")


def _split_literal(stream: BinaryIO, separator: bytes, if_absent: Callable[[], None]) -> Iterator[tuple[int, bytes]]:
    """Split on an exact byte string, reading fixed-size chunks (safe: UTF-8 is self-synchronising).

    Each chunk is scanned once: the search resumes where the previous one
    could still have matched. An empty piece after the last separator is
    not a document. A text the separator never occurs in (a misspelt
    ``blankline`` is such a literal) calls ``if_absent`` once read.
    """
    buffer, start, scan = bytearray(), 0, 0
    while chunk := stream.read(CHUNK):
        buffer += chunk
        pos = 0
        while (at := buffer.find(separator, max(pos, scan))) != -1:
            yield start, bytes(buffer[pos:at])
            start += at + len(separator) - pos
            pos = at + len(separator)
        del buffer[:pos]
        scan = max(0, len(buffer) - len(separator) + 1)
    if buffer:
        if not start:
            if_absent()
        yield start, bytes(buffer)


# -- jsonl ----------------------------------------------------------------


class JsonlReader:
    name = "jsonl"
    extensions = (".jsonl", ".ndjson")
    fields: tuple[MetadataField, ...] = ()

    def pieces(self, file: SourceFile, partition_bytes: int) -> list[Piece]:
        return byte_ranges(file, partition_bytes)

    def read(self, piece: Piece, stream: BinaryIO, decoder: TextDecoder) -> Iterator[Record]:
        file = piece.file
        for offset, line in _range_lines(piece, stream):
            text = decoder.decode(line, path=file.path, offset=offset) if line.strip() else None
            if text is not None:
                yield _json_record(text, file, offset)


def _json_record(line: str, file: SourceFile, offset: int) -> Record:
    try:
        record = json.loads(line)
    except (ValueError, RecursionError) as exc:
        raise DataError(f"{file.path}:{line_number(file.path, offset)}: bad JSON line ({json_error_reason(exc)}); "
                        "each line must be one JSON object") from None
    if not isinstance(record, dict):
        raise DataError(f"{file.path}:{line_number(file.path, offset)}: expected a JSON object, "
                        f"got {type(record).__name__}")
    if file.field not in record:
        raise DataError(f"{file.path}:{line_number(file.path, offset)}: no field {file.field!r} "
                        f"(fields: {', '.join(sorted(record))}); {file.field_advice}")
    value = record[file.field]
    if not isinstance(value, str):
        raise DataError(f"{file.path}:{line_number(file.path, offset)}: field {file.field!r} must be a string, "
                        f"got {type(value).__name__}")
    if not file.metadata:
        return value, None
    return value, picked_metadata(record, file, lambda: f"{file.path}:{line_number(file.path, offset)}")


def picked_metadata(record: dict[str, Any], file: SourceFile, where: Callable[[], str]) -> dict[str, Any]:
    """The source's metadata fields of ``record``, each checked against its type; ``where`` names the record."""
    picked = {}
    for wanted in file.metadata:
        if wanted.name not in record:
            raise DataError(f"{where()}: no field {wanted.name!r} for data.sources[{file.source}].metadata "
                            f"(fields: {', '.join(sorted(record))})")
        problem = wanted.check(record[wanted.name])
        if problem is not None:
            raise DataError(f"{where()}: {problem} (data.sources[{file.source}].metadata)")
        picked[wanted.name] = record[wanted.name]
    return picked


# -- parquet --------------------------------------------------------------


class ParquetReader:
    name = "parquet"
    extensions = (".parquet",)
    fields: tuple[MetadataField, ...] = ()

    def pieces(self, file: SourceFile, partition_bytes: int) -> list[Piece]:
        if gzipped(file.path):
            return whole_file(file)
        return [Piece(file, start, end, part) for start, end, part in _row_group_ranges(file, partition_bytes)]

    def read(self, piece: Piece, stream: BinaryIO, decoder: TextDecoder) -> Iterator[Record]:
        import pyarrow as pa

        file = piece.file
        parquet = _parquet_file(file, stream)
        groups = range(piece.start, parquet.metadata.num_row_groups if piece.end is None else piece.end)
        columns = [file.field, *(wanted.name for wanted in file.metadata)]
        batches = parquet.iter_batches(batch_size=_PARQUET_BATCH, columns=columns, row_groups=groups)
        while (rows := _next_rows(batches, file, pa)) is not None:
            yield from rows


def _parquet_file(file: SourceFile, stream: BinaryIO) -> Any:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(stream)
    except (pa.ArrowException, OSError) as exc:
        raise DataError(f"{file.path}: not a readable parquet file ({exc})") from None
    _check_column(parquet.schema_arrow, file, pa)
    return parquet


def _row_group_ranges(file: SourceFile, partition_bytes: int) -> list[tuple[int, int | None, int]]:
    """Runs of consecutive row groups of about ``partition_bytes`` bytes each, with their bytes."""
    with open_binary(file.path) as stream:
        groups = _parquet_file(file, stream).metadata
    ranges, start, size = [], 0, 0
    for index in range(groups.num_row_groups):
        size += groups.row_group(index).total_byte_size
        if size >= partition_bytes:
            ranges.append((start, index + 1, size))
            start, size = index + 1, 0
    if start < groups.num_row_groups or not ranges:
        ranges.append((start, None, size))
    else:
        ranges[-1] = (ranges[-1][0], None, ranges[-1][2])
    return ranges


def _next_rows(batches: Iterator[Any], file: SourceFile, pa: Any) -> list[Record] | None:
    """The next batch's documents, None after the last; a corrupt page or invalid UTF-8 is a DataError."""
    try:
        batch = next(batches, None)
        if batch is None:
            return None
        texts = [text or "" for text in batch.column(0).to_pylist()]
        if not file.metadata:
            return [(text, None) for text in texts]
        values = [batch.column(i + 1).to_pylist() for i in range(len(file.metadata))]
    except (pa.ArrowException, OSError) as exc:
        raise DataError(f"{file.path}: corrupt parquet data ({shorten(str(exc))})") from None
    except UnicodeDecodeError:
        raise DataError(f"{file.path}: column {file.field!r} holds invalid UTF-8; fix the file") from None
    names = [wanted.name for wanted in file.metadata]
    return [(text, picked_metadata(dict(zip(names, row)), file, lambda: f"{file.path}"))
            for text, *row in zip(texts, *values)]


def _check_column(schema: Any, file: SourceFile, pa: Any) -> None:
    if file.field not in schema.names:
        raise DataError(f"{file.path}: no column {file.field!r} (columns: {', '.join(schema.names)}); "
                        f"{file.field_advice}")
    column_type = schema.field(file.field).type
    if not (pa.types.is_string(column_type) or pa.types.is_large_string(column_type)):
        raise DataError(f"{file.path}: column {file.field!r} must hold strings, got {column_type}")
    for wanted in file.metadata:
        if wanted.name not in schema.names:
            raise DataError(f"{file.path}: no column {wanted.name!r} for data.sources[{file.source}].metadata "
                            f"(columns: {', '.join(schema.names)})")


# -- a user's reader ------------------------------------------------------


class UserReader:
    """``data.sources[i].reader``: a function of the user's called as ``function(stream, path)`` on each whole
    file (its decompressed bytes), yielding each document as a ``str`` or as ``(text, metadata)``."""

    name = "custom"
    extensions: tuple[str, ...] = ()
    fields: tuple[MetadataField, ...] = ()

    def pieces(self, file: SourceFile, partition_bytes: int) -> list[Piece]:
        return whole_file(file)

    def read(self, piece: Piece, stream: BinaryIO, decoder: TextDecoder) -> Iterator[Record]:
        file = piece.file
        function = file.code.load()
        try:
            for number, item in enumerate(function(stream, str(file.path))):
                yield _user_record(item, file, number)
        except DataError:
            raise
        except Exception as exc:  # the user's code may raise anything: one line here, the traceback in the log
            raise DataError(f"{file.code.shown} raised {type(exc).__name__} reading {file.path}: "
                            f"{shorten(str(exc))}") from exc


def _user_record(item: Any, file: SourceFile, number: int) -> Record:
    if isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], dict):
        text, metadata = item
    else:
        text, metadata = item, {}
    if not isinstance(text, str):
        raise DataError(f"{file.code.shown} gave {type(item).__name__} {shorten(repr(item))} as document {number} "
                        f"of {file.path}; a reader yields each document as a str or as (str, dict)")
    if not file.metadata:
        return text, None
    return text, picked_metadata(metadata, file, lambda: f"{file.path}#{number} (from {file.code.shown})")
