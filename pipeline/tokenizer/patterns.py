"""The one table of pre-split patterns, and the split itself.

A pattern cuts text into chunks before BPE; merges never cross a chunk. The
named patterns are written so that Python's ``regex`` module, HF tokenizers'
Oniguruma and tiktoken's fancy-regex all cut text identically:

- ``gpt4``: the cl100k pattern as minbpe and nanochat write it (numbers in runs
  of at most three digits, possessive quantifiers). Default for the byte kind.
- ``gpt2``: the GPT-2 pattern (the one HF's ``ByteLevel(use_regex=True)`` applies).
- ``none``: no pre-split; each document is one sequence. Default for the char kind.

A custom regex is completed with ``|[\\s\\S]`` so that text it does not match
becomes one-character chunks. Chunks are cut as HF's ``Split(pattern,
"isolated")`` cuts them (:func:`isolated_split`: whole matches whatever the
groups, and the text between matches), by one function for training and
encoding alike, so every text round-trips and HF gives the same IDs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator

import regex

from pipeline.errors import TokenizerError, shorten
from pipeline.tokenizer import backend

GPT4 = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}|"""
    r""" ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+"""
)
GPT2 = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
WORD = r"\p{White_Space}+|\P{White_Space}+"  # the word kind's: runs of whitespace and runs of anything else
# Where a text may be cut so that its pieces, split apart, give exactly the chunks of the whole: a
# space after a non-space character in all three (no alternative matches a non-space followed by a
# space: spaces inside a chunk come only in whitespace runs or as its first character), and in GPT-4's
# and the word pattern also a newline followed by a non-space character (every GPT-4 chunk holding a
# newline ends with it, and its whitespace alternatives holding one are tried first; not so in GPT-2's,
# whose \s+(?!\S) looks past it). ``regex``'s \s is Unicode's White_Space, as in the patterns.
# Searched from the end (``(?r)``), for the last cut.
_CUTS = {
    GPT4: r"(?r)(?<=\S)(?= )|(?<=\n)(?=\S)",
    GPT2: r"(?r)(?<=\S)(?= )",
    WORD: r"(?r)(?<=\S)(?= )|(?<=\n)(?=\S)",
}
CUT_CHARS = 1 << 20  # held before looking for a cut
NAMED_PATTERNS: dict[str, str] = {"gpt4": GPT4, "gpt2": GPT2, "none": ""}
# The patterns the native core splits by hand, by the names of its split modes (``_native.SPLIT_MODES``).
NATIVE_SPLIT_NAMES = {GPT4: "gpt4", GPT2: "gpt2", WORD: "word", "": "none"}
DEFAULT_PATTERN_NAME = {"byte": "gpt4", "char": "none"}
_CATCH_ALL = r"|[\s\S]"


def resolve_pattern(name_or_regex: str | None, *, kind: str) -> str:
    """The regex for a pattern name (``gpt4``, ``gpt2``, ``none``), a custom regex, or ``None`` (the kind's
    default: ``gpt4`` for byte, ``none`` for char, ``WORD`` for word).

    >>> resolve_pattern("none", kind="byte")
    ''
    """
    if name_or_regex is None:
        return WORD if kind == "word" else NAMED_PATTERNS[DEFAULT_PATTERN_NAME[kind]]
    if name_or_regex in NAMED_PATTERNS:
        return NAMED_PATTERNS[name_or_regex]
    if name_or_regex in NAMED_PATTERNS.values() or name_or_regex.endswith(_CATCH_ALL):
        return compile_checked(name_or_regex).pattern
    compile_checked(name_or_regex)  # report the user's regex, not our completion of it
    return compile_checked(name_or_regex + _CATCH_ALL).pattern


def chunk_aligned(pieces: Iterable[tuple[str, bool]], pattern: str) -> Iterator[str]:
    """Texts whose chunks under ``pattern`` are those of the documents ``pieces`` make up.

    ``pieces`` are ``(text, ends_document)`` in order, as ``sources.read_document_pieces`` reads them. With a
    pattern whose cuts are known (``gpt4``, ``gpt2``, the word kind's) a document comes as texts of
    about ``CUT_CHARS`` characters or more, cut where no chunk crosses, so that nobody holds a long
    document whole (only a stretch without a cut); with any other pattern a chunk may depend on all
    of its document (``none`` makes the whole document one chunk), so each document comes whole.
    """
    cuts = compile_checked(_CUTS[pattern]) if pattern in _CUTS else None
    held: list[str] = []
    length = searched = 0  # characters held, and how many of them are known to hold no cut
    for piece, ends in pieces:
        held.append(piece)
        length += len(piece)
        if ends:
            yield "".join(held)
            held, length, searched = [], 0, 0
        elif cuts is not None and length >= CUT_CHARS:
            text = "".join(held)
            cut = cuts.search(text, max(searched - 1, 0))  # the last cut; the lookbehind needs one character before
            at = cut.start() if cut else 0
            if at:
                yield text[:at]
            held, length = [text[at:]], len(text) - at
            searched = length
    if held:
        yield "".join(held)


def pattern_name(pattern: str) -> str:
    """``gpt4``/``gpt2``/``none`` for a named pattern, ``custom`` otherwise (for display)."""
    return next((name for name, regex_ in NAMED_PATTERNS.items() if regex_ == pattern), "custom")


@functools.lru_cache(maxsize=32)
def compile_checked(pattern: str) -> regex.Pattern:
    """Compile ``pattern`` with the ``regex`` module, or raise a TokenizerError naming it."""
    try:
        return regex.compile(pattern)
    except (regex.error, TypeError, ValueError, RecursionError) as exc:
        raise TokenizerError(f"invalid split pattern {shorten(repr(pattern))}: {exc}; "
                             "use gpt4, gpt2, none or a valid regex") from None


def native_mode(pattern: str) -> int | None:
    """The native core's split mode for ``pattern`` (``""``: each text one chunk), or None where it has none:
    no native core, or a custom pattern."""
    if backend.native is None or pattern not in NATIVE_SPLIT_NAMES:
        return None
    return backend.native.SPLIT_MODES[NATIVE_SPLIT_NAMES[pattern]]


def splitter(pattern: str) -> Callable[[str], list[str]]:
    """A function cutting a text into its non-empty chunks (the whole text when ``pattern`` is empty).

    The one place text is cut into chunks, for training and encoding alike; see :func:`isolated_split`.
    """
    if not pattern:
        return lambda text: [text] if text else []
    if (mode := native_mode(pattern)) is not None:
        return functools.partial(backend.native.split, mode)
    return functools.partial(isolated_split, compile_checked(pattern))


def isolated_split(compiled: regex.Pattern, text: str) -> list[str]:
    """The chunks HF ``tokenizers`` makes with ``Split(pattern, behavior="isolated")``.

    Each whole match is a chunk (whatever groups the pattern has) and so is each stretch of text
    between matches, so no text is lost; empty chunks are dropped. Matches are found as Oniguruma's
    iterator finds them: an empty match is skipped where the previous match ended, and the search
    then moves one character on (Python's own iterator would instead retry a non-empty match there).

    >>> isolated_split(regex.compile(r"a*|b+"), "abb")
    ['a', 'b', 'b']
    """
    if not compiled.groups:  # common case: findall gives the matches; exact when none is empty and none leaves a gap
        chunks = compiled.findall(text)
        if "" not in chunks and sum(map(len, chunks)) == len(text):
            return chunks
    chunks = []
    done = position = 0
    last_end = -1
    while position <= len(text) and (match := compiled.search(text, position)):
        start, end = match.span()
        if start == end == last_end:
            position = end + 1
            continue
        chunks += [piece for piece in (text[done:start], text[start:end]) if piece]
        done = position = last_end = end
    if done < len(text):
        chunks.append(text[done:])
    return chunks
