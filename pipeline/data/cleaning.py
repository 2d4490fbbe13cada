"""Document cleaning, exact de-duplication and the train/val split.

Cleaning is a pure function of the text. De-duplication keeps a 16-byte
BLAKE2b digest per kept document — about 100 bytes of memory each in a Python
set, so 10 million documents cost ~1 GB; nothing else grows with the corpus.
The split hashes each document's text with the seed, so a document's split
never depends on the other documents: adding data never moves an existing
document between train and val.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

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


class Deduplicator:
    """Remembers digests of the documents seen; the first copy of a text is new, later ones are not."""

    def __init__(self) -> None:
        self._seen: set[bytes] = set()

    def is_new(self, text: str) -> bool:
        digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        if digest in self._seen:
            return False
        self._seen.add(digest)
        return True

    def __len__(self) -> int:
        return len(self._seen)


def split_of(text: str, *, seed: int, val_fraction: float) -> str:
    """``"val"`` or ``"train"``, from a seeded hash of the text alone (stable as the corpus grows)."""
    key = str(seed).encode("ascii")
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8, key=key).digest()
    return "val" if int.from_bytes(digest, "big") / _SPLIT_SCALE < val_fraction else "train"
