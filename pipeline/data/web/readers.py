"""The web readers of prepare: ``warc`` (``.warc``, ``.warc.gz``) and ``html`` (saved pages, ``format: html``).

Both yield each page's HTML decoded to text (:func:`pipeline.data.web.extract.decode`: the declared charset,
the meta tag's, UTF-8, windows-1252; it never fails, so ``prepare.on_decode_error`` does not apply); the
``html_extract`` step then keeps its main text. A source names the metadata it keeps (``metadata: [url,
date, record_id]``): a WARC page offers ``url``, ``date``, ``record_id``, ``warc_offset`` (the byte offset
of its record, of its gzip member in a ``.warc.gz``) and ``charset`` (``cp1252 (meta)``: the codec, and
where its name came from); a saved page ``url`` (its path) and ``charset``.

Records that are not pages are counted, never lost: each is a document dropped by ``read/<why>`` in the
per-source table (``non_response``, ``non_html``, ``no_url``, ``too_large``, ``bad_encoding``), a page over
the size bound too. A WARC file is one task's piece: a gzip member cannot be found without reading up to it.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any, BinaryIO

from pipeline.data.readers import picked_metadata
from pipeline.data.reading import CHUNK, Piece, Record, SourceFile, TextDecoder, whole_file
from pipeline.data.record import MetadataField
from pipeline.data.web.extract import MAX_HTML_BYTES, Decoded, decode
from pipeline.data.web.warc import Skipped, read_pages
from pipeline.engine import storage

TOO_LARGE = "too_large"


def _charset(decoded: Decoded) -> str:
    return f"{decoded.encoding} ({decoded.origin})"


def _kept(metadata: dict[str, Any], file: SourceFile, where: str) -> dict[str, Any] | None:
    return picked_metadata(metadata, file, lambda: where) if file.metadata else None


class WarcReader:
    name = "warc"
    extensions = (".warc",)  # and .warc.gz: a .gz suffix is set aside
    fields = (MetadataField("url"), MetadataField("date"), MetadataField("record_id"),
              MetadataField("warc_offset", "int64"), MetadataField("charset"))

    def pieces(self, file: SourceFile, partition_bytes: int) -> list[Piece]:
        return whole_file(file)

    def read(self, piece: Piece, stream: BinaryIO, decoder: TextDecoder) -> Iterator[Record]:
        """The pages of the WARC file. ``stream`` is left unread: fastwarc reads the file's own bytes, so
        that a record's offset is where an index of the file would point."""
        file, skipped = piece.file, Skipped()
        with storage.open_input(file.path) as raw, io.BufferedReader(raw, buffer_size=CHUNK) as buffered:
            for page in read_pages(buffered, name=str(file.path), skipped=skipped, max_bytes=MAX_HTML_BYTES):
                decoded = decode(page.html, page.charset)
                metadata = {"url": page.url, "date": page.date, "record_id": page.record_id,
                            "warc_offset": page.offset, "charset": _charset(decoded)}
                yield decoded.text, _kept(metadata, file, f"{file.path} record at byte offset {page.offset}")
        for rule, count in skipped.items():
            decoder.pass_over(rule, count)


class HtmlReader:
    name = "html"
    extensions: tuple[str, ...] = ()  # .html and .htm stay txt's under format: auto; html is asked for by name
    fields = (MetadataField("url"), MetadataField("charset"))

    def pieces(self, file: SourceFile, partition_bytes: int) -> list[Piece]:
        return whole_file(file)

    def read(self, piece: Piece, stream: BinaryIO, decoder: TextDecoder) -> Iterator[Record]:
        data = stream.read(MAX_HTML_BYTES + 1)
        if len(data) > MAX_HTML_BYTES:
            decoder.pass_over(TOO_LARGE)
            return
        decoded = decode(data)
        yield decoded.text, _kept({"url": str(piece.file.path), "charset": _charset(decoded)}, piece.file,
                                  str(piece.file.path))
