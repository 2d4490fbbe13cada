"""tiktoken's ranks file: one ``base64(token bytes) rank`` line per regular token; ranks are our IDs.

When tiktoken gives our IDs. Our encoder (like HF's) replays merges: it
repeatedly merges the adjacent pair that *is a merge* of lowest rank, leftmost
first. tiktoken instead takes a whole chunk that is a token as that token, and
otherwise repeatedly merges the adjacent pair *whose joined bytes are a token*
of lowest rank. With ``merges [(97,98),(98,99),(97,257)]`` "abc" is
``[256, 99]`` for us and ``[258]`` for tiktoken. The export is allowed only when
all of this holds:

1. byte kind with all 256 single bytes (tiktoken has no unknown token);
2. the IDs merges make increase with merge order, so "lowest rank" picks the
   same pair in both;
3. every regular token of two or more bytes encodes alone, by our encoder, to
   itself (:meth:`Tokenizer.first_token_merges_do_not_make`);
4. a named pattern (``gpt4``, ``gpt2``, ``none``), which tiktoken's regex engine
   cuts as ours does; a custom one could differ, and tiktoken drops the text
   between matches that our split keeps.

Why 2 and 3 suffice: the two encoders differ only if, at some step, two
adjacent parts ``u``, ``v`` join to the bytes of a token ``t`` whose merge is
not ``(u, v)`` (then tiktoken may merge them and we never do). Suppose our
encoder, on some chunk, reached adjacent parts ``u``, ``v``. No merge crossed
the boundary between them, and each merge inside their span was, when made,
the lowest-ranked, leftmost pair of the whole chunk, hence of the span. So
encoding ``t``'s bytes alone makes the same merges and ends at ``[u, v]``,
since ``(u, v)`` is not a merge: against 3. Hence tiktoken's candidates are
always exactly our merges, ranked alike by 2, and both pick the same pair at
every step; a chunk that is a whole token gives ``[t]`` in both by 3.
Conversely, 3 is needed whenever the token's bytes can be a chunk. A tokenizer
lmprep trains satisfies 2 and 3: training merges each chunk as encoding does,
so every token is made, in some training chunk, out of its own bytes alone.
"""

from __future__ import annotations

import base64
import os

from pipeline.engine import atomic
from pipeline.errors import TokenizerError
from pipeline.tokenizer import patterns
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


def loading_snippet(tokenizer: Tokenizer, ranks_path: str | os.PathLike[str]) -> str:
    """Python source that builds the ``tiktoken.Encoding`` of an exported ranks file, ready to paste.

    The code parses the file itself, as ``tiktoken.load.load_tiktoken_bpe`` does, rather than calling it:
    that function caches what it reads in a directory shared by every process (``TIKTOKEN_CACHE_DIR``,
    else ``data-gym-cache`` in the temporary directory) under a key made of the path's name alone, so
    after another export to the same path it would return the old file's ranks.
    """
    name = os.path.splitext(os.path.basename(ranks_path))[0] or "lmprep"
    return (
        "import base64\n"
        "\n"
        "import tiktoken\n"
        "\n"
        "# read here, not with tiktoken.load.load_tiktoken_bpe, whose cache would keep an older file of this name\n"
        f"with open({os.fspath(ranks_path)!r}, 'rb') as ranks_file:\n"
        "    ranks = {base64.b64decode(token): int(rank) for token, rank in (line.split() for line in ranks_file)}\n"
        "encoding = tiktoken.Encoding(\n"
        f"    name={name!r},\n"
        f"    pat_str={tiktoken_pattern(tokenizer)!r},\n"
        "    mergeable_ranks=ranks,\n"
        f"    special_tokens={dict(tokenizer.special_tokens)!r},\n"
        ")\n"
        "# encoding.encode_ordinary(text) gives lmprep's IDs (special-token text stays plain text)\n"
    )


def write_ranks(tokenizer: Tokenizer, path: str | os.PathLike[str]) -> None:
    ranks = mergeable_ranks(tokenizer)
    lines = [f"{base64.b64encode(token).decode('ascii')} {rank}\n" for token, rank in ranks.items()]
    atomic.write_text(path, "".join(lines))


def _check_exportable(tokenizer: Tokenizer) -> None:
    """Raise a TokenizerError naming the first condition (and token) that tiktoken would break."""
    if tokenizer.kind != "byte":
        raise TokenizerError(
            f"tiktoken export needs a byte-level tokenizer; this one is {tokenizer.kind}-level "
            "(tiktoken has no unknown token); use the tokenizer.json instead"
        )
    if patterns.pattern_name(tokenizer.pattern) == "custom":
        raise TokenizerError(
            "tiktoken export needs a named split pattern (gpt4, gpt2 or none); this tokenizer's pattern is custom, "
            "which tiktoken's regex engine may cut differently; use the tokenizer.json instead"
        )
    results = tokenizer.merge_results
    late = next((rank for rank in range(1, len(results)) if results[rank] <= results[rank - 1]), None)
    if late is not None:
        raise TokenizerError(
            f"tiktoken export needs merges that make increasing IDs; merge #{late} makes ID {results[late]}, "
            f"not above the {results[late - 1]} of the merge before it"
        )
    token_id = tokenizer.first_token_merges_do_not_make()
    if token_id is not None:
        raise TokenizerError(
            f"tiktoken export: token {token_id} {tokenizer.render_token(token_id)} is not what the merges make of its "
            "bytes, and tiktoken would emit it where lmprep does not; use the tokenizer.json instead"
        )
