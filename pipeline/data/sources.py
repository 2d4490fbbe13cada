"""Streaming readers for raw text: .txt, .jsonl and .parquet, each optionally gzip-compressed.

Readers yield one document at a time and read files in bounded chunks, so
memory does not grow with file size (except for a .txt file read as a single
document, which *is* one document). Files are matched by the globs of the
config, in sorted order, so the corpus order — and therefore which copy of a
duplicate is kept — is the same on every machine.

A task reads one :class:`Partition`: consecutive :class:`Piece` s of the
corpus of about ``partition_bytes`` together. A piece is a whole file, a byte
range of a large uncompressed file of lines (``.jsonl``, or ``.txt`` with
``separator: line``) or a run of Parquet row groups. A byte range holds the
lines that *start* inside it, so consecutive ranges hold every line exactly
once whatever their size. Other files (gzip, other separators) are one piece
each. Small files are packed, so a corpus of a million small objects costs
tasks (and their requests and intermediate files) by its bytes, not its files.

Invalid UTF-8 is an error naming the file and byte offset unless the config
opts into ``replace`` or ``skip`` (drop the document).
"""

from __future__ import annotations

import contextlib
import difflib
import gzip
import io
import json
import os
import sys
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, BinaryIO

from pipeline.config import SourceConfig
from pipeline.engine import storage
from pipeline.errors import DataError, json_error_reason, shorten

STDIN = "-"
"""A source path that stands for standard input (on the command line)."""
NAMED_SEPARATORS = ("document", "blank_line", "line")  # any other .txt separator is a literal string
TEXT_LIKE = (".txt", ".text", ".md", ".markdown", ".rst", ".adoc", ".org", ".tex", ".html", ".htm", ".xml",
             ".py", ".pyi", ".c", ".h", ".cc", ".cpp", ".hpp", ".java", ".js", ".ts", ".go", ".rs", ".rb", ".sh",
             ".css", ".sql", ".yaml", ".yml", ".toml", ".ini", ".cfg", ".log")
"""Extensions read as plain text (``txt``): prose, markup and source code."""
_FORMATS = {**dict.fromkeys(TEXT_LIKE, "txt"), ".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet"}
_CHUNK = 1 << 20
_PREFETCH_BYTES = 8 << 20  # small remote files read ahead, at most this many bytes at a time
_PARQUET_BATCH = 1024



@dataclass(frozen=True)
class SourceFile:
    """One raw file and how to read it (``format`` resolved from the extension)."""

    path: Path | str  # a URL (str) for a remote file
    format: str
    separator: str
    field: str
    field_advice: str = "set field: in data.sources"  # where the user names another field or column
    source: int = 0  # its entry in data.sources, which prepare's stats account per


class TextDecoder:
    """The one UTF-8 decoding policy: ``error``, ``replace`` or ``skip``; counts skipped documents and notes
    the ``(separator, file)`` of each file that a literal separator never split (``unsplit``)."""

    def __init__(self, on_error: str = "error", *,
                 advice: str = "set prepare.on_decode_error to 'replace' or 'skip'"):
        self.on_error = on_error
        self.advice = advice
        self.skipped = 0
        self.unsplit: list[tuple[str, str]] = []

    def decode(self, data: bytes, *, path: Path | str, offset: int) -> str | None:
        """Decode one document's bytes found at ``offset`` in ``path``; None if skipped."""
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            if self.on_error == "replace":
                return data.decode("utf-8", errors="replace")
            if self.on_error == "skip":
                self.skipped += 1
                return None
            where = " of the decompressed data" if _gzipped(path) else ""
            raise DataError(f"{path}: invalid UTF-8 at byte offset {offset + exc.start}{where}; fix the file "
                            f"or {self.advice}") from None


def expand_sources(sources: Sequence[SourceConfig], *, root: str | os.PathLike[str] = ".",
                   label: str | None = None) -> list[SourceFile]:
    """Every file matched by the sources' globs, each glob's matches sorted; a glob matching nothing is an
    error naming it as ``label`` (by default its key, ``data.sources[0].glob``) and the glob it resolved to.

    Paths are ``root`` joined with the match, so a relative ``root`` gives relative paths; a glob
    that is a URL (``s3://bucket/raw/**/*.jsonl.gz``) gives URLs.
    """
    if not sources:
        raise DataError("data.sources is empty; list at least one glob of raw files in the config")
    base = Path(root)
    files: list[SourceFile] = []
    for index, source in enumerate(sources):
        matches = storage.glob_files(source.glob, base)
        if not matches:
            resolved = source.glob if storage.is_url(source.glob) else os.path.normpath(base.resolve() / source.glob)
            looked_for = "" if resolved == source.glob else f" (looked for {resolved})"
            raise DataError(f"{label or f'data.sources[{index}].glob'} {source.glob!r} matches no files{looked_for}")
        for path in matches:
            if isinstance(path, Path) and not path.exists():
                raise DataError(f"{path} is a symbolic link to {os.readlink(path)}, which does not exist; "
                                "fetch the data it stands for, or remove the link")
        files.extend(_source_file(path, source, index) for path in matches)
    return files


def expand_arguments(patterns: Sequence[str], *, field: str | None = None,
                     separator: str = "document") -> list[SourceFile]:
    """Command-line sources: each a path or glob read as ``data.sources`` reads one (``.gz``, ``.jsonl``
    and ``.parquet`` by extension), or ``-`` for standard input: text, or JSON lines when ``field`` is given."""
    files: list[SourceFile] = []
    for pattern in patterns:
        if pattern == STDIN:
            files.append(SourceFile(Path(STDIN), "txt" if field is None else "jsonl", separator, field or "text"))
        else:
            source = SourceConfig(glob=pattern, separator=separator, field=field or "text")
            files += [replace(file, field_advice=_OPTION_ADVICE.get(file.format, file.field_advice))
                      for file in expand_sources([source], label="source")]
    return files


_OPTION_ADVICE = {"jsonl": "pass --field NAME", "parquet": "pass --column NAME"}  # the command line's own options


@dataclass(frozen=True)
class Piece:
    """``file``'s bytes ``[start, end)``, or its row groups ``[start, end)`` for Parquet; ``end`` None
    means to the end of the file. ``size`` is its bytes (Parquet: its row groups' total byte size)."""

    file: SourceFile
    start: int = 0
    end: int | None = None
    size: int = 0

    def describe(self) -> str:
        """The piece as error messages and logs name it."""
        if self.start == 0 and self.end is None:
            return str(self.file.path)
        unit = "row groups" if self.file.format == "parquet" else "bytes"
        return f"{self.file.path} {unit} {self.start}-{'end' if self.end is None else self.end}"


@dataclass(frozen=True)
class Partition:
    """What one task reads: consecutive pieces of the corpus. ``index`` is its place in the corpus
    order; ``size`` its bytes, by which the largest start first."""

    index: int
    pieces: tuple[Piece, ...]

    @property
    def size(self) -> int:
        return sum(piece.size for piece in self.pieces)

    def describe(self) -> str:
        """The partition as error messages and logs name it: its piece, or its first and last pieces."""
        first, last = self.pieces[0], self.pieces[-1]
        if len(self.pieces) == 1:
            return first.describe()
        return f"{first.describe()} to {last.describe()}, {len({piece.file.path for piece in self.pieces})} files"


def plan_partitions(files: Sequence[SourceFile], partition_bytes: int) -> list[Partition]:
    """Cut the files into pieces and pack consecutive pieces into partitions of about
    ``partition_bytes`` each, in corpus order.

    Reads only file sizes and Parquet footers, so the driver never touches the text.
    """
    groups: list[list[Piece]] = []
    size = 0
    for piece in (piece for file in files for piece in _file_pieces(file, partition_bytes)):
        if not groups or size + piece.size > partition_bytes:
            groups.append([])
            size = 0
        groups[-1].append(piece)
        size += piece.size
    return [Partition(index, tuple(pieces)) for index, pieces in enumerate(groups)]


def _file_pieces(file: SourceFile, partition_bytes: int) -> list[Piece]:
    if file.format == "parquet" and not _gzipped(file.path):
        return [Piece(file, start, end, size) for start, end, size in _row_group_ranges(file, partition_bytes)]
    file_size = storage.size(file.path)
    if not _splits_by_line(file):
        return [Piece(file, 0, None, file_size)]
    starts = range(0, max(file_size, 1), partition_bytes)
    return [Piece(file, start, None if start == starts[-1] else start + partition_bytes,
                  min(partition_bytes, file_size - start)) for start in starts]


def _splits_by_line(file: SourceFile) -> bool:
    return not _gzipped(file.path) and (file.format == "jsonl" or (file.format == "txt" and file.separator == "line"))


def _row_group_ranges(file: SourceFile, partition_bytes: int) -> list[tuple[int, int | None, int]]:
    """Runs of consecutive row groups of about ``partition_bytes`` bytes each, with their bytes."""
    with _open_binary(file.path) as stream:
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


def read_partition(partition: Partition, decoder: TextDecoder) -> Iterator[str]:
    """The documents of one partition, streamed; small remote files are fetched several at a time."""
    for _, documents in read_partition_pieces(partition, decoder):
        yield from documents


def read_partition_pieces(partition: Partition, decoder: TextDecoder) -> Iterator[tuple[Piece, Iterator[str]]]:
    """Each piece of one partition with its documents, streamed (read them before asking for the next piece)."""
    for piece, data in _prefetched(partition.pieces):
        yield piece, _read_piece(piece, decoder, data)


def _prefetched(pieces: Sequence[Piece]) -> Iterator[tuple[Piece, bytes | None]]:
    """Each piece with its bytes when it is a whole remote file of at most ``_PREFETCH_BYTES`` (fetched
    concurrently with its neighbours, ``_PREFETCH_BYTES`` at most at a time), else with None."""
    batch: list[Piece] = []
    batch_bytes = 0
    for piece in pieces:
        if batch and (not _prefetchable(piece) or batch_bytes + piece.size > _PREFETCH_BYTES):
            yield from zip(batch, storage.read_many([p.file.path for p in batch]))
            batch, batch_bytes = [], 0
        if _prefetchable(piece):
            batch.append(piece)
            batch_bytes += piece.size
        else:
            yield piece, None
    if batch:
        yield from zip(batch, storage.read_many([p.file.path for p in batch]))


def _prefetchable(piece: Piece) -> bool:
    return (storage.is_url(piece.file.path) and piece.start == 0 and piece.end is None
            and 0 < piece.size <= _PREFETCH_BYTES)  # a range of an empty object is refused by S3


def read_documents(file: SourceFile, decoder: TextDecoder) -> Iterator[str]:
    """The documents of one whole raw file, streamed."""
    yield from _read_piece(Piece(file), decoder)


def _read_piece(piece: Piece, decoder: TextDecoder, data: bytes | None = None) -> Iterator[str]:
    """The documents of one piece, from ``data`` (the file's bytes) when given, else from the file."""
    file = piece.file
    if file.format == "parquet":
        yield from _read_parquet(file, piece.start, piece.end, data)
        return
    with _open_binary(file.path, data) as stream:
        if piece.start or piece.end is not None:
            stream.seek(piece.start)
        lines = _lines(stream, piece.start, piece.end)
        if file.format == "jsonl":
            yield from _read_jsonl(lines, file, decoder)
        else:
            yield from _read_txt(stream, lines, file, decoder)


def read_document_pieces(file: SourceFile, decoder: TextDecoder) -> Iterator[tuple[str, bool]]:
    """The documents of one whole raw file as ``(text, ends_document)`` pieces, in order.

    A ``.txt`` file read as one document comes in pieces decoded from about 1 MB each, so that a
    reader that can use pieces (BPE's chunk counting) never holds a large file whole; any other
    document comes whole. With ``skip`` a file is read whole too: an invalid byte anywhere drops all of it.
    """
    if file.format != "txt" or file.separator != "document" or decoder.on_error == "skip":
        for text in read_documents(file, decoder):
            yield text, True
        return
    with _open_binary(file.path) as stream:
        offset, held = 0, b""
        while data := stream.read(_CHUNK):
            data = held + data
            cut = _decoding_restart(data)
            yield decoder.decode(data[:cut], path=file.path, offset=offset), False
            offset, held = offset + cut, data[cut:]
        yield decoder.decode(held, path=file.path, offset=offset), True


def _decoding_restart(data: bytes) -> int:
    """Where UTF-8 decoding of ``data`` starts afresh near its end: after an ASCII byte or before a
    lead byte (whose character may go on past ``data``). Every byte after it is decoded, strictly or
    not, as if it began the text, so pieces cut there decode to the text whole with the same errors
    at the same offsets. The end of ``data`` if its last four bytes all continue a character (no
    character still needs the next byte then)."""
    for at in range(len(data) - 1, max(len(data) - 4, 0) - 1, -1):
        if data[at] < 0x80:
            return at + 1
        if data[at] >= 0xC0:
            return at
    return len(data)


def _gzipped(path: Path | str) -> bool:
    return storage.name_of(path).endswith(".gz")


def _source_file(path: Path | str, source: SourceConfig, index: int) -> SourceFile:
    fmt = source.format if source.format != "auto" else _format_from_name(path)
    return SourceFile(path=path, format=fmt, separator=source.separator, field=source.field, source=index)


def _format_from_name(path: Path | str) -> str:
    fmt = format_of(path)
    if fmt is None:
        raise DataError(f"{path}: cannot tell the format from the extension (known: .jsonl, .ndjson, .parquet, "
                        "and as text .txt, .md, .py and other text-like ones, optionally .gz); narrow the glob or "
                        "set format: in data.sources")
    return fmt


# -- txt ------------------------------------------------------------------


def _read_txt(stream: BinaryIO, lines: Iterator[tuple[int, bytes]], file: SourceFile,
              decoder: TextDecoder) -> Iterator[str]:
    if file.separator == "line":
        pieces = ((offset, line.rstrip(b"\r\n") if line.endswith(b"\n") else line) for offset, line in lines)
    elif file.separator == "blank_line":
        pieces = _split_blank_lines(stream)
    elif file.separator == "document":
        pieces = iter([(0, stream.read())])
    else:
        pieces = _split_literal(stream, file.separator.encode("utf-8"),
                                if_absent=lambda: decoder.unsplit.append((file.separator, str(file.path))))
    for offset, data in pieces:
        text = decoder.decode(data, path=file.path, offset=offset)
        if text is not None:
            yield text


def unsplit_warning(separator: str, files: list[str], shown: int = 3) -> str:
    """``warning: the separator 'blankline' never occurs in raw/a.txt: ...; did you mean 'blank_line'?``"""
    names = ", ".join(sorted(files)[:shown]) + (f" and {len(files) - shown} more files" if len(files) > shown else "")
    close = difflib.get_close_matches(separator, NAMED_SEPARATORS, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    each = "each is" if len(files) > 1 else "it is"
    return f"warning: the separator {separator!r} never occurs in {names}: {each} one document{hint}"


def _lines(stream: BinaryIO, start: int, end: int | None) -> Iterator[tuple[int, bytes]]:
    """Each line (with its terminator) that starts in ``[start, end)`` of a stream positioned at ``start``.

    A range that does not start the file begins after the first newline at or after ``start - 1``:
    the line running through ``start`` belongs to the range before.
    """
    offset = start
    if start > 0:
        stream.seek(start - 1)
        offset = start - 1 + len(stream.readline())
    for line in stream:
        if end is not None and offset >= end:
            return
        yield offset, line
        offset += len(line)


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
    while chunk := stream.read(_CHUNK):
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


def _read_jsonl(lines: Iterator[tuple[int, bytes]], file: SourceFile, decoder: TextDecoder) -> Iterator[str]:
    for offset, line in lines:
        text = decoder.decode(line, path=file.path, offset=offset) if line.strip() else None
        if text is not None:
            yield _json_field(text, file, offset)


def _line_number(path: Path | str, offset: int) -> int:
    """The 1-based number of the line starting at byte ``offset`` (counted only to report an error)."""
    newlines, remaining = 0, offset
    with _open_binary(path) as stream:
        while remaining and (block := stream.read(min(_CHUNK, remaining))):
            newlines += block.count(b"\n")
            remaining -= len(block)
    return newlines + 1


def _json_field(line: str, file: SourceFile, offset: int) -> str:
    try:
        record = json.loads(line)
    except (ValueError, RecursionError) as exc:
        raise DataError(f"{file.path}:{_line_number(file.path, offset)}: bad JSON line ({json_error_reason(exc)}); "
                        "each line must be one JSON object") from None
    if not isinstance(record, dict):
        raise DataError(f"{file.path}:{_line_number(file.path, offset)}: expected a JSON object, "
                        f"got {type(record).__name__}")
    if file.field not in record:
        raise DataError(f"{file.path}:{_line_number(file.path, offset)}: no field {file.field!r} "
                        f"(fields: {', '.join(sorted(record))}); {file.field_advice}")
    value = record[file.field]
    if not isinstance(value, str):
        raise DataError(f"{file.path}:{_line_number(file.path, offset)}: field {file.field!r} must be a string, "
                        f"got {type(value).__name__}")
    return value



# -- parquet --------------------------------------------------------------


def _parquet_file(file: SourceFile, stream: BinaryIO) -> Any:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(stream)
    except (pa.ArrowException, OSError) as exc:
        raise DataError(f"{file.path}: not a readable parquet file ({exc})") from None
    _check_column(parquet.schema_arrow, file, pa)
    return parquet


def _read_parquet(file: SourceFile, start: int, end: int | None, data: bytes | None) -> Iterator[str]:
    import pyarrow as pa

    with _open_binary(file.path, data) as stream:
        parquet = _parquet_file(file, stream)
        groups = range(start, parquet.metadata.num_row_groups if end is None else end)
        batches = parquet.iter_batches(batch_size=_PARQUET_BATCH, columns=[file.field], row_groups=groups)
        while (texts := _next_texts(batches, file, pa)) is not None:
            yield from texts


def _next_texts(batches: Iterator[Any], file: SourceFile, pa: Any) -> list[str] | None:
    """The next batch's texts, None after the last; a corrupt page or invalid UTF-8 is a DataError."""
    try:
        batch = next(batches, None)
        return None if batch is None else [text or "" for text in batch.column(0).to_pylist()]
    except (pa.ArrowException, OSError) as exc:
        raise DataError(f"{file.path}: corrupt parquet data ({shorten(str(exc))})") from None
    except UnicodeDecodeError:
        raise DataError(f"{file.path}: column {file.field!r} holds invalid UTF-8; fix the file") from None


def _check_column(schema: Any, file: SourceFile, pa: Any) -> None:
    if file.field not in schema.names:
        raise DataError(f"{file.path}: no column {file.field!r} (columns: {', '.join(schema.names)}); "
                        f"{file.field_advice}")
    column_type = schema.field(file.field).type
    if not (pa.types.is_string(column_type) or pa.types.is_large_string(column_type)):
        raise DataError(f"{file.path}: column {file.field!r} must hold strings, got {column_type}")


# -- sampling (to guess how to read a file) -------------------------------


def format_of(path: Path | str) -> str | None:
    """``txt``, ``jsonl`` or ``parquet`` from the file name (a ``.gz`` suffix aside), or None."""
    name = storage.name_of(path)
    name = name[:-3] if name.endswith(".gz") else name
    return _FORMATS.get(os.path.splitext(name)[1].lower())


def head_bytes(path: Path, limit: int) -> bytes:
    """Up to ``limit`` bytes of the file's (decompressed) data."""
    with _open_binary(path) as stream:
        return stream.read(limit)


def string_column_characters(path: Path, rows: int) -> dict[str, int]:
    """The characters each string column of a Parquet file (optionally ``.gz``) holds in its first ``rows`` rows."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    with _open_binary(path) as stream:
        try:
            parquet = pq.ParquetFile(stream)
            names = [field.name for field in parquet.schema_arrow
                     if pa.types.is_string(field.type) or pa.types.is_large_string(field.type)]
            batch = next(parquet.iter_batches(batch_size=rows, columns=names), None) if names else None
        except (pa.ArrowException, OSError) as exc:
            raise DataError(f"{path}: not a readable parquet file ({exc})") from None
    if batch is None:
        return dict.fromkeys(names, 0)
    return {name: int(pc.sum(pc.utf8_length(batch.column(name))).as_py() or 0) for name in names}


# -- opening --------------------------------------------------------------


@contextlib.contextmanager
def _open_binary(path: Path | str, data: bytes | None = None) -> Iterator[BinaryIO]:
    """A buffered binary stream of the file's (decompressed) bytes, read from ``data`` when given
    (the file's bytes, fetched already); ``-`` is standard input."""
    if str(path) == STDIN:
        yield sys.stdin.buffer
        return
    raw = storage.open_input(path) if data is None else io.BytesIO(data)
    with io.BufferedReader(raw, buffer_size=_CHUNK) as buffered:
        if not _gzipped(path):
            yield buffered
            return
        with gzip.GzipFile(fileobj=buffered, mode="rb") as unzipped:
            try:
                yield unzipped  # type: ignore[misc]
            except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
                raise DataError(f"{path}: corrupt gzip data ({exc})") from None
