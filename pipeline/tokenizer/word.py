"""The word kind: a whitespace-preserving word-level baseline, and its HF ``WordLevel`` tokenizer.json.

Text is cut into runs of whitespace and runs of everything else (``"Hello world!"`` → ``Hello``,
``" "``, ``world!``: punctuation stays attached, and joining the pieces gives the text back). The
vocabulary is the most frequent pieces of the training text; a piece outside it is ID 0, ``<unk>``,
which decodes to the literal ``<unk>``. Whitespace is Unicode's ``White_Space`` property, which the
``regex`` module and HF's Oniguruma read alike, so HF's ``Split`` pre-tokenizer gives the same pieces.

The tokenizer is a :class:`Tokenizer` without merges whose base tokens are whole pieces, so encoding,
shards, the fingerprint and the checkpoint guard work as for the BPE kinds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pipeline.errors import TokenizerError, TokenizerFormatError, counted, describe
from pipeline.tokenizer import patterns
from pipeline.tokenizer._train_count import count_chunks
from pipeline.tokenizer.core import Tokenizer
from pipeline.tokenizer.hf_json import is_id, is_text

UNKNOWN = "<unk>"
UNK_ID = 0
FORMAT_VERSION = 1


def train(
    texts: Iterable[str],
    *,
    vocab_size: int,
    pattern: str | None = None,
    special_tokens: Sequence[str] = (),
    min_frequency: int = 1,
    workers: int = 0,
    progress: bool = False,
) -> Tokenizer:
    """``<unk>``, then the most frequent pieces seen ``min_frequency`` times or more, then the special tokens.

    Ties go to the piece whose UTF-8 bytes sort first, so training is deterministic. A piece spelt like
    ``<unk>`` or a special token is left out: as plain text it is unknown (HF would read it as that token).
    """
    specials = list(special_tokens)
    room = vocab_size - 1 - len(specials)
    if room < 0:
        raise TokenizerError(f"vocab_size {vocab_size} is too small: the word kind needs at least {1 + len(specials)} "
                             f"IDs for <unk> and {counted(len(specials), 'special token')}; raise --vocab-size")
    regex_ = patterns.resolve_pattern(pattern, kind="word")
    counts = count_chunks(texts, pattern=regex_, workers=workers, progress=progress)
    reserved = {UNKNOWN, *specials}
    ranked = sorted((piece for piece, count in counts.items() if count >= min_frequency and piece not in reserved),
                    key=lambda piece: (-counts[piece], piece.encode("utf-8")))
    stop_reason = None
    if len(ranked) < room:
        stop_reason = f"only {len(ranked)} distinct pieces occur at least {min_frequency} times"
    return build(ranked[:room], pattern=regex_, special_tokens=specials, stop_reason=stop_reason)


def build(pieces: Sequence[str], *, pattern: str, special_tokens: Sequence[str] = (),
          stop_reason: str | None = None) -> Tokenizer:
    """The word tokenizer of ``pieces`` in ID order from 1 (``<unk>`` is 0, special tokens follow)."""
    tokens = {UNK_ID: UNKNOWN.encode()} | {i: piece.encode("utf-8") for i, piece in enumerate(pieces, start=1)}
    specials = {name: len(tokens) + i for i, name in enumerate(special_tokens)}
    return Tokenizer(kind="word", pattern=pattern, tokens=tokens, merges=[], special_tokens=specials,
                     unk_id=UNK_ID, stop_reason=stop_reason)


def piece_ids(tokenizer: Tokenizer) -> dict[str, int]:
    """Piece → ID for the regular tokens (not ``<unk>``, not the special tokens)."""
    specials = set(tokenizer.special_tokens.values())
    return {tokenizer.token_bytes(i).decode("utf-8"): i for i in range(tokenizer.vocab_size)
            if i != tokenizer.unk_id and i not in specials}


# ---- tokenizer.json -----------------------------------------------------------------------------


def to_hf_dict(tokenizer: Tokenizer) -> dict[str, Any]:
    """HF's ``WordLevel`` model, a ``Split`` pre-tokenizer with the same regex and a ``Fuse`` decoder."""
    vocab = {UNKNOWN: UNK_ID} | piece_ids(tokenizer)
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": token_id, "content": name, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True}
                         for name, token_id in sorted(tokenizer.special_tokens.items(), key=lambda item: item[1])],
        "normalizer": None,
        "pre_tokenizer": {"type": "Split", "pattern": {"Regex": tokenizer.pattern}, "behavior": "Isolated",
                          "invert": False},
        "post_processor": None,
        "decoder": {"type": "Fuse"},
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": UNKNOWN,
                  "lmprep": {"format_version": FORMAT_VERSION, "kind": "word"}},
    }


def from_hf_dict(data: Mapping[str, Any]) -> Tokenizer:
    """Read back what :func:`to_hf_dict` writes; any other ``WordLevel`` file is refused, naming what differs.

    The pieces, the pattern and the special tokens are read (each value type-checked first, so that no
    malformed value gets further than a one-line error), the tokenizer they make is written back as
    :func:`to_hf_dict` writes it, and the file must be that, field for field and type for type: ``0`` is not
    ``false`` (HF refuses it), and a field lmprep does not write is not silently ignored.
    """
    model = data["model"]
    meta = model.get("lmprep")
    _require(isinstance(meta, dict) and meta.get("kind") == "word" and meta.get("format_version") == FORMAT_VERSION,
             "WordLevel model without lmprep's word-kind metadata; only lmprep's own word-level files are supported")
    pieces = _pieces(model.get("vocab"))
    specials = _special_tokens(data.get("added_tokens"), first_id=len(pieces) + 1)
    clash = next((name for name in specials if name == UNKNOWN or name in set(pieces)), None)
    _require(clash is None, lambda: f"word-level special token {describe(clash)} is also a vocab piece; as plain text "
                                    "lmprep reads it as the piece, HF as the special token")
    try:
        tokenizer = build(pieces, pattern=_pattern(data.get("pre_tokenizer")), special_tokens=specials)
    except TokenizerFormatError:
        raise
    except TokenizerError as exc:
        raise TokenizerFormatError(f"word-level pre_tokenizer: {exc}") from None
    difference = _first_difference(to_hf_dict(tokenizer), data)
    _require(difference is None, lambda: f"word-level field {difference}")
    return tokenizer


def _pieces(vocab: Any) -> list[str]:
    """The vocabulary's pieces in ID order, after ``<unk>`` (ID 0); IDs must be ``0..n-1``, each used once."""
    _require(isinstance(vocab, dict) and vocab.get(UNKNOWN) == UNK_ID and is_id(vocab.get(UNKNOWN)),
             f"word-level vocab must map {UNKNOWN!r} to 0")
    by_id: dict[int, str] = {}
    for piece, token_id in vocab.items():
        if not is_id(token_id):
            raise TokenizerFormatError(f"word-level vocab piece {describe(piece)} has ID {describe(token_id)}; "
                                       "IDs are non-negative integers")
        if not is_text(piece):
            raise TokenizerFormatError(f"word-level vocab piece {describe(piece)} is not valid Unicode text")
        if token_id in by_id:
            raise TokenizerFormatError(f"word-level vocab ID {token_id} is used by {describe(by_id[token_id])} "
                                       f"and {describe(piece)}")
        by_id[token_id] = piece
    missing = next((i for i in range(len(by_id)) if i not in by_id), None)
    _require(missing is None, lambda: f"word-level vocab IDs must be 0..{len(by_id) - 1}: ID {missing} is missing")
    return [by_id[i] for i in range(1, len(by_id))]


def _pattern(pre: Any) -> str:
    """The ``Split`` regex, which must be one lmprep would write (complete: every character in some chunk)."""
    spec = pre.get("pattern") if isinstance(pre, dict) else None
    regex_ = spec.get("Regex") if isinstance(spec, dict) else None
    _require(isinstance(pre, dict) and pre.get("type") == "Split" and is_text(regex_),
             "word-level pre_tokenizer must be a Split with a Regex and behavior Isolated")
    _require(regex_ in (patterns.WORD, patterns.resolve_pattern(regex_, kind="word")),
             lambda: f"word-level Split regex {describe(regex_)} may leave text unmatched; lmprep writes patterns that "
                     r"end with '|[\s\S]'")
    return regex_


def _special_tokens(entries: Any, *, first_id: int) -> list[str]:
    """The special tokens in ID order; their IDs must follow the vocabulary's."""
    _require(isinstance(entries, list), f"word-level added_tokens {describe(entries)} is not a list")
    by_id: dict[int, str] = {}
    for entry in entries:
        name = entry.get("content") if isinstance(entry, dict) else None
        token_id = entry.get("id") if isinstance(entry, dict) else None
        if not (is_text(name) and is_id(token_id) and entry.get("special") is True):
            raise TokenizerFormatError(f"malformed or non-special added token {describe(entry)}")
        if token_id in by_id:
            raise TokenizerFormatError(f"added tokens {describe(by_id[token_id])} and {describe(name)} share ID "
                                       f"{token_id}")
        by_id[token_id] = name
    _require(sorted(by_id) == list(range(first_id, first_id + len(by_id))),
             "word-level special tokens must follow the vocab's IDs")
    names = [by_id[i] for i in sorted(by_id)]
    _require(len(set(names)) == len(names), "word-level added tokens must be distinct")
    return names


def _first_difference(expected: Any, given: Any, where: str = "") -> str | None:
    """Where ``given`` differs from ``expected`` (values and JSON types alike), as ``model.unk_token is …``."""
    if isinstance(expected, dict) and isinstance(given, dict):
        for key in sorted(expected.keys() | given.keys(), key=str):
            inner = f"{where}.{key}" if where else str(key)
            if key not in given:
                return f"{inner} is missing"
            if key not in expected:
                return f"{inner} is not one that lmprep writes"
            found = _first_difference(expected[key], given[key], inner)
            if found is not None:
                return found
        return None
    if isinstance(expected, list) and isinstance(given, list) and len(expected) == len(given):
        return next((found for index, (a, b) in enumerate(zip(expected, given))
                     if (found := _first_difference(a, b, f"{where}[{index}]")) is not None), None)
    if type(expected) is type(given) and expected == given:
        return None
    return f"{where} is {describe(given)}, not {describe(expected)}"


def _require(condition: bool, message) -> None:
    """Raise TokenizerFormatError with ``message`` (a string, or a function making one) unless ``condition``."""
    if not condition:
        raise TokenizerFormatError(message() if callable(message) else message)
