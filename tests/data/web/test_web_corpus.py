"""The shipped web corpus is what data/generate_web_corpus.py writes, byte for byte, and holds what it plants."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from pipeline.data.web.decontam import Decontaminator, load_eval_sets
from pipeline.data.web.extract import extract
from pipeline.data.web.pii import Redactor
from pipeline.data.web.urls import UrlFilter, read_list
from pipeline.data.web.warc import Skipped, read_pages

ROOT = Path(__file__).resolve().parents[3]
WEB = ROOT / "data" / "web"


def test_the_generator_writes_the_shipped_files(tmp_path):
    subprocess.run([sys.executable, str(ROOT / "data" / "generate_web_corpus.py"), "--out", str(tmp_path)], check=True)
    shipped = sorted(path.relative_to(WEB) for path in WEB.rglob("*") if path.is_file())
    assert shipped == sorted(path.relative_to(tmp_path) for path in tmp_path.rglob("*") if path.is_file())
    for relative in shipped:
        assert (tmp_path / relative).read_bytes() == (WEB / relative).read_bytes(), relative


def test_the_planted_cases_are_found():
    pages = []
    for path in sorted(WEB.glob("*.warc.gz")):
        with path.open("rb") as stream:
            pages += list(read_pages(stream, name=path.name, skipped=Skipped()))
    url_filter = UrlFilter(domains=read_list(WEB / "blocklist-domains.txt", what="domain blocklist"),
                           words=read_list(WEB / "blocklist-words.txt", what="word blocklist"),
                           allow=read_list(WEB / "allowlist.txt", what="allow-list"))
    decisions = [url_filter.decide(page.url) for page in pages]
    assert sum(not decision.keep for decision in decisions) == 5
    assert sum(decision.list == "allow" for decision in decisions) == 1
    texts = [extract(page.html, page.charset).text for page in pages]
    assert len(texts) - len(set(texts)) >= 8  # republished articles: the same text at another URL
    assert sum(Redactor().redact(text).lines > 0 for text in texts) >= 15
    decontaminator = Decontaminator(load_eval_sets([("trivia", WEB / "eval" / "trivia.jsonl"),
                                                    ("stories", WEB / "eval" / "stories.txt")]))
    hits = [decontaminator.check(page.url, text).matches for page, text in zip(pages, texts)]
    assert {name: sum(name in hit for hit in hits) for name in ("trivia", "stories")} == {"trivia": 2, "stories": 1}
