"""The web steps of prepare's chain, each an entry of :mod:`pipeline.data.registry` (docs/web.md):

- ``html_extract``: a page's main text in place of its HTML (rules ``too_large``, ``no_text``);
- ``url_filter``: drops pages whose ``url`` a blocklist names (rules ``blocked_domain``, ``blocked_word``), the
  entry that matched in the ``url_match`` metadata (an allow-list's too, for the pages it saved);
- ``pii``: e-mail and public IP addresses replaced; never drops, counts the lines and characters it changed
  (in the per-source table's rewrites column: ``pii/lines_redacted``, ``pii/characters_redacted``);
- ``decontaminate``: drops a document that shares an n-gram with an evaluation set (rule
  ``overlap:<set>``), or cuts the overlapping words out (``mode: remove_span``); ``eval_overlap`` says
  which sets and how many n-grams.

Files the steps read (lists, evaluation sets) are relative to the config's directory, and their contents are
part of prepare's fingerprint: editing a blocklist re-runs prepare.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Literal

from pipeline.config.schema import bounded
from pipeline.data.record import KEEP, Answer, Document, Drop, FilterStep, MetadataField, Rewrite
from pipeline.data.web.decontam import DEFAULT_N, Decontaminator, EvalSet, load_eval_sets
from pipeline.data.web.extract import MAX_HTML_BYTES, main_text
from pipeline.data.web.pii import Redactor
from pipeline.data.web.urls import DOMAINS, UrlFilter, read_list
from pipeline.errors import ConfigError


class FileStep(FilterStep):
    """A step whose settings name files relative to the config's directory (``root``), built once per process."""

    reads_files = True

    def __init__(self, settings: Any, *, root: str = ".", key: str = ""):
        super().__init__(settings)
        self.root, self.key = root, key
        self._built: Any = None

    @property
    def code_files(self) -> tuple[str, ...]:
        """The files whose contents the step depends on (prepare's fingerprint hashes them)."""
        return tuple(self.path(name) for name in self.files())

    def files(self) -> tuple[str, ...]:
        raise NotImplementedError

    def path(self, name: str) -> str:
        return os.path.abspath(os.path.join(self.root, name))

    def build(self) -> Any:
        raise NotImplementedError

    def load(self) -> None:
        """Read the files now (the driver does, so that a missing or empty one fails before any task)."""
        self._built = self.build()

    def built(self) -> Any:
        if self._built is None:
            self.load()
        return self._built

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_built": None}  # each worker reads the files itself


# -- html_extract ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HtmlExtractStep:
    """The main text of each HTML document (resiliparse, main content); pages over ``max_chars`` are dropped
    unparsed."""

    max_chars: int = bounded(MAX_HTML_BYTES, low=1)


class HtmlExtract(FilterStep):
    name = "html_extract"
    Settings = HtmlExtractStep
    rewrites = True

    def apply(self, document: Document) -> Answer:
        if len(document.text) > self.settings.max_chars:
            return Drop("too_large")
        text = main_text(document.text)
        return Rewrite(text) if text else Drop("no_text")


# -- url_filter -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class UrlFilterStep:
    """Blocklists of domains (subdomains match) and of URL substrings, and an allow-list that overrides them:
    files of one entry a line, ``#`` comments. At least one blocklist."""

    domains: str | None = None
    words: str | None = None
    allow: str | None = None

    def problem(self) -> str | None:
        return None if self.domains or self.words else "needs a blocklist: set domains:, words: or both"


class UrlFiltering(FileStep):
    name = "url_filter"
    Settings = UrlFilterStep
    metadata = (MetadataField("url_match"),)

    def __init__(self, settings: UrlFilterStep, *, root: str = ".", key: str = "url_filter"):
        super().__init__(settings, root=root, key=key)
        self.inherited: frozenset[str] = frozenset()  # fields the sources and earlier steps set (the chain sets it)

    def files(self) -> tuple[str, ...]:
        return tuple(name for name in (self.settings.domains, self.settings.words, self.settings.allow) if name)

    def build(self) -> UrlFilter:
        if "url" not in self.inherited:
            raise ConfigError(f"{self.key} reads each document's url: keep it on the web sources "
                              "(data.sources[i].metadata: [url]) and give the step only: those sources")
        lists = {}
        for option, what in (("domains", "domain blocklist"), ("words", "URL-word blocklist"), ("allow", "allow-list")):
            name = getattr(self.settings, option)
            lists[option] = read_list(self.path(name), what=f"{what} of {self.key}") if name else ()
        return UrlFilter(**lists)

    def apply(self, document: Document) -> Answer:
        url = document.metadata.get("url", "")
        if not url:
            return Drop("no_url")
        decision = self.built().decide(url)
        if decision.list is not None:
            document.metadata["url_match"] = f"{decision.list}:{decision.entry}"
        if decision.keep:
            return KEEP
        return Drop("blocked_domain" if decision.list == DOMAINS else "blocked_word")


# -- pii ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PiiStep:
    """E-mail and IP addresses replaced by placeholders (datatrove's); private and example ones kept."""

    emails: bool = True
    ips: bool = True
    ipv6: bool = True
    public_ips_only: bool = True
    keep_example_emails: bool = True


class Pii(FilterStep):
    name = "pii"
    Settings = PiiStep
    rewrites = True

    def __init__(self, settings: PiiStep):
        super().__init__(settings)
        self.redactor = Redactor(emails=settings.emails, ips=settings.ips, ipv6=settings.ipv6,
                                 public_ips_only=settings.public_ips_only,
                                 keep_example_emails=settings.keep_example_emails)

    def apply(self, document: Document) -> Answer:
        redaction = self.redactor.redact(document.text)
        if not redaction.lines:
            return KEEP
        return Rewrite(redaction.text, {"lines_redacted": redaction.lines,
                                        "characters_redacted": redaction.characters})


# -- decontaminate --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DecontaminateStep:
    """Documents sharing an ``n``-word sequence with an evaluation set are dropped (``mode: drop``) or lose the
    overlapping words (``remove_span``). ``sets``: files (.jsonl, .parquet, .txt), each named by its file name
    without extensions, or ``name=path``; ``fields``: the fields of a .jsonl/.parquet item that hold its text
    (empty: every string field)."""

    sets: tuple[str, ...] = ()
    n: int = bounded(DEFAULT_N, low=1)
    mode: Literal["drop", "remove_span"] = "drop"
    fields: tuple[str, ...] = ()

    def problem(self) -> str | None:
        return None if self.sets else "needs sets: the evaluation files to check against"

    def named(self) -> list[tuple[str, str]]:
        return [(entry.partition("=")[0], entry.partition("=")[2]) if "=" in entry
                else (os.path.basename(entry).split(".")[0], entry) for entry in self.sets]


class Decontaminate(FileStep):
    name = "decontaminate"
    Settings = DecontaminateStep
    metadata = (MetadataField("eval_overlap"),)
    rewrites = True

    def files(self) -> tuple[str, ...]:
        return tuple(path for _, path in self.settings.named())

    def build(self) -> Decontaminator:
        sets = [EvalSet(eval_set.name, self.path(str(eval_set.path)), self.settings.fields)
                for eval_set in load_eval_sets(self.settings.named())]
        return Decontaminator(sets, n=self.settings.n, mode=self.settings.mode)

    def apply(self, document: Document) -> Answer:
        verdict = self.built().check(document.id, document.text)
        if not verdict.matches:
            return KEEP
        document.metadata["eval_overlap"] = ",".join(f"{name}:{count}" for name, count in verdict.matches.items())
        rule = "overlap:" + "+".join(verdict.matches)
        if verdict.text is None or not verdict.text.strip():  # dropped, or nothing left once cut
            return Drop(rule)
        return Rewrite(verdict.text, {rule: 1})
