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

from pipeline.errors import TokenizerError, TokenizerFormatError
from pipeline.tokenizer import patterns
from pipeline.tokenizer._train_count import count_chunks
from pipeline.tokenizer.core import Tokenizer

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
                             f"IDs for <unk> and {len(specials)} special tokens; raise --vocab-size")
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
    """Read back what :func:`to_hf_dict` writes; any other ``WordLevel`` file is refused, naming what differs."""
    model = data["model"]
    meta = model.get("lmprep")
    _require(isinstance(meta, dict) and meta.get("kind") == "word" and meta.get("format_version") == FORMAT_VERSION,
             "WordLevel model without lmprep's word-kind metadata; only lmprep's own word-level files are supported")
    for key in ("normalizer", "post_processor", "truncation", "padding"):
        _require(data.get(key) is None, f"{key} is set; lmprep's word-level files have {key}: null")
    _require(data.get("decoder") == {"type": "Fuse"}, "word-level decoder must be Fuse")
    pre = data.get("pre_tokenizer") or {}
    _require(pre.get("type") == "Split" and pre.get("behavior") == "Isolated" and not pre.get("invert")
             and isinstance((pre.get("pattern") or {}).get("Regex"), str),
             "word-level pre_tokenizer must be a Split with a Regex and behavior Isolated")
    _require(model.get("unk_token") == UNKNOWN, f"word-level unk_token must be {UNKNOWN!r}")
    vocab = model.get("vocab")
    _require(isinstance(vocab, dict) and vocab.get(UNKNOWN) == UNK_ID, f"word-level vocab must map {UNKNOWN!r} to 0")
    order = sorted(vocab.items(), key=lambda item: item[1])
    _require([token_id for _, token_id in order] == list(range(len(order))),
             "word-level vocab IDs must be 0..n-1, each used once")
    specials = _special_tokens(data.get("added_tokens") or [])
    _require(sorted(specials.values()) == list(range(len(order), len(order) + len(specials))),
             "word-level special tokens must follow the vocab's IDs")
    return build([piece for piece, _ in order[1:]], pattern=pre["pattern"]["Regex"], special_tokens=list(specials))


def _special_tokens(entries: Any) -> dict[str, int]:
    _require(isinstance(entries, list), "added_tokens must be a list")
    specials = {}
    for entry in sorted(entries, key=lambda e: e.get("id", -1) if isinstance(e, dict) else -1):
        _require(isinstance(entry, dict) and isinstance(entry.get("content"), str) and isinstance(entry.get("id"), int)
                 and entry.get("special") is True, f"malformed or non-special added token {entry!r}")
        specials[entry["content"]] = entry["id"]
    return specials


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise TokenizerFormatError(message)
