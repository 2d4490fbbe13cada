"""What prepare did, per source and per step: nothing is dropped without a number saying so.

Each partition task keeps a :class:`Tally` of the documents it read, kept and
dropped (by step and rule), per entry of ``data.sources``; the driver adds them
up into :class:`PrepareStats`, written as ``stats.json`` and shown as a table.
A source that yields nothing, keeps nothing, or whose documents are mostly
single short words (file names read from the wrong column) is a warning line
naming it, since such a source silently shrinks the corpus.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pipeline.data.documents import SPLITS
from pipeline.data.readers import unsplit_warning
from pipeline.errors import counted

NAME_LIKE_CHARS = 64
"""A document of one word shorter than this looks like a name (a file name, an ID), not text."""
NAME_LIKE_SHARE = 0.5
"""A source more than this share of whose documents look like names gets a warning."""


def looks_like_a_name(text: str) -> bool:
    return len(text) < NAME_LIKE_CHARS and len(text.split(None, 1)) == 1


@dataclass
class SourceTally:
    """One source's documents: read, kept, dropped by ``step/rule``, and their characters."""

    read: int = 0
    characters_read: int = 0
    name_like: int = 0
    kept: int = 0
    characters_kept: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    lines_removed: dict[str, int] = field(default_factory=dict)  # by a step that rewrites documents

    def add(self, other: SourceTally) -> None:
        self.read += other.read
        self.characters_read += other.characters_read
        self.name_like += other.name_like
        self.kept += other.kept
        self.characters_kept += other.characters_kept
        for mine, theirs in ((self.dropped, other.dropped), (self.lines_removed, other.lines_removed)):
            for reason, count in theirs.items():
                mine[reason] = mine.get(reason, 0) + count


@dataclass
class Tally:
    """A task's counts per source index (picklable: tasks return it to the driver)."""

    sources: dict[int, SourceTally] = field(default_factory=dict)

    def of(self, source: int) -> SourceTally:
        return self.sources.setdefault(source, SourceTally())

    def read(self, source: int, documents: int, characters: int, name_like: int) -> None:
        tally = self.of(source)
        tally.read += documents
        tally.characters_read += characters
        tally.name_like += name_like

    def drop(self, source: int, step: str, rule: str, amount: int = 1) -> None:
        if amount:
            dropped = self.of(source).dropped
            dropped[f"{step}/{rule}"] = dropped.get(f"{step}/{rule}", 0) + amount

    def remove_lines(self, source: int, step: str, removed: Mapping[str, int]) -> None:
        lines = self.of(source).lines_removed
        for rule, count in removed.items():
            lines[f"{step}/{rule}"] = lines.get(f"{step}/{rule}", 0) + count

    def keep(self, source: int, documents: int, characters: int) -> None:
        tally = self.of(source)
        tally.kept += documents
        tally.characters_kept += characters

    def add(self, other: Tally) -> None:
        for source, tally in other.sources.items():
            self.of(source).add(tally)


@dataclass
class PrepareStats:
    """What prepare did, kept as ``stats.json`` beside the prepared documents.

    ``dropped`` counts by rule (``duplicate``, ``too_short``, …) over the whole corpus; ``sources``
    gives each source's read, kept and dropped by ``step/rule``, in the order of ``data.sources``.
    """

    files: int = 0
    documents_read: int = 0
    characters_read: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    documents: dict[str, int] = field(default_factory=lambda: {"train": 0, "val": 0})
    characters: dict[str, int] = field(default_factory=lambda: {"train": 0, "val": 0})
    sources: list[tuple[str, SourceTally]] = field(default_factory=list)
    rejected: list[dict[str, Any]] = field(default_factory=list)
    unsplit: dict[str, list[str]] = field(default_factory=dict)
    """Per literal separator, the files it never occurs in (each read as one document); a warning, not a stat."""

    @property
    def documents_kept(self) -> int:
        return sum(self.documents.values())

    def count_drop(self, reason: str, amount: int = 1) -> None:
        if amount:
            self.dropped[reason] = self.dropped.get(reason, 0) + amount

    def account(self, names: list[str], tally: Tally) -> None:
        """Take each source's counts from ``tally`` (a source that yields nothing keeps a row of zeros)."""
        self.sources = [(name, tally.sources.get(index, SourceTally())) for index, name in enumerate(names)]
        for _, source in self.sources:
            for reason, count in source.dropped.items():
                self.count_drop(reason.partition("/")[2], count)

    def to_dict(self) -> dict[str, Any]:
        return {"files": self.files, "documents_read": self.documents_read,
                "documents_kept": self.documents_kept, "characters_read": self.characters_read,
                "dropped": dict(sorted(self.dropped.items())),
                "splits": {split: {"documents": self.documents[split], "characters": self.characters[split]}
                           for split in SPLITS},
                "sources": [{"source": name, "documents_read": tally.read, "characters_read": tally.characters_read,
                             "documents_kept": tally.kept, "characters_kept": tally.characters_kept,
                             "name_like": tally.name_like, "dropped": dict(sorted(tally.dropped.items())),
                             "lines_removed": dict(sorted(tally.lines_removed.items()))}
                            for name, tally in self.sources],
                "rejected": self.rejected}

    def describe_drops(self) -> str:
        """``1,289 duplicate, 4 empty``, or ``none``."""
        return ", ".join(f"{n:,} {reason}" for reason, n in sorted(self.dropped.items())) or "none"

    def summary(self) -> str:
        """A few human lines for the end of a run: totals, the table per source, then any warnings."""
        lines = [f"read {counted(self.documents_read, 'document')} ({counted(self.characters_read, 'character')}) "
                 f"from {counted(self.files, 'file')}",
                 f"dropped: {self.describe_drops()}",
                 f"kept {counted(self.documents_kept, 'document')}"]
        lines += [f"  {split}: {counted(self.documents[split], 'document')}, "
                  f"{counted(self.characters[split], 'character')}"
                  for split in SPLITS]
        lines += [source_table(self.to_dict()["sources"]), *source_warnings(self.to_dict())]
        lines += [unsplit_warning(separator, files) for separator, files in sorted(self.unsplit.items())]
        return "\n".join(lines)


def source_table(sources: list[dict[str, Any]]) -> str:
    """``stats.json``'s sources as a table: read, kept, characters kept and what each step dropped."""
    width = max([len("source"), *(len(row["source"]) for row in sources)])
    lines = [f"{'source':<{width}}  {'read':>10}  {'kept':>10}  {'chars kept':>13}  dropped (step/rule)"]
    for row in sources:
        dropped = ", ".join(f"{n:,} {reason}" for reason, n in row["dropped"].items()) or "none"
        if row.get("lines_removed"):
            dropped += "; lines removed: " + ", ".join(f"{n:,} {rule}" for rule, n in row["lines_removed"].items())
        lines.append(f"{row['source']:<{width}}  {row['documents_read']:>10,}  {row['documents_kept']:>10,}  "
                     f"{row['characters_kept']:>13,}  {dropped}")
    return "\n".join(lines)


def source_warnings(stats: dict[str, Any]) -> list[str]:
    """One line per source that yields no document, keeps none, or reads mostly names rather than text."""
    warnings = []
    for row in stats["sources"]:
        name, read = row["source"], row["documents_read"]
        if not read:
            warnings.append(f"warning: {name} yields 0 documents")
        elif not row["documents_kept"]:
            warnings.append(f"warning: {name}: 0 of its {read:,} documents kept")
        if read and row["name_like"] > NAME_LIKE_SHARE * read:
            warnings.append(f"warning: {name}: {row['name_like']:,} of its {read:,} documents are a single word "
                            f"under {NAME_LIKE_CHARS} characters, like names rather than text; is its field the "
                            "text column?")
    return warnings
