"""The layout the native merge loop (``_native.PairMerger``) reads: the symbols of every distinct chunk in one array.

Symbols: token id ``i`` is the code point ``symbol_of(i)``, which is ``i`` itself below U+D800 and
skips the surrogate block U+D800..U+DFFF above it, so symbols can pass through str and the UTF-32
codec on their way in (the char kind), and the last code point U+10FFFF, the separator, is never one.
The mapping keeps order, so every comparison of symbols is the comparison of their ids.

Layout: the symbols of all distinct chunks lie in one int32 array, each chunk between separators, and one
count per chunk beside it (``_native_train.h`` reads it; ``ChunkCounter.pop_byte_layout`` writes the byte
kind's straight from its counts).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

SEPARATOR_ID = 0x10FFFF  # the last code point: sits between chunks, never a token's symbol
_SURROGATES_START = 0xD800
_SURROGATES = 0x800
MAX_ID = SEPARATOR_ID - 1 - _SURROGATES  # 1,112,062: its symbol is U+10FFFE, the last below the separator


def symbol_of(token_id: int) -> int:
    """The code point that stands for ``token_id`` in the symbol array."""
    return token_id if token_id < _SURROGATES_START else token_id + _SURROGATES


def utf8_symbols(chunks: Sequence[str]) -> np.ndarray:
    """The UTF-8 bytes of all chunks, each chunk between separators, as one int32 symbol array.

    Chunks are joined by byte 0xFF, which never occurs in UTF-8, so the separators are exact.
    """
    data = np.frombuffer(b"\xff" + b"\xff".join(map(str.encode, chunks)) + b"\xff", dtype=np.uint8)
    symbols = data.astype(np.int32)
    symbols[data == 0xFF] = SEPARATOR_ID
    return symbols


def code_point_symbols(words: Sequence[str]) -> np.ndarray:
    """Chunks already written in symbols (one character each), joined into one int32 symbol array."""
    separator = chr(SEPARATOR_ID)
    joined = separator + separator.join(words) + separator
    return np.frombuffer(joined.encode("utf-32-le"), dtype=np.uint32).astype(np.int32)
