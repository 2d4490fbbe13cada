"""Streaming readers for raw text: .txt, .jsonl and .parquet, each optionally gzip-compressed.

Readers yield one document at a time and read files in bounded chunks, so
memory does not grow with file size (except for a .txt file read as a single
document, which *is* one document). Files are matched by the globs of the
config, in sorted order, so the corpus order — and therefore which copy of a
duplicate is kept — is the same on every machine.

Invalid UTF-8 is an error naming the file and byte offset unless the config
opts into ``replace`` or ``skip`` (drop the document).
"""

from __future__ import annotations

import contextlib
import glob
import gzip
import io
import json
import os
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from pipeline.config import SourceConfig
from pipeline.errors import DataError

_FORMATS = {".txt": "txt", ".text": "txt", ".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet"}
_CHUNK = 1 << 20
_PARQUET_BATCH = 1024

ProgressCallback = Callable[[int], None]


@dataclass(frozen=True)
class SourceFile:
    """One raw file and how to read it (``format`` resolved from the extension)."""

    path: Path
    format: str
    separator: str
    field: str


class TextDecoder:
    """The one UTF-8 decoding policy: ``error``, ``replace`` or ``skip``; counts skipped documents."""

    def __init__(self, on_error: str = "error"):
        self.on_error = on_error
        self.skipped = 0

    def decode(self, data: bytes, *, path: Path, offset: int) -> str | None:
        """Decode one document's bytes found at ``offset`` in ``path``; None if skipped."""
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            if self.on_error == "replace":
                return data.decode("utf-8", errors="replace")
            if self.on_error == "skip":
                self.skipped += 1
                return None
            where = " of the decompressed data" if path.suffix == ".gz" else ""
            raise DataError(f"{path}: invalid UTF-8 at byte offset {offset + exc.start}{where}; fix the file "
                            "or set prepare.on_decode_error to 'replace' or 'skip'") from None


def expand_sources(sources: Sequence[SourceConfig], *, root: str | os.PathLike[str] = ".") -> list[SourceFile]:
    """Every file matched by the sources' globs, each glob's matches sorted; a glob matching nothing is an error.

    Paths are ``root`` joined with the match, so a relative ``root`` gives relative paths.
    """
    if not sources:
        raise DataError("data.sources is empty; list at least one glob of raw files in the config")
    base = Path(root)
    files = []
    for source in sources:
        # glob.glob, unlike Path.glob, skips hidden files such as temporaries of interrupted writers
        matches = sorted(p for p in map(base.joinpath, glob.glob(source.glob, root_dir=base, recursive=True))
                         if p.is_file())
        if not matches:
            raise DataError(f"data.sources glob {source.glob!r} matches no files under {base.resolve()}")
        files.extend(_source_file(path, source) for path in matches)
    return files


def read_documents(file: SourceFile, decoder: TextDecoder, *,
                   progress: ProgressCallback | None = None) -> Iterator[str]:
    """The documents of one raw file, streamed."""
    if file.format == "parquet":
        yield from _read_parquet(file, progress)
        return
    with _open_binary(file.path, progress) as stream:
        if file.format == "jsonl":
            yield from _read_jsonl(stream, file, decoder)
        else:
            yield from _read_txt(stream, file, decoder)


def _source_file(path: Path, source: SourceConfig) -> SourceFile:
    fmt = source.format if source.format != "auto" else _format_from_name(path)
    return SourceFile(path=path, format=fmt, separator=source.separator, field=source.field)


def _format_from_name(path: Path) -> str:
    name = path.name[:-3] if path.name.endswith(".gz") else path.name
    fmt = _FORMATS.get(os.path.splitext(name)[1].lower())
    if fmt is None:
        raise DataError(f"{path}: cannot tell the format from the extension (known: {', '.join(_FORMATS)}, "
                        "optionally .gz); narrow the glob or set format: in data.sources")
    return fmt


# -- txt ------------------------------------------------------------------


def _read_txt(stream: BinaryIO, file: SourceFile, decoder: TextDecoder) -> Iterator[str]:
    if file.separator == "line":
        pieces = _split_lines(stream)
    elif file.separator == "blank_line":
        pieces = _split_blank_lines(stream)
    elif file.separator == "document":
        pieces = iter([(0, stream.read())])
    else:
        pieces = _split_literal(stream, file.separator.encode("utf-8"))
    for offset, data in pieces:
        text = decoder.decode(data, path=file.path, offset=offset)
        if text is not None:
            yield text


def _split_lines(stream: BinaryIO) -> Iterator[tuple[int, bytes]]:
    """Each line without its terminator (\\n or \\r\\n)."""
    offset = 0
    for line in stream:
        yield offset, line.rstrip(b"\r\n") if line.endswith(b"\n") else line
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


def _split_literal(stream: BinaryIO, separator: bytes) -> Iterator[tuple[int, bytes]]:
    """Split on an exact byte string, reading fixed-size chunks (safe: UTF-8 is self-synchronising).

    Each chunk is scanned once: the search resumes where the previous one
    could still have matched. An empty piece after the last separator is
    not a document.
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
        yield start, bytes(buffer)


# -- jsonl ----------------------------------------------------------------


def _read_jsonl(stream: BinaryIO, file: SourceFile, decoder: TextDecoder) -> Iterator[str]:
    offset = 0
    for number, line in enumerate(stream, start=1):
        text = decoder.decode(line, path=file.path, offset=offset) if line.strip() else None
        offset += len(line)
        if text is not None:
            yield _json_field(text, file, number)


def _json_field(line: str, file: SourceFile, number: int) -> str:
    try:
        record = json.loads(line)
    except (ValueError, RecursionError) as exc:
        raise DataError(f"{file.path}:{number}: bad JSON line ({_json_reason(exc)}); "
                        "each line must be one JSON object") from None
    if not isinstance(record, dict):
        raise DataError(f"{file.path}:{number}: expected a JSON object, got {type(record).__name__}")
    if file.field not in record:
        raise DataError(f"{file.path}:{number}: no field {file.field!r} (fields: {', '.join(sorted(record))}); "
                        "set field: in data.sources")
    value = record[file.field]
    if not isinstance(value, str):
        raise DataError(f"{file.path}:{number}: field {file.field!r} must be a string, "
                        f"got {type(value).__name__}")
    return value


def _json_reason(exc: ValueError | RecursionError) -> str:
    """Why ``json.loads`` refused a line: a syntax error, an integer over Python's digit limit, deep nesting."""
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} at column {exc.colno}"
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    return " ".join(str(exc).split())[:120]


# -- parquet --------------------------------------------------------------


def _read_parquet(file: SourceFile, progress: ProgressCallback | None) -> Iterator[str]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    with _open_binary(file.path, progress) as stream:
        try:
            parquet = pq.ParquetFile(stream)
        except (pa.ArrowException, OSError) as exc:
            raise DataError(f"{file.path}: not a readable parquet file ({exc})") from None
        _check_column(parquet.schema_arrow, file, pa)
        batches = parquet.iter_batches(batch_size=_PARQUET_BATCH, columns=[file.field])
        while (texts := _next_texts(batches, file, pa)) is not None:
            yield from texts


def _next_texts(batches: Iterator[Any], file: SourceFile, pa: Any) -> list[str] | None:
    """The next batch's texts, None after the last; a corrupt page or invalid UTF-8 is a DataError."""
    try:
        batch = next(batches, None)
        return None if batch is None else [text or "" for text in batch.column(0).to_pylist()]
    except (pa.ArrowException, OSError) as exc:
        raise DataError(f"{file.path}: corrupt parquet data ({' '.join(str(exc).split())[:200]})") from None
    except UnicodeDecodeError:
        raise DataError(f"{file.path}: column {file.field!r} holds invalid UTF-8; fix the file") from None


def _check_column(schema: Any, file: SourceFile, pa: Any) -> None:
    if file.field not in schema.names:
        raise DataError(f"{file.path}: no column {file.field!r} (columns: {', '.join(schema.names)}); "
                        "set field: in data.sources")
    column_type = schema.field(file.field).type
    if not (pa.types.is_string(column_type) or pa.types.is_large_string(column_type)):
        raise DataError(f"{file.path}: column {file.field!r} must hold strings, got {column_type}")


# -- opening --------------------------------------------------------------


class _CountingReader(io.RawIOBase):
    """Reports the raw (compressed) bytes read, for a progress bar that moves inside big files."""

    def __init__(self, raw: BinaryIO, progress: ProgressCallback):
        self._raw = raw
        self._progress = progress

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return self._raw.seekable()

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self._raw.seek(offset, whence)

    def tell(self) -> int:
        return self._raw.tell()

    def readinto(self, buffer: Any) -> int:
        count = self._raw.readinto(buffer)
        self._progress(count or 0)
        return count

    def close(self) -> None:
        self._raw.close()
        super().close()


@contextlib.contextmanager
def _open_binary(path: Path, progress: ProgressCallback | None) -> Iterator[BinaryIO]:
    """A buffered binary stream of the file's (decompressed) bytes."""
    raw: Any = open(path, "rb", buffering=0)
    if progress is not None:
        raw = _CountingReader(raw, progress)
    with io.BufferedReader(raw, buffer_size=_CHUNK) as buffered:
        if path.suffix != ".gz":
            yield buffered
            return
        with gzip.GzipFile(fileobj=buffered, mode="rb") as unzipped:
            try:
                yield unzipped  # type: ignore[misc]
            except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
                raise DataError(f"{path}: corrupt gzip data ({exc})") from None
