"""The WARC reader on the shipped corpus (WARC/1.1 and 1.0, gzipped per record) and on broken files."""

from __future__ import annotations

import gzip
import io
import zlib
from pathlib import Path

import pytest

from pipeline.data.web.warc import Skipped, read_pages
from pipeline.errors import DataError

WEB = Path(__file__).resolve().parents[3] / "data" / "web"


def pages_of(data: bytes, name: str = "crawl.warc.gz", **options):
    skipped = Skipped()
    return list(read_pages(io.BytesIO(data), name=name, skipped=skipped, **options)), skipped


def record(kind: str, block: bytes, url: str | None = "https://a.org/", version: str = "1.1") -> bytes:
    target = f"WARC-Target-URI: {url}\r\n" if url else ""
    head = (f"WARC/{version}\r\nWARC-Type: {kind}\r\nWARC-Record-ID: <urn:uuid:0>\r\nWARC-Date: 2026-01-02T03:04:05Z"
            f"\r\n{target}Content-Type: application/http; msgtype=response\r\nContent-Length: {len(block)}\r\n\r\n")
    return head.encode() + block + b"\r\n\r\n"


def response(body: bytes, content_type: str = "text/html; charset=utf-8", encoding: str | None = None,
             **options) -> bytes:
    coded = f"Content-Encoding: {encoding}\r\n" if encoding else ""
    http = (f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\n{coded}Content-Length: {len(body)}\r\n\r\n"
            .encode())
    return record("response", http + body, **options)


@pytest.mark.parametrize(("name", "version"), [("crawl-0.warc.gz", b"WARC/1.1"), ("crawl-1.warc.gz", b"WARC/1.0")])
def test_shipped_corpus_yields_html_pages_with_their_metadata(name, version):
    data = (WEB / name).read_bytes()
    pages, skipped = pages_of(data, name)
    assert len(pages) > 100
    assert dict(skipped.items()) == {"non_response": len(pages) + 3, "non_html": 2, "no_url": 1, "too_large": 0,
                                     "bad_encoding": 0}
    for page in pages[:20]:
        assert page.url.startswith("https://") and page.html.lstrip().startswith(b"<!DOCTYPE html>")
        assert page.record_id.startswith("<urn:uuid:") and page.date.startswith("2026-03-")
        member = zlib.decompressobj(wbits=31).decompress(data[page.offset:])  # the offset is the record's member
        assert member.startswith(version + b"\r\nWARC-Type: response")
        assert f"WARC-Record-ID: {page.record_id}".encode() in member


def test_plain_and_whole_file_gzip_read_the_same_pages():
    plain = gzip.decompress((WEB / "crawl-0.warc.gz").read_bytes())
    from_plain, _ = pages_of(plain, "crawl.warc")
    from_whole, _ = pages_of(gzip.compress(plain, mtime=0))
    assert [page.html for page in from_plain] == [page.html for page in from_whole]
    assert plain[from_plain[3].offset:].startswith(b"WARC/1.1\r\nWARC-Type: response")


def test_records_are_skipped_and_counted_by_why():
    data = b"".join([record("warcinfo", b"software: x\r\n", url=None), record("request", b"GET / HTTP/1.1\r\n\r\n"),
                     response(b"{}", "application/json"), response(b"<html>no url</html>", url=None),
                     response(b"<html>" + b"x" * 5000 + b"</html>"), response(b"<!doctype html><p>sniffed", ""),
                     response(b"<p>kept</p>", version="1.0")])
    pages, skipped = pages_of(data, "x.warc", max_bytes=4096)
    assert [page.html for page in pages] == [b"<!doctype html><p>sniffed", b"<p>kept</p>"]
    assert dict(skipped.items()) == {"non_response": 2, "non_html": 1, "no_url": 1, "too_large": 1, "bad_encoding": 0}
    assert pages[1].charset == "utf-8" and pages[1].date == "2026-01-02T03:04:05Z"


def test_content_encoded_payloads_are_decoded_or_counted():
    import brotli

    html = b"<html><body><p>" + b"compressed words " * 200 + b"</p></body></html>"
    raw_deflate = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    data = b"".join([response(gzip.compress(html), encoding="gzip"), response(zlib.compress(html), encoding="deflate"),
                     response(raw_deflate.compress(html) + raw_deflate.flush(), encoding="deflate"),
                     response(brotli.compress(html), encoding="br"), response(html, encoding="identity"),
                     response(b"not gzip at all", encoding="gzip"), response(html, encoding="compress"),
                     response(gzip.compress(b"<p>" + b"x" * 9000), encoding="gzip")])
    pages, skipped = pages_of(data, "x.warc", max_bytes=8192)
    assert [page.html for page in pages] == [html] * 5
    assert (skipped.bad_encoding, skipped.too_large) == (2, 1)


def test_an_empty_file_has_no_pages():
    assert pages_of(b"", "empty.warc") == ([], Skipped())


@pytest.mark.parametrize("cut", [40, 900, 3000, -3])
def test_a_truncated_plain_file_is_refused_naming_the_file_and_record(cut):
    data = response(b"<p>one</p>") + response(b"<html>" + b"y" * 4000 + b"</html>")
    second = len(response(b"<p>one</p>"))
    with pytest.raises(DataError, match=rf"^cut\.warc: truncated WARC record at byte offset {second}\b"):
        pages_of(data[: second + cut if cut > 0 else cut], "cut.warc")


@pytest.mark.parametrize("keep", [0.3, 0.6, 0.9, 0.999])
def test_a_truncated_gzip_file_is_refused(keep):
    data = (WEB / "crawl-1.warc.gz").read_bytes()
    with pytest.raises(DataError, match=r"^crawl-1\.warc\.gz: truncated (or corrupt )?WARC record at byte offset \d+"):
        pages_of(data[: int(len(data) * keep)], "crawl-1.warc.gz")


def test_corrupt_data_is_refused_in_one_line():
    data = bytearray((WEB / "crawl-0.warc.gz").read_bytes())
    data[50_000:50_040] = b"\0" * 40
    with pytest.raises(DataError, match=r"^crawl\.warc\.gz: corrupt WARC data after the record at byte offset \d+ "
                                        r"\(Gzip decompression error"):
        pages_of(bytes(data))
    with pytest.raises(DataError, match=r"^page\.warc: corrupt WARC data at byte offset 0 \(Invalid WARC header\)"):
        pages_of(b"<html><body>not a WARC file</body></html>\r\n\r\n", "page.warc")


def test_bytes_after_the_last_record_are_refused():
    data = response(b"<p>one</p>") + b"WARC/1.1\r\nWARC-Type: resp"
    with pytest.raises(DataError, match=r"^x\.warc: truncated"):
        pages_of(data, "x.warc")
