"""Document cleaning, the drop rules and the train/val split.

Cleaning is a pure function of the text, and so is the decision to drop a
document (empty, too short, too long). The split hashes each document's text
with the seed, so a document's split never depends on the other documents:
adding data never moves an existing document between train and val. Exact
de-duplication is not here: it needs the whole corpus, and prepare does it over
buckets of digests (:mod:`pipeline.data.dedup`); prepare's counts are in
:mod:`pipeline.data.accounting`.
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


def split_of(text: str, *, seed: int, val_fraction: float) -> str:
    """``"val"`` or ``"train"``, from a seeded hash of the text alone (stable as the corpus grows)."""
    key = str(seed).encode("ascii")
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8, key=key).digest()
    return "val" if int.from_bytes(digest, "big") / _SPLIT_SCALE < val_fraction else "train"
