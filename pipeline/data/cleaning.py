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
import os
import re
import unicodedata
from collections.abc import Iterator
from pathlib import Path

from pipeline.engine import locations

SPLITS = ("train", "val")

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


def split_dir(directory: str | os.PathLike[str], split: str) -> Path | str:
    """Where a prepared directory keeps the parts of ``split`` (one of :data:`SPLITS`)."""
    return locations.join(directory, split)


# The last character of a text before which it can be cut, each side then cleaning alone to the same text: a
# starter that no composition takes as its second character and that cleaning keeps (printable ASCII, tab,
# a newline that does not end a CRLF, CR, kana, CJK ideographs, Hangul syllables).
_LAST_CUT = re.compile("(?s).*(?:[\t\r -~\u3041-\u3096\u30a1-\u30fa\u4e00-\u9fff\uac00-\ud7a3]|(?<!\r)\n)")
# No character composes from more than four (U+1F82 is α with three marks), so cleaning leaves at least a
# quarter of a text's characters once its line breaks and control characters are gone.
_MOST_COMPOSED = 4


def clean_bounded(pieces: Iterator[str], *, normalize: str, max_chars: int) -> str:
    """:func:`clean_text` of the pieces joined, or, as soon as that is certain to be longer than ``max_chars``,
    its first ``max_chars + 1`` characters (which the length rule drops as ``too_long``): no further piece is
    taken then, so a document of any length costs about ``max_chars`` characters held.

    The pieces are cleaned as they come, up to the last place where a text can be cut (:data:`_LAST_CUT`);
    what follows it waits for the next piece. That rest alone decides the length once it must clean to more
    characters than remain and one more (its last character may still compose with what follows). A text
    with no place to cut, such as a long run of combining marks, is held until then: at most about four
    times ``max_chars``.
    """
    kept: list[str] = []
    length, rest = 0, ""
    for piece in pieces:
        searched, rest = len(rest), rest + piece
        found = _LAST_CUT.match(rest, max(searched, 1))
        if found:
            cut = found.end() - 1
            kept.append(clean_text(rest[:cut], normalize=normalize))
            length, rest = length + len(kept[-1]), rest[cut:]
        if length > max_chars or _cleans_longer(rest, max_chars - length + 1):
            break
    kept.append(clean_text(rest, normalize=normalize))
    text = "".join(kept)
    return text[:max_chars + 1] if len(text) > max_chars else text


def _cleans_longer(text: str, limit: int) -> bool:
    """Whether ``text`` cleans to more than ``limit`` characters whatever follows it."""
    if len(text) <= _MOST_COMPOSED * limit:
        return False
    return len(_CONTROL.sub("", _LINE_BREAKS.sub("\n", text))) > _MOST_COMPOSED * limit
