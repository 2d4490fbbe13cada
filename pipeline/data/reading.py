"""What every reader of raw files shares: the file and the piece of it a task reads, the one UTF-8 decoding
policy, opening (gzip, standard input, object stores) and the lines of a byte range.

A reader (:class:`Reader`, registered in :mod:`pipeline.data.registry`) turns the bytes of one piece into
documents with their metadata.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import itertools
import sys
import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from pipeline.data.cleaning import clean_bounded
from pipeline.data.record import MetadataField
from pipeline.engine import locations, storage
from pipeline.errors import DataError

STDIN = "-"
"""A source path that stands for standard input (on the command line)."""
CHUNK = 1 << 20
_MAX_UTF8_BYTES = 4  # a character's most bytes in UTF-8

Record = tuple[str, dict[str, Any] | None]
"""A document as a reader gives it: its text, and its metadata (None when the source keeps none)."""


@dataclass(frozen=True, slots=True)
class SourceFile:
    """One raw file and how to read it (``format`` resolved from the extension). The driver keeps the raw files
    in the columns of a :class:`~pipeline.data.file_table.SourceFiles`, which makes one when it is asked for."""

    path: Path | str  # a local path or a URL: a str when a glob matched it (absolute in a task that reads it)
    format: str
    separator: str
    field: str
    field_advice: str = "set field: in data.sources"  # where the user names another field or column
    source: int = 0  # its entry in data.sources, which prepare's stats account per
    metadata: tuple[MetadataField, ...] = ()  # the fields or columns kept with each document
    code: Any = None  # a user's reader (data.sources[i].reader): its UserCode
    stamp: Mapping[str, Any] | None = None  # a remote file's size and identity, as the glob's listing gave them

    def size(self) -> int:
        """The file's bytes: from the listing for a remote file, so that no task asks the store again."""
        return int(self.stamp["size"]) if self.stamp is not None else storage.size(self.path)


class TextDecoder:
    """The one UTF-8 decoding policy: ``error``, ``replace`` or ``skip``; counts skipped documents and notes
    the ``(separator, file)`` of each file that a literal separator never split (``unsplit``).

    With ``max_chars`` (``prepare.max_chars``), a document that a reader gives in parts
    (:meth:`decode_document`) is never held whole once it is longer than ``max_chars`` after cleaning.
    """

    def __init__(self, on_error: str = "error", *,
                 advice: str = "set prepare.on_decode_error to 'replace' or 'skip'",
                 max_chars: int | None = None, normalize: str = "NFC"):
        self.on_error = on_error
        self.advice = advice
        self.max_chars, self.normalize = max_chars, normalize
        self.skipped = 0
        self.unsplit: list[tuple[str, str]] = []
        self.passed: dict[str, int] = {}  # records a reader read but gave no document for, by why

    def pass_over(self, rule: str, count: int = 1) -> None:
        """Count records a reader reads but yields no document for (a WARC request, an image): prepare's
        stats show them as read and dropped by ``read/<rule>``, so that none is lost without a number."""
        if count:
            self.passed[rule] = self.passed.get(rule, 0) + count

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
            where = " of the decompressed data" if gzipped(path) else ""
            raise DataError(f"{path}: invalid UTF-8 at byte offset {offset + exc.start}{where}; fix the file "
                            f"or {self.advice}") from None

    def decode_document(self, parts: Iterable[tuple[int, bytes]], *, path: Path | str) -> str | None:
        """One document given as its bytes in parts, each with its offset in ``path``, decoded as :meth:`decode`
        decodes them joined; None if skipped.

        With ``max_chars``, a document of more than four bytes a character allowed is decoded and cleaned as it
        is read instead (:func:`~pipeline.data.cleaning.clean_bounded`): once it is certainly too long, the rest
        of its parts is never taken, and what comes back is its first ``max_chars + 1`` characters, cleaned,
        which the length rule drops as ``too_long``. A byte past that point is never decoded: invalid UTF-8
        there is no error (the document is dropped as too long).
        """
        parts = iter(parts)
        held: list[bytes] = []
        start, size = 0, 0
        for offset, data in parts:
            if not held:
                start = offset
            held.append(data)
            size += len(data)
            if self.max_chars is not None and size > _MAX_UTF8_BYTES * (self.max_chars + 1):
                return self._decode_long(itertools.chain([(start, b"".join(held))], parts), path)
        return self.decode(b"".join(held), path=path, offset=start)

    def _decode_long(self, parts: Iterator[tuple[int, bytes]], path: Path | str) -> str | None:
        assert self.max_chars is not None
        skipped = self.skipped
        text = clean_bounded(self._decoded(parts, path), normalize=self.normalize, max_chars=self.max_chars)
        return None if self.skipped > skipped else text

    def _decoded(self, parts: Iterator[tuple[int, bytes]], path: Path | str) -> Iterator[str]:
        """The text of the parts, decoded from where a character starts (the same text and errors as decoding
        them joined); ends early once a part is skipped."""
        held, at = b"", -1
        for offset, data in parts:
            at, data = (offset if at < 0 else at), held + data
            cut = decoding_restart(data)
            if (text := self.decode(data[:cut], path=path, offset=at)) is None:
                return
            yield text
            at, held = at + cut, data[cut:]
        if held and (text := self.decode(held, path=path, offset=at)) is not None:
            yield text


def decoding_restart(data: bytes) -> int:
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


@dataclass(frozen=True, slots=True)
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


class Reader(Protocol):
    """How one format is read: ``name`` is its ``format:`` in ``data.sources``, ``extensions`` the file names
    ``auto`` gives it (a ``.gz`` suffix aside), ``fields`` the metadata every document of it carries."""

    name: str
    extensions: tuple[str, ...]
    fields: tuple[MetadataField, ...]

    def pieces(self, file: SourceFile, partition_bytes: int) -> list[Piece]:
        """The pieces of ``file`` that tasks of about ``partition_bytes`` read (:func:`whole_file` if it cannot
        be cut), each with its size; only sizes and footers are read here, never the text."""

    def read(self, piece: Piece, stream: BinaryIO, decoder: TextDecoder) -> Iterator[Record]:
        """The documents of ``piece``, from ``stream``, the file's (decompressed) bytes at their start."""


def whole_file(file: SourceFile) -> list[Piece]:
    """A file read by one task: what a reader that cannot cut its files gives as pieces."""
    return [Piece(file, 0, None, file.size())]


def gzipped(path: Path | str) -> bool:
    return locations.name_of(path).endswith(".gz")


def lines(stream: BinaryIO, start: int, end: int | None) -> Iterator[tuple[int, bytes]]:
    """Each line (with its terminator) that starts in ``[start, end)`` of a stream positioned at ``start``.

    A range that does not start the file begins after the first newline at or after ``start - 1``:
    the line running through ``start`` belongs to the range before.
    """
    offset = _first_line_start(stream, start)
    for line in stream:
        if end is not None and offset >= end:
            return
        yield offset, line
        offset += len(line)


def line_parts(stream: BinaryIO, start: int, end: int | None) -> Iterator[tuple[int, Iterator[tuple[int, bytes]]]]:
    """As :func:`lines`, each line as its parts of at most :data:`CHUNK` bytes with their offsets, read as they
    are taken: a line the caller stops taking is read on to its end, never held, before the next one."""
    offset = _first_line_start(stream, start)
    while end is None or offset < end:
        first = stream.readline(CHUNK)
        if not first:
            return
        line = _LineParts(stream, offset, first)
        yield offset, iter(line)
        offset = line.finish()


class _LineParts:
    """One line of a stream, part by part; :meth:`finish` reads what the caller did not take."""

    def __init__(self, stream: BinaryIO, offset: int, first: bytes):
        self._stream, self._offset, self._next = stream, offset, first

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        while self._next:
            part, offset = self._next, self._offset
            self._offset += len(part)
            self._next = b"" if part.endswith(b"\n") else self._stream.readline(CHUNK)
            yield offset, part

    def finish(self) -> int:
        """Read the rest of the line; the offset after it."""
        for _ in self:
            pass
        return self._offset


def _first_line_start(stream: BinaryIO, start: int) -> int:
    """The offset of the first line starting at or after ``start`` (the stream left there), the line running
    through ``start`` read in bounded parts."""
    if start == 0:
        return 0
    stream.seek(start - 1)
    offset = start - 1
    while part := stream.readline(CHUNK):
        offset += len(part)
        if part.endswith(b"\n"):
            break
    return offset


def line_number(path: Path | str, offset: int) -> int:
    """The 1-based number of the line starting at byte ``offset`` (counted only to report an error)."""
    newlines, remaining = 0, offset
    with open_binary(path) as stream:
        while remaining and (block := stream.read(min(CHUNK, remaining))):
            newlines += block.count(b"\n")
            remaining -= len(block)
    return newlines + 1


@contextlib.contextmanager
def open_binary(path: Path | str, data: bytes | None = None) -> Iterator[BinaryIO]:
    """A buffered binary stream of the file's (decompressed) bytes, read from ``data`` when given
    (the file's bytes, fetched already); ``-`` is standard input."""
    if str(path) == STDIN:
        yield sys.stdin.buffer
        return
    raw = storage.open_input(path) if data is None else io.BytesIO(data)
    with io.BufferedReader(raw, buffer_size=CHUNK) as buffered:
        if not gzipped(path):
            yield buffered
            return
        with gzip.GzipFile(fileobj=buffered, mode="rb") as unzipped:
            try:
                yield unzipped  # type: ignore[misc]
            except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
                raise DataError(f"{path}: corrupt gzip data ({exc})") from None
