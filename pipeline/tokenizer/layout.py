"""The trainer's ID layout: which IDs come before the first merge (the one place of the base-ID rule).

Byte kind: IDs 0–255 are the byte values. Char kind: ID 0 is the unknown token, then one ID per
character of the alphabet (code-point order). Merges follow, then the special tokens.
"""

from __future__ import annotations

BYTE_IDS = 256
UNKNOWN_ID = 0  # the char kind's


def base_id_count(kind: str, alphabet_size: int = 0) -> int:
    """How many IDs precede the first merge of a ``kind`` tokenizer whose alphabet has ``alphabet_size``
    characters (the char kind's alphabet is known only after counting: 0 gives the floor, the unknown token)."""
    return BYTE_IDS if kind == "byte" else UNKNOWN_ID + 1 + alphabet_size
