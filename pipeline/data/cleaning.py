"""Document cleaning, the drop rules, the train/val split and prepare's counts.

Cleaning is a pure function of the text, and so is the decision to drop a
document (empty, too short, too long). The split hashes each document's text
with the seed, so a document's split never depends on the other documents:
adding data never moves an existing document between train and val. Exact
de-duplication is not here: it needs the whole corpus, and prepare does it over
buckets of digests (:mod:`pipeline.data.prepare`).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any

from pipeline.data.documents import SPLITS
from pipeline.data.sources import unsplit_warning
from pipeline.errors import counted

# C0 and C1 control characters except tab and newline, plus lone surrogates
# (which JSON "\ud800" escapes can produce and UTF-8 cannot store).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
_LINE_BREAKS = re.compile("\r\n?")
_SPLIT_SCALE = float(1 << 64)


def clean_text(text: str, *, normalize: str = "NFC") -> str:
    """CRLF/CR → LF, drop control characters other than tab and newline, then Unicode-normalise.

    >>> clean_text("Cafe\\u0301\\r\\nok\\x00\\t!")
    'Café\\nok\\t!'
    """
    text = _CONTROL.sub("", _LINE_BREAKS.sub("\n", text))
    return text if normalize == "none" else unicodedata.normalize(normalize, text)


def drop_reason(text: str, *, min_chars: int, max_chars: int | None) -> str | None:
    """Why a cleaned document is dropped (``empty``, ``too_short``, ``too_long``), or None to keep it."""
    if not text.strip():
        return "empty"
    if len(text) < min_chars:
        return "too_short"
    if max_chars is not None and len(text) > max_chars:
        return "too_long"
    return None


def split_of(text: str, *, seed: int, val_fraction: float) -> str:
    """``"val"`` or ``"train"``, from a seeded hash of the text alone (stable as the corpus grows)."""
    key = str(seed).encode("ascii")
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8, key=key).digest()
    return "val" if int.from_bytes(digest, "big") / _SPLIT_SCALE < val_fraction else "train"


@dataclass
class PrepareStats:
    """What prepare did, kept as ``stats.json`` beside the prepared documents."""

    files: int = 0
    documents_read: int = 0
    characters_read: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    documents: dict[str, int] = field(default_factory=lambda: {"train": 0, "val": 0})
    characters: dict[str, int] = field(default_factory=lambda: {"train": 0, "val": 0})
    unsplit: dict[str, list[str]] = field(default_factory=dict)
    """Per literal separator, the files it never occurs in (each read as one document); a warning, not a stat."""

    @property
    def documents_kept(self) -> int:
        return sum(self.documents.values())

    def count_drop(self, reason: str, amount: int = 1) -> None:
        if amount:
            self.dropped[reason] = self.dropped.get(reason, 0) + amount

    def to_dict(self) -> dict[str, Any]:
        return {"files": self.files, "documents_read": self.documents_read,
                "documents_kept": self.documents_kept, "characters_read": self.characters_read,
                "dropped": dict(sorted(self.dropped.items())),
                "splits": {split: {"documents": self.documents[split], "characters": self.characters[split]}
                           for split in SPLITS}}

    def describe_drops(self) -> str:
        """``1,289 duplicate, 4 empty``, or ``none``."""
        return ", ".join(f"{n:,} {reason}" for reason, n in sorted(self.dropped.items())) or "none"

    def summary(self) -> str:
        """A few human lines for the end of a run."""
        lines = [f"read {counted(self.documents_read, 'document')} ({counted(self.characters_read, 'character')}) "
                 f"from {counted(self.files, 'file')}",
                 f"dropped: {self.describe_drops()}",
                 f"kept {counted(self.documents_kept, 'document')}"]
        lines += [f"  {split}: {counted(self.documents[split], 'document')}, "
                  f"{counted(self.characters[split], 'character')}"
                  for split in SPLITS]
        lines += [unsplit_warning(separator, files) for separator, files in sorted(self.unsplit.items())]
        return "\n".join(lines)

