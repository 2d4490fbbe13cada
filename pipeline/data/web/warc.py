"""Reading WARC files (WARC/1.0 and 1.1, plain or gzipped record by record) with fastwarc.

:func:`read_pages` yields the HTML pages of a WARC file's response records, each with its target URI, its
WARC-Date, its record ID, the byte offset of its record in the file (for a ``.warc.gz``, of the record's
gzip member, as Common Crawl's index gives it) and the charset its HTTP header declared. The other records
are counted in :class:`Skipped` by why: not a response (warcinfo, request, metadata, revisit …), a response
that is not HTML, one without a target URI, a payload over ``max_bytes``, or one in an HTTP Content-Encoding
that does not decode (gzip, deflate and br are decoded).

fastwarc stops without a word at the end of a truncated file, so the reader checks for itself that the
last record is whole: its payload as long as its header says, and nothing after it that fastwarc did not
read. A truncated or corrupt file is a :class:`DataError` naming the file and the record's offset. Why
fastwarc rather than warcio, with the figures: docs/web.md.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import BinaryIO

from pipeline.errors import DataError, shorten

HTML_TYPES = ("text/html", "application/xhtml+xml")
MAX_PAYLOAD_BYTES = 8 << 20
"""Payloads larger than this are skipped unread (counted ``too_large``); the extractor's bound is the same."""
_HEADER_LIMIT = 1 << 16  # the longest WARC header block looked for when checking the last record
_GZIP_MAGIC = b"\x1f\x8b"
_IDENTITY = ("identity", "none", "")
_ZLIB_WBITS = {"gzip": (16 + zlib.MAX_WBITS,), "x-gzip": (16 + zlib.MAX_WBITS,),
               "deflate": (zlib.MAX_WBITS, -zlib.MAX_WBITS)}


@dataclass(frozen=True)
class Page:
    """One response record's HTML payload and where it came from."""

    html: bytes
    url: str
    date: str
    record_id: str
    offset: int
    charset: str | None


@dataclass
class Skipped:
    """Records read but not yielded, by why; :meth:`items` in a fixed order for a table."""

    non_response: int = 0
    non_html: int = 0
    no_url: int = 0
    too_large: int = 0
    bad_encoding: int = 0  # a payload in an HTTP Content-Encoding that does not decode, or one not known

    def items(self) -> list[tuple[str, int]]:
        return [(entry.name, getattr(self, entry.name)) for entry in fields(self)]

    def add(self, other: Skipped) -> None:
        for name, count in other.items():
            setattr(self, name, getattr(self, name) + count)


@dataclass
class _Last:
    """The last record read: where it starts, its payload length as declared, and whether it was read."""

    offset: int = -1
    declared: int = 0
    read: int | None = None  # bytes of payload read, when the payload was read


def read_pages(stream: BinaryIO, *, name: str, skipped: Skipped,
               max_bytes: int = MAX_PAYLOAD_BYTES) -> Iterator[Page]:
    """The HTML pages of the WARC file open as ``stream`` (binary, seekable; ``name`` for messages), the
    records passed over counted into ``skipped``."""
    from fastwarc.warc import ArchiveIterator

    gzipped = stream.read(2) == _GZIP_MAGIC
    stream.seek(0)
    last = _Last()
    try:
        for record in ArchiveIterator(stream, parse_http=True, auto_decode="none"):
            last = _Last(record.stream_pos, record.content_length)
            page = _page(record, last, skipped, max_bytes)
            if page is not None:
                yield page
    except OSError as exc:  # fastwarc's word for corrupt data
        where = "at byte offset 0" if last.offset < 0 else f"after the record at byte offset {last.offset}"
        raise DataError(f"{name}: corrupt WARC data {where} ({shorten(str(exc))})") from None
    _check_end(stream, name=name, last=last, gzipped=gzipped)


def _page(record, last: _Last, skipped: Skipped, max_bytes: int) -> Page | None:
    from fastwarc.warc import WarcRecordType

    if record.record_type != WarcRecordType.response:
        skipped.non_response += 1
        return None
    content_type = (record.http_content_type or "").lower()
    url = record.headers.get("WARC-Target-URI")
    if content_type and content_type not in HTML_TYPES:
        skipped.non_html += 1
        return None
    if not url:
        skipped.no_url += 1
        return None
    if record.content_length > max_bytes:
        skipped.too_large += 1
        return None
    html = record.reader.read()
    last.read = len(html)
    if len(html) < record.content_length:
        return None  # truncated: _check_end says so once the iterator has stopped
    encoding = (record.http_headers.get("Content-Encoding") or "identity").strip().lower()
    if encoding not in _IDENTITY:
        html = _content_decoded(html, encoding, max_bytes)
        if html is None:
            skipped.bad_encoding += 1
            return None
        if len(html) > max_bytes:
            skipped.too_large += 1
            return None
    if not content_type and not _looks_like_html(html):
        skipped.non_html += 1
        return None
    return Page(html, url, record.headers.get("WARC-Date") or "", record.record_id or "", record.stream_pos,
                record.http_charset)


def _content_decoded(payload: bytes, encoding: str, max_bytes: int) -> bytes | None:
    """The payload without its HTTP Content-Encoding (as Heritrix and wget store it; Common Crawl stores it
    decoded), at most ``max_bytes + 1`` bytes of it; None for an encoding not known or data that does not
    decode."""
    if encoding == "br":
        import brotli  # fastwarc's own dependency

        try:
            return brotli.Decompressor().process(payload, output_buffer_limit=max_bytes + 1)
        except brotli.error:
            return None
    for wbits in _ZLIB_WBITS.get(encoding, ()):  # deflate is sent with a zlib header or without one
        try:
            return zlib.decompressobj(wbits=wbits).decompress(payload, max_bytes + 1)
        except zlib.error:
            continue
    return None


def _looks_like_html(payload: bytes) -> bool:
    """A response without a Content-Type is HTML when its start says so (as browsers sniff)."""
    start = payload[:512].lstrip().lower()
    return start.startswith((b"<!doctype html", b"<html", b"<head", b"<body"))


def _check_end(stream: BinaryIO, *, name: str, last: _Last, gzipped: bool) -> None:
    """Refuse a file whose last record is cut short or is followed by bytes fastwarc did not read."""
    if last.read is not None and last.read < last.declared:
        raise DataError(f"{name}: truncated WARC record at byte offset {last.offset} (its payload has "
                        f"{last.read:,} of {last.declared:,} bytes)")
    size = stream.seek(0, 2)
    start = max(last.offset, 0)
    end = _gzip_end(stream, start, size) if gzipped else _record_end(stream, start)
    if end is None or end > size:
        raise DataError(f"{name}: truncated WARC record at byte offset {start}")
    stream.seek(end)
    if stream.read(_HEADER_LIMIT).strip(b"\r\n"):
        raise DataError(f"{name}: truncated or corrupt WARC record at byte offset {end}")


def _gzip_end(stream: BinaryIO, start: int, size: int) -> int | None:
    """Where the last record's gzip member ends. A file gzipped whole (not record by record) has no
    member at ``start``: then every member of the file is checked, and the end is the file's."""
    stream.seek(start)
    if stream.read(2) == _GZIP_MAGIC:
        return _member_end(stream, start)
    end: int | None = 0
    while end is not None and end < size:
        end = _member_end(stream, end)
    return end


def _member_end(stream: BinaryIO, start: int) -> int | None:
    """Where the gzip member at ``start`` ends; None when the file ends first or the member is corrupt."""
    stream.seek(start)
    inflater, read = zlib.decompressobj(wbits=31), 0
    while not inflater.eof:
        data = stream.read(1 << 16)
        if not data:
            return None
        read += len(data)
        try:
            while data and not inflater.eof:  # bounded output: a small member can inflate to a lot
                inflater.decompress(data, 1 << 20)
                data = inflater.unconsumed_tail
        except zlib.error:
            return None
    return start + read - len(inflater.unused_data)


def _record_end(stream: BinaryIO, start: int) -> int | None:
    """Where the uncompressed record at ``start`` ends (headers, the Content-Length bytes of its block and
    the blank line after it); None when its headers do not end or hold no Content-Length."""
    stream.seek(start)
    head = stream.read(_HEADER_LIMIT)
    if not head:
        return start  # an empty file
    end = head.find(b"\r\n\r\n")
    if end < 0:
        return None
    for line in head[:end].split(b"\r\n"):
        key, _, value = line.partition(b":")
        if key.strip().lower() == b"content-length" and value.strip().isdigit():
            return start + end + 4 + int(value) + 4
    return None
