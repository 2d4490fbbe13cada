"""tiktoken's ranks file: one ``base64(token bytes) rank`` line per regular token.

tiktoken merges the adjacent pair whose joined bytes have the lowest rank, so
the ranks are our IDs and every merge must make a larger ID than the one before
(true of every tokenizer lmprep trains). Build the encoding with
``tiktoken.Encoding(name, pat_str=tiktoken_pattern(tokenizer), mergeable_ranks=...,
special_tokens=tokenizer.special_tokens)``.
"""

from __future__ import annotations

import base64
import os

from pipeline import atomic
from pipeline.errors import TokenizerError
from pipeline.tokenizer.core import Tokenizer


WHOLE_TEXT = r"[\s\S]+"


def tiktoken_pattern(tokenizer: Tokenizer) -> str:
    """The ``pat_str`` for tiktoken: our pattern, or one match per text for pattern ``none``
    (tiktoken cannot run an empty pattern)."""
    return tokenizer.pattern or WHOLE_TEXT


def mergeable_ranks(tokenizer: Tokenizer) -> dict[bytes, int]:
    """Token bytes → rank (= ID) of every regular token, as ``tiktoken.Encoding`` takes them."""
    _check_exportable(tokenizer)
    specials = set(tokenizer.special_tokens.values())
    return {tokenizer.token_bytes(i): i for i in range(tokenizer.vocab_size) if i not in specials}


def write_ranks(tokenizer: Tokenizer, path: str | os.PathLike[str]) -> None:
    ranks = mergeable_ranks(tokenizer)
    lines = [f"{base64.b64encode(token).decode('ascii')} {rank}\n" for token, rank in ranks.items()]
    atomic.write_text(path, "".join(lines))


def _check_exportable(tokenizer: Tokenizer) -> None:
    if tokenizer.kind != "byte":
        raise TokenizerError(
            f"tiktoken export needs a byte-level tokenizer; this one is {tokenizer.kind}-level "
            "(tiktoken has no unknown token); use the tokenizer.json instead"
        )
    results = tokenizer.merge_results
    if any(later <= earlier for earlier, later in zip(results, results[1:])):
        raise TokenizerError("tiktoken export needs merges that make increasing IDs; this tokenizer's do not")
