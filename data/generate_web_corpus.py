"""Generate the small web corpus shipped in data/web/ (deterministic: same seed, same bytes).

    python data/generate_web_corpus.py [--out data/web] [--seed 0] [--pages 240]

Writes two gzipped WARC files of crawled HTML (``crawl-0.warc.gz`` in WARC/1.1, ``crawl-1.warc.gz`` in
WARC/1.0, one gzip member per record as crawlers write them), the URL lists a recipe filters with
(``blocklist-domains.txt``, ``blocklist-words.txt``, ``allowlist.txt``) and two evaluation sets
(``eval/trivia.jsonl``, ``eval/stories.txt``). The pages are articles of synthetic English (the
sentences of ``generate_corpus.py``) on four sites, each page wrapped in its site's navigation, sidebar and
footer, so an extractor has boilerplate to drop. Planted in them, for the web steps to find:

- articles republished at a second URL (exact duplicates once extracted) and lightly edited copies;
- pages on blocklisted domains and subdomains, URLs with a blocklisted word, one allow-listed exception;
- e-mail addresses and public IPv4/IPv6 addresses, beside private ones and example addresses;
- a few evaluation items copied verbatim into articles (13-word overlaps);
- pages in windows-1252 or ISO-8859-1 declared in the HTTP header, in a meta tag, wrongly, or not at all;
- thin pages the quality rules drop (a placeholder, a list of headlines, a script notice);
- records a reader skips: warcinfo, requests, metadata, a revisit, non-HTML responses, a response
  without a target URI.

Only the standard library is used.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import uuid
from dataclasses import dataclass
from html import escape
from pathlib import Path

from generate_corpus import (
    ADJECTIVES,
    ADVERBS,
    CITIES,
    COLORS,
    FOODS,
    NAMES,
    NOUNS,
    PLACES,
    ROOTS,
    WEEKDAYS,
    Writer,
    article,
    past,
    plural,
)

SITES = {
    "brightwater-gazette.org": ("Brightwater Gazette", ["News", "Sport", "Weather", "Letters", "Archive"]),
    "cedarvale-library.net": ("Cedarvale Library", ["Catalogue", "Events", "Reading lists", "Opening hours"]),
    "eastport-makers.com": ("Eastport Makers", ["Projects", "Workshop", "Tools", "Members", "Shop"]),
    "juniper-travel.co.uk": ("Juniper Travel Notes", ["Destinations", "Guides", "Maps", "About us"]),
}
BLOCKED_DOMAINS = ["bestcasino-online.biz", "free-pills.info"]
BLOCKED_WORDS = ["/affiliate/", "xxx-deals"]
ALLOWED = ["cedarvale-library.net/local-history/"]  # a blocklisted word inside an allowed section
DATE = "2026-03-{day:02d}T{hour:02d}:{minute:02d}:00Z"


@dataclass
class Page:
    url: str
    html: str
    encoding: str = "utf-8"
    header_charset: str | None = "utf-8"  # the HTTP Content-Type's charset (None: not declared)


class Articles:
    """Article bodies: paragraphs of sentences that read as prose (stop words, punctuation, varied lines)."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.writer = Writer(rng)

    def sentences(self) -> list[str]:
        """One sentence of each template, shuffled: an article repeats no template, so no 5-gram repeats
        often enough for Gopher's repetition rules."""
        r, pick = self.rng, self.rng.choice
        name, other, noun, place, city = pick(NAMES), pick(NAMES), pick(NOUNS), pick(PLACES), pick(CITIES)
        found = [
            f"On the way to the {place}, {name} {past(pick(ROOTS))} {article(noun)} {noun} left by a "
            f"{pick(ADJECTIVES)} {pick(NOUNS)}.",
            f"People in {city} say the {pick(NOUNS)} was {pick(ADJECTIVES)} and could {pick(ROOTS)} with "
            f"{plural(pick(NOUNS))}.",
            f"{other} counted {r.randint(3, 90)} {plural(noun)} at the {pick(PLACES)} this year, more than "
            f"{r.randint(2, 40)} last spring.",
            f"It is not easy to {pick(ROOTS)} {article(noun)} {noun}, but {pick(NAMES)} has a plan.",
            f"Nobody expected the {pick(ADJECTIVES)} {pick(NOUNS)} to {pick(ROOTS)} so {pick(ADVERBS)}.",
            f"By {pick(WEEKDAYS)} morning the {pick(NOUNS)} near the {pick(PLACES)} had turned {pick(COLORS)}.",
            f"\"We will {pick(ROOTS)} it again next week,\" {other} said at the {pick(PLACES)}.",
            f"Visitors from {pick(CITIES)} brought {pick(FOODS)} for the {plural(pick(NOUNS))} of {city}.",
            f"Why would anyone {pick(ROOTS)} {article(place)} {place} twice in one {pick(['day', 'week', 'month'])}?",
            f"The old {pick(NOUNS)} of {pick(CITIES)} still stands beside the {pick(ADJECTIVES)} {pick(NOUNS)}.",
            f"{name} and {other} {past(pick(ROOTS))} together until the {pick(NOUNS)} was {pick(ADJECTIVES)}.",
            f"Most of the {plural(pick(NOUNS))} here are {pick(ADJECTIVES)}, and some are {pick(ADJECTIVES)} too.",
            f"After {r.randint(2, 12)} hours of work, {pick(NAMES)} {past(pick(ROOTS))} the last {pick(NOUNS)}.",
            self.writer.fact(),
            self.writer.fact(),
        ]
        r.shuffle(found)
        return found

    def sentence(self) -> str:
        return self.sentences()[0]

    def paragraphs(self) -> list[str]:
        found = self.sentences()
        cuts = sorted(self.rng.sample(range(2, len(found) - 1), self.rng.randint(2, 4)))
        return [" ".join(found[start:end]) for start, end in zip([0, *cuts], [*cuts, len(found)])]

    def title(self) -> str:
        pick = self.rng.choice
        return f"The {pick(ADJECTIVES)} {pick(NOUNS)} of {pick(CITIES)}"


def page_html(domain: str, title: str, paragraphs: list[str], *, meta_charset: str | None = "utf-8") -> str:
    """One article in its site's chrome: header, navigation, sidebar of links, footer."""
    name, sections = SITES.get(domain, (domain, ["Home", "Offers", "Contact"]))
    meta = f'<meta charset="{meta_charset}">' if meta_charset else ""
    nav = "".join(f'<li><a href="/{s.lower().replace(" ", "-")}/">{escape(s)}</a></li>' for s in sections)
    body = "\n".join(f"<p>{escape(p)}</p>" for p in paragraphs)
    popular = "".join(f'<li><a href="/p/{i}">Most read story number {i}</a></li>' for i in range(1, 6))
    return (f"<!DOCTYPE html>\n<html><head>{meta}<title>{escape(title)} | {escape(name)}</title>"
            f"<script>window.track = function () {{ return 1; }};</script></head>\n<body>\n"
            f'<header><div class="logo">{escape(name)}</div><nav><ul>{nav}</ul></nav>'
            f'<form class="search"><input name="q" placeholder="Search"></form></header>\n'
            f'<div class="cookie">We use cookies to improve your experience. <a href="/cookies">Accept</a></div>\n'
            f"<main><article><h1>{escape(title)}</h1>\n{body}\n</article></main>\n"
            f'<aside><h3>Most read</h3><ul>{popular}</ul></aside>\n'
            f'<footer><p>Copyright 2026 {escape(name)}. All rights reserved.</p><ul><li><a href="/privacy">Privacy'
            f'</a></li><li><a href="/terms">Terms</a></li><li><a href="/contact">Contact</a></li></ul></footer>\n'
            f"</body></html>\n")


def article_pages(rng: random.Random, articles: Articles, count: int) -> list[Page]:
    pages = []
    for number in range(count):
        domain = rng.choice(list(SITES))
        slug = f"{rng.choice(['news', 'stories', 'notes', 'guides'])}/{number:04d}-{rng.choice(NOUNS)}"
        pages.append(Page(f"https://{rng.choice(['', 'www.'])}{domain}/{slug}.html",
                          page_html(domain, articles.title(), articles.paragraphs())))
    return pages


def plant_pii(rng: random.Random, pages: list[Page]) -> None:
    """E-mail and IP addresses in article text: public ones (redacted) and private or example ones (kept)."""
    mentions = ["Letters to the editor go to {name}.{city}@{domain}, and we answer every one of them.",
                "The club's files are on the server at 93.184.{a}.{b}, which anyone can reach from home.",
                "Our mirror also answers at 2a03:2880:f10{a}:83:face:b00c:0:25de for those who use IPv6.",
                "The router in the reading room is at 192.168.{a}.{b} and it is not reachable from outside.",
                "For a test, write to someone@example.com and see what comes back to you.",
                "The old address was 10.0.{a}.{b} on the private network of the workshop."]
    for index, page in enumerate(pages[::7]):
        text = mentions[index % len(mentions)].format(
            name=rng.choice(NAMES).lower().encode("ascii", "ignore").decode() or "ana", city=rng.choice(CITIES).lower(),
            domain=page.url.split("/")[2].removeprefix("www."), a=rng.randint(1, 9), b=rng.randint(1, 254))
        page.html = page.html.replace("</article>", f"<p>{escape(text)}</p>\n</article>", 1)


def plant_duplicates(rng: random.Random, pages: list[Page], articles: Articles) -> list[Page]:
    """Articles republished on another site (same text, other chrome) and copies with one sentence changed."""
    copies = []
    for number, page in enumerate(rng.sample(pages, 12)):
        domain = rng.choice([site for site in SITES if site not in page.url])
        start, end = page.html.index("<article>"), page.html.index("</article>")
        inner = page.html[start + len("<article>"):end]
        if number % 3 == 2:  # a near duplicate: one sentence added
            inner = inner.replace("</p>", f" {escape(articles.sentence())}</p>", 1)
        shell = page_html(domain, "placeholder", [])
        shell_start, shell_end = shell.index("<article>"), shell.index("</article>")
        copies.append(Page(f"https://{domain}/syndicated/{number:03d}.html",
                           shell[: shell_start + len("<article>")] + inner + shell[shell_end:]))
    return copies


def blocked_pages(rng: random.Random, articles: Articles) -> list[Page]:
    urls = ["https://bestcasino-online.biz/win-big.html", "https://www.bestcasino-online.biz/bonus/today.html",
            "https://promo.free-pills.info/cheap.html", "https://eastport-makers.com/affiliate/tools.html",
            "https://juniper-travel.co.uk/xxx-deals/flights.html",
            "https://cedarvale-library.net/local-history/affiliate/the-old-casino.html"]  # the last one is allowed
    return [Page(url, page_html(url.split("/")[2].removeprefix("www.").removeprefix("promo."), articles.title(),
                                articles.paragraphs())) for url in urls]


def thin_pages(articles: Articles) -> list[Page]:
    """Pages the quality steps drop: a placeholder, a list of headlines, a page that is mostly a script notice."""
    lorem = ["Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt."] * 3
    headlines = [articles.title() for _ in range(12)]
    script = ["Please enable JavaScript to view this page.", "This site needs JavaScript.", "Loading..."]
    return [Page(f"https://eastport-makers.com/{slug}.html", page_html("eastport-makers.com", title, paragraphs))
            for slug, title, paragraphs in (("draft", "Coming soon", lorem), ("tags/all", "All tags", headlines),
                                            ("app", "Members area", script))]


def plant_evaluation(rng: random.Random, pages: list[Page], articles: Articles, out: Path) -> None:
    """Two evaluation sets; three of their items copied verbatim into articles."""
    trivia = []
    for number in range(40):
        name, noun, place, city = rng.choice(NAMES), rng.choice(NOUNS), rng.choice(PLACES), rng.choice(CITIES)
        trivia.append({"id": f"trivia-{number}",
                       "question": f"Which {noun} did {name} {rng.choice(ROOTS)} near the {place} of {city} "
                                   f"before the {rng.choice(ADJECTIVES)} festival began?",
                       "answer": f"{name} chose the {rng.choice(ADJECTIVES)} {noun} from the {place}."})
    stories = [" ".join(articles.writer.story().split()) for _ in range(30)]  # templates no article uses
    (out / "eval").mkdir(parents=True, exist_ok=True)
    (out / "eval" / "trivia.jsonl").write_text("".join(json.dumps(item) + "\n" for item in trivia))
    (out / "eval" / "stories.txt").write_text("\n".join(stories) + "\n")
    for page, text in zip(rng.sample(pages, 3), [trivia[5]["question"], trivia[17]["question"], stories[3]]):
        page.html = page.html.replace("</article>", f"<p>Remember this one: {escape(text)}</p>\n</article>", 1)


def charset_pages(articles: Articles) -> list[Page]:
    """Pages outside UTF-8: declared in the header, only in a meta tag, declared wrongly, and not declared."""
    accented = "Le café de Zoë à Montréal servait une crème brûlée que tout le monde aimait beaucoup."

    def make(meta: str | None) -> str:
        return page_html("juniper-travel.co.uk", "Notes from a café", [accented, *articles.paragraphs()],
                         meta_charset=meta)

    base = "https://juniper-travel.co.uk/guides/cafe"
    return [Page(f"{base}-header.html", make(None), "cp1252", "windows-1252"),
            Page(f"{base}-meta.html", make("iso-8859-1"), "latin-1", None),
            Page(f"{base}-wrong.html", make(None), "cp1252", "utf-8"),
            Page(f"{base}-none.html", make(None), "utf-8", None)]


def warc_record(version: str, headers: dict[str, str], block: bytes) -> bytes:
    lines = [f"WARC/{version}", *(f"{key}: {value}" for key, value in headers.items()),
             f"Content-Length: {len(block)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8") + block + b"\r\n\r\n"


def http_response(body: bytes, content_type: str) -> bytes:
    head = f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode("ascii") + body


class Archive:
    """Records of one WARC file, each its own gzip member (mtime 0, so the bytes depend on the seed alone)."""

    def __init__(self, rng: random.Random, version: str):
        self.rng, self.version, self.members = rng, version, []

    def add(self, kind: str, block: bytes, content_type: str, url: str | None = None,
            payload_type: str | None = None) -> None:
        record_id = uuid.UUID(int=self.rng.getrandbits(128), version=4)
        headers = {"WARC-Type": kind, "WARC-Record-ID": f"<urn:uuid:{record_id}>",
                   "WARC-Date": DATE.format(day=self.rng.randint(1, 28), hour=self.rng.randint(0, 23),
                                            minute=self.rng.randint(0, 59))}
        if url is not None:
            headers["WARC-Target-URI"] = url
        if payload_type is not None:  # what the crawler's own sniffing found, as Common Crawl records it
            headers["WARC-Identified-Payload-Type"] = payload_type
        headers["Content-Type"] = content_type
        self.members.append(gzip.compress(warc_record(self.version, headers, block), mtime=0))

    def page(self, page: Page) -> None:
        charset = f"; charset={page.header_charset}" if page.header_charset else ""
        self.add("request", f"GET /{page.url.split('/', 3)[-1]} HTTP/1.1\r\nHost: {page.url.split('/')[2]}\r\n\r\n"
                 .encode("ascii"), "application/http; msgtype=request", page.url)
        self.add("response", http_response(page.html.encode(page.encoding, "xmlcharrefreplace"), f"text/html{charset}"),
                 "application/http; msgtype=response", page.url, "text/html")

    def write(self, path: Path) -> None:
        path.write_bytes(b"".join(self.members))


def skipped_records(archive: Archive, orphan: bool) -> None:
    """Records a reader passes over, each counted by its kind (``orphan``: with the response that has no
    target URI, on which warcio 1.8.1 raises AttributeError)."""
    archive.add("metadata", b"fetchTimeMs: 120\r\n", "application/warc-fields", "https://eastport-makers.com/")
    archive.add("response", http_response(b"User-agent: *\nDisallow:\n", "text/plain"),
                "application/http; msgtype=response", "https://eastport-makers.com/robots.txt", "text/plain")
    archive.add("response", http_response(b"\x89PNG\r\n\x1a\n" + bytes(64), "image/png"),
                "application/http; msgtype=response", "https://eastport-makers.com/logo.png", "image/png")
    if orphan:
        archive.add("response", http_response(b"<html><body><p>An orphan page.</p></body></html>", "text/html"),
                    "application/http; msgtype=response", payload_type="text/html")  # no WARC-Target-URI
    archive.add("revisit", b"HTTP/1.1 304 Not Modified\r\n\r\n", "application/http; msgtype=response",
                "https://brightwater-gazette.org/")


def generate(out: Path, seed: int, pages: int, orphan: bool = True) -> None:
    rng = random.Random(seed)
    articles = Articles(rng)
    corpus = article_pages(rng, articles, pages)
    plant_pii(rng, corpus)
    plant_evaluation(rng, corpus, articles, out)
    corpus += plant_duplicates(rng, corpus, articles) + blocked_pages(rng, articles) + charset_pages(articles)
    corpus += thin_pages(articles)
    rng.shuffle(corpus)
    out.mkdir(parents=True, exist_ok=True)
    half = len(corpus) // 2
    for number, (version, part) in enumerate([("1.1", corpus[:half]), ("1.0", corpus[half:])]):
        archive = Archive(rng, version)
        archive.add("warcinfo", b"software: generate_web_corpus.py\r\nformat: WARC File Format\r\n",
                    "application/warc-fields")
        for page in part:
            archive.page(page)
        skipped_records(archive, orphan)
        archive.write(out / f"crawl-{number}.warc.gz")
    (out / "blocklist-domains.txt").write_text("# domains whose pages are dropped (subdomains too)\n"
                                               + "\n".join(BLOCKED_DOMAINS) + "\n")
    (out / "blocklist-words.txt").write_text("# URL substrings whose pages are dropped\n"
                                             + "\n".join(BLOCKED_WORDS) + "\n")
    (out / "allowlist.txt").write_text("# URLs (prefixes) kept whatever the blocklists say\n"
                                       + "\n".join(ALLOWED) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "web")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pages", type=int, default=240)
    parser.add_argument("--no-orphan", action="store_true", help="leave out the response without a target URI")
    args = parser.parse_args()
    generate(args.out, args.seed, args.pages, orphan=not args.no_orphan)


if __name__ == "__main__":
    main()
