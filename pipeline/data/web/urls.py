"""The URL filter: blocklists of domains and of URL substrings, and an allow-list that overrides both.

Lists are files of one entry per line; blank lines and ``#`` comments (a whole line, or from `` #`` on)
are ignored. A domain entry matches its domain and every subdomain (``casino.biz`` blocks
``www.casino.biz`` and ``a.b.casino.biz``, never ``notcasino.biz``), looked up label by label in a set,
so the cost of a URL does not grow with the list. A substring entry matches anywhere in the lower-cased
URL. An allow-list entry is a domain, or, when it holds a ``/``, a substring. Every decision names the
list and the entry that made it, so a dropped page says why.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from pipeline.errors import DataError

ALLOW, DOMAINS, WORDS = "allow", "domains", "words"
"""The names a decision gives its list: the allow-list, the domain blocklist, the URL-substring blocklist."""


@dataclass(frozen=True)
class UrlDecision:
    """Whether a URL is kept, and the list (``allow``, ``domains``, ``words``) and entry that decided;
    both None for a URL no list names."""

    keep: bool
    list: str | None = None
    entry: str | None = None

    @property
    def rule(self) -> str | None:
        """How a dropped document's rule reads: ``url_domains:casino.biz``; None for a kept one."""
        return None if self.keep else f"url_{self.list}:{self.entry}"


def read_list(path: str | os.PathLike[str], *, what: str) -> list[str]:
    """The entries of a list file, lower-cased, in file order; a missing file, or one with no entry, is an
    error naming it (an empty blocklist filters nothing, which is never what a recipe means)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataError(f"{path}: the {what} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: the {what} cannot be read ({exc})") from None
    entries = [line.split(" #", 1)[0].strip().lower() for line in text.splitlines()]
    entries = [entry for entry in entries if entry and not entry.startswith("#")]
    if not entries:
        raise DataError(f"{path}: the {what} has no entries (only blank lines and comments); "
                        "list one entry per line, or leave the setting out")
    return entries


def normal_domain(entry: str) -> str:
    """A domain entry as it is looked up: lower case, without scheme, path, port or leading ``*.`` or ``.``
    (``https://www.X.org/path`` is ``www.x.org``, ``*.x.org`` is ``x.org``)."""
    entry = entry.lower().split("://", 1)[-1].split("/", 1)[0].split(":", 1)[0]
    return entry.removeprefix("*.").strip(".")


class UrlFilter:
    """Decides URLs against the lists given (each may be empty: nothing blocked or allowed by it)."""

    def __init__(self, *, domains: Iterable[str] = (), words: Iterable[str] = (), allow: Iterable[str] = ()):
        allow = list(allow)
        self.domains = {normal_domain(entry) for entry in domains}
        self.allow_domains = {normal_domain(entry) for entry in allow if "/" not in entry}
        self.words = _substrings(words)
        self.allow_words = _substrings(entry for entry in allow if "/" in entry)

    def decide(self, url: str) -> UrlDecision:
        lowered = url.lower()
        host = _host(lowered)
        allowed = _domain_match(host, self.allow_domains) or _substring_match(lowered, self.allow_words)
        if allowed:
            return UrlDecision(True, ALLOW, allowed)
        for name, entry in ((DOMAINS, _domain_match(host, self.domains)), (WORDS, _substring_match(lowered,
                                                                                                      self.words))):
            if entry:
                return UrlDecision(False, name, entry)
        return UrlDecision(True)


def _host(url: str) -> str:
    try:
        return urlsplit(url if "://" in url else "//" + url).hostname or ""
    except ValueError:  # a malformed IPv6 literal: no host to look up, substrings still match
        return ""


def _domain_match(host: str, domains: set[str]) -> str | None:
    """The entry of ``domains`` that is ``host`` or a parent domain of it (the longest), or None."""
    labels = host.split(".")
    for start in range(len(labels)):
        candidate = ".".join(labels[start:])
        if candidate in domains:
            return candidate
    return None


def _substrings(entries: Iterable[str]) -> re.Pattern[str] | None:
    """One alternation of the entries, longest first (so the entry named is the most specific one)."""
    unique = sorted({entry.lower() for entry in entries}, key=lambda entry: (-len(entry), entry))
    return re.compile("|".join(map(re.escape, unique))) if unique else None


def _substring_match(url: str, pattern: re.Pattern[str] | None) -> str | None:
    found = pattern.search(url) if pattern else None
    return found.group(0) if found else None
