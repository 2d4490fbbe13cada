"""Charset decoding (declared, meta, UTF-8, fallback) and main-text extraction."""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest

from pipeline.data.web.extract import MAX_HTML_BYTES, codec_name, decode, extract
from pipeline.data.web.warc import Skipped, read_pages

ROOT = Path(__file__).resolve().parents[3]
CAFE = "Le café de Zoë à Montréal"


def page(text: str, meta: str = "") -> str:
    return (f"<html><head>{meta}<title>t</title></head><body><nav><a href='/'>Home</a> <a href='/x'>News</a></nav>"
            f"<main><h1>A title</h1><p>{text} This sentence is part of the article body and is kept.</p>"
            f"<p>Another paragraph of the article follows here, with more words in it.</p></main>"
            f"<footer>Copyright 2026. All rights reserved. Privacy | Terms</footer></body></html>")


@pytest.mark.parametrize(("data", "declared", "encoding", "origin"), [
    (page(CAFE).encode("utf-8"), "utf-8", "utf-8", "header"),
    (page(CAFE).encode("cp1252"), "windows-1252", "cp1252", "header"),
    (page(CAFE, '<meta charset="iso-8859-1">').encode("latin-1"), None, "cp1252", "meta"),
    (page(CAFE, '<meta http-equiv="Content-Type" content="text/html; charset=ISO-8859-1">').encode("latin-1"),
     None, "cp1252", "meta"),
    (page(CAFE).encode("cp1252"), "utf-8", "cp1252", "fallback"),  # declared wrongly, nothing else fits
    (page(CAFE).encode("utf-8"), "no-such-charset", "utf-8", "utf-8"),
    (page(CAFE).encode("utf-8"), None, "utf-8", "utf-8"),
    (b"\xef\xbb\xbf" + page(CAFE).encode("utf-8"), None, "utf-8", "utf-8"),
])
def test_decode_tries_header_meta_utf8_then_falls_back(data, declared, encoding, origin):
    decoded = decode(data, declared)
    assert (decoded.encoding, decoded.origin) == (encoding, origin)
    assert CAFE in decoded.text and not decoded.text.startswith("\ufeff")


def test_undecodable_bytes_never_raise():
    decoded = decode(b"<p>\x81\x8d\x8f\x90\x9d \xff\xfe</p>", "utf-8")
    assert decoded.origin == "fallback" and "\ufffd" in decoded.text


def test_latin_labels_read_as_windows_1252():
    assert codec_name("ISO-8859-1") == codec_name("us-ascii") == codec_name("latin1") == "cp1252"
    assert codec_name("utf8") == "utf-8" and codec_name("bogus") is None and codec_name(None) is None


def test_extraction_keeps_the_article_and_drops_navigation_and_footer():
    text = extract(page(CAFE).encode("utf-8")).text
    assert CAFE in text and "Another paragraph" in text
    assert "Home" not in text and "Copyright" not in text and "Privacy" not in text


def test_a_huge_page_is_not_parsed_but_said_to_be_too_large():
    huge = b"<html><body>" + b"<p>word </p>" * ((100 << 20) // 12) + b"</body></html>"
    start = time.process_time()
    extracted = extract(huge)
    assert extracted.too_large and extracted.text == "" and extracted.decoded is None
    assert time.process_time() - start < 1
    small = page(CAFE).encode("utf-8")
    assert extract(small, max_bytes=len(small)).text and extract(small, max_bytes=len(small) - 1).too_large
    assert len(huge) > MAX_HTML_BYTES


def test_every_shipped_page_extracts_without_boilerplate():
    pages = []
    for path in sorted((ROOT / "data" / "web").glob("*.warc.gz")):
        with path.open("rb") as stream:
            pages += list(read_pages(stream, name=str(path), skipped=Skipped()))
    texts = {page.url: extract(page.html, page.charset).text for page in pages}
    assert all(texts.values())
    assert not any("Most read story" in text or "All rights reserved" in text for text in texts.values())
    cafe = [text for url, text in texts.items() if "/guides/cafe-" in url]
    assert len(cafe) == 4 and all(CAFE in text for text in cafe[:2] + cafe[3:])  # -wrong decodes as it can


def test_golden_pages_keep_most_of_their_main_text():
    """A floor under the quality measured in benchmarks/bench_web_parts.py, so a regression shows."""
    kept = total = 0
    for html_path in sorted((ROOT / "benchmarks" / "web_golden").glob("*.html")):
        words = set(extract(html_path.read_bytes()).text.split())
        truth = set(html_path.with_suffix(".txt").read_text().split())
        kept, total = kept + len(words & truth), total + len(truth)
        assert words & truth, html_path.name
    assert kept >= 0.85 * total


def test_warc_page_bytes_round_trip_through_io():
    data = io.BytesIO((ROOT / "data" / "web" / "crawl-1.warc.gz").read_bytes())
    first = next(read_pages(data, name="crawl-1.warc.gz", skipped=Skipped()))
    assert extract(first.html, first.charset).decoded.origin == "header"
