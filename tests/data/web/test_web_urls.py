"""The URL filter: domains with their subdomains, URL substrings, the allow-list, list files."""

from __future__ import annotations

import pytest

from pipeline.data.web.urls import UrlDecision, UrlFilter, read_list
from pipeline.errors import DataError


@pytest.fixture
def url_filter():
    return UrlFilter(domains=["casino.biz", "https://www.Pills.info/whatever", "*.spam.net"],
                     words=["/affiliate/", "xxx"], allow=["good.casino.biz", "library.org/casino-history/"])


@pytest.mark.parametrize(("url", "decision"), [
    ("https://casino.biz/", UrlDecision(False, "domains", "casino.biz")),
    ("http://a.b.casino.biz:8080/x", UrlDecision(False, "domains", "casino.biz")),
    ("https://notcasino.biz/", UrlDecision(True)),
    ("https://WWW.PILLS.INFO/buy", UrlDecision(False, "domains", "www.pills.info")),
    ("https://pills.info/buy", UrlDecision(True)),  # the entry was www.pills.info: its parent is not blocked
    ("https://x.spam.net/", UrlDecision(False, "domains", "spam.net")),
    ("https://shop.org/affiliate/tools", UrlDecision(False, "words", "/affiliate/")),
    ("https://shop.org/XXX-deals", UrlDecision(False, "words", "xxx")),
    ("https://good.casino.biz/page", UrlDecision(True, "allow", "good.casino.biz")),
    ("https://library.org/casino-history/affiliate/x", UrlDecision(True, "allow", "library.org/casino-history/")),
    ("https://[::1/broken", UrlDecision(True)),  # no host can be read: substrings still apply
    ("https://[::1/xxx", UrlDecision(False, "words", "xxx")),
])
def test_decisions_name_the_list_and_entry(url_filter, url, decision):
    assert url_filter.decide(url) == decision


def test_the_rule_of_a_dropped_url():
    assert UrlDecision(False, "domains", "casino.biz").rule == "url_domains:casino.biz"
    assert UrlDecision(True, "allow", "x.org").rule is None


def test_an_empty_filter_keeps_everything():
    assert UrlFilter().decide("https://anything.example/") == UrlDecision(True)


def test_the_longest_substring_is_named():
    assert UrlFilter(words=["ads", "ads/tracker"]).decide("https://x.org/ads/tracker").entry == "ads/tracker"


def test_list_files_skip_comments_and_blank_lines(tmp_path):
    path = tmp_path / "domains.txt"
    path.write_text("# a comment\n\nCasino.biz  # trailing comment\n  pills.info\n#spam.net\n")
    assert read_list(path, what="domain blocklist") == ["casino.biz", "pills.info"]


def test_an_empty_or_missing_list_is_refused_in_one_line(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("# nothing here\n\n")
    with pytest.raises(DataError, match=r"empty\.txt: the domain blocklist has no entries"):
        read_list(empty, what="domain blocklist")
    with pytest.raises(DataError, match=r"missing\.txt: the allow-list does not exist$"):
        read_list(tmp_path / "missing.txt", what="allow-list")
