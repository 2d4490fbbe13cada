"""HTML to main text: charset decoding, then resiliparse's main-content extraction.

Decoding never fails. The charset tried first is the one the HTTP header declared, then the page's own
``<meta charset>`` (or ``http-equiv`` Content-Type), then UTF-8; the first that decodes the bytes without
error is used. A page none of them decodes is read as windows-1252 with undecodable bytes replaced (what
browsers do with an undeclared page; the five bytes cp1252 leaves undefined become U+FFFD). As in the
WHATWG encoding standard, ``iso-8859-1`` and ``us-ascii`` labels mean windows-1252. :class:`Decoded` says
which way the text was read, so a recipe can count pages whose declared charset was wrong.

Extraction keeps the page's main content: navigation, headers, footers, sidebars, forms, scripts and
cookie notices are dropped (resiliparse's ``main_content`` heuristics, DCLM's extractor). Why resiliparse
rather than trafilatura, with the figures: docs/web.md. A page over ``max_bytes`` is not parsed (a parser
holds the whole tree, several times the page): :func:`extract` says so, and the caller counts it.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

MAX_HTML_BYTES = 8 << 20
"""Pages larger than this are not extracted (counted as too large): 8 MiB is far above a real article's
HTML (Common Crawl truncates its records at 1 MiB) and keeps a parse's tree to a few hundred MiB."""
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.IGNORECASE)
_META_WINDOW = 4096  # HTML5 requires the meta charset within the first 1024 bytes; pages are laxer
_AS_WINDOWS_1252 = {"latin-1", "iso8859-1", "ascii"}  # Python's codec names for labels WHATWG maps to cp1252
FALLBACK = "cp1252"


@dataclass(frozen=True)
class Decoded:
    """A page's text and how it was decoded: the codec, and where its name came from (``header``,
    ``meta``, ``utf-8`` when nothing usable was declared, ``fallback`` when no candidate decoded it)."""

    text: str
    encoding: str
    origin: str


def codec_name(label: str | None) -> str | None:
    """Python's codec for a charset label (None for an unknown label), windows-1252 for the labels
    browsers read as windows-1252."""
    if not label:
        return None
    try:
        name = codecs.lookup(label.strip().strip("\"'")).name
    except LookupError:
        return None
    return FALLBACK if name in _AS_WINDOWS_1252 else name


def meta_charset(data: bytes) -> str | None:
    found = _META_CHARSET.search(data, 0, _META_WINDOW)
    return found.group(1).decode("ascii") if found else None


def decode(data: bytes, declared: str | None = None) -> Decoded:
    """Decode a page: the header's charset, the meta tag's, UTF-8, in that order; windows-1252 if none fits."""
    for origin, label in (("header", declared), ("meta", meta_charset(data)), ("utf-8", "utf-8")):
        encoding = codec_name(label)
        if encoding is None:
            continue
        try:
            return Decoded(data.decode(encoding).removeprefix("\ufeff"), encoding, origin)
        except UnicodeDecodeError:
            continue
    return Decoded(data.decode(FALLBACK, errors="replace"), FALLBACK, "fallback")


@dataclass(frozen=True)
class Extracted:
    """A page's main text ("" when it has none), or ``too_large`` when the page was not parsed."""

    text: str
    decoded: Decoded | None
    too_large: bool = False


def extract(data: bytes, declared: str | None = None, *, max_bytes: int = MAX_HTML_BYTES) -> Extracted:
    """The main text of the HTML page ``data`` (bytes as fetched; ``declared`` the header's charset)."""
    if len(data) > max_bytes:
        return Extracted("", None, too_large=True)
    decoded = decode(data, declared)
    return Extracted(main_text(decoded.text), decoded)


def main_text(html: str) -> str:
    """resiliparse's main-content text of ``html``, one block a line, blank lines between blocks collapsed."""
    from resiliparse.extract.html2text import extract_plain_text
    from resiliparse.parse.html import HTMLTree

    text = extract_plain_text(HTMLTree.parse(html), main_content=True, alt_texts=False, links=False,
                              form_fields=False, noscript=False, comments=False)
    return "\n".join(line.strip() for line in text.splitlines() if line.strip())
