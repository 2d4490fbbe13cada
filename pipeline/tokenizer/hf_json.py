"""``tokenizer.json`` in Hugging Face ``tokenizers`` format: writer and validating reader.

Byte kind: ``Sequence[Split(pattern, Isolated), ByteLevel(use_regex=False)]`` pre-tokenizer,
a BPE model whose vocabulary keys are bytes spelt with GPT-2's byte→unicode
table, a ByteLevel decoder, and special tokens as ``added_tokens``.
Char kind: a BPE model whose ``unk_token`` is ID 0 (``fuse_unk`` off, so each
unknown character is one ID), a ``Split`` pre-tokenizer unless the pattern is
``none``, and a ``Fuse`` decoder.

What the format cannot say (the kind, the alphabet, ``merge_newlines``, our
format version) goes under ``model.lmprep``: HF's BPE reader ignores unknown
model fields, while an unknown top-level key makes it refuse the file.

HF turns special-token strings in the text into their IDs on every ``encode``;
ours does so only with ``allowed_special``. On text without them the IDs agree.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping
from typing import Any

from pipeline import atomic
from pipeline.errors import TokenizerFormatError
from pipeline.tokenizer import patterns
from pipeline.tokenizer.core import UNKNOWN_TEXT, Tokenizer

FORMAT_VERSION = 1
_IDS_ONLY_POST_PROCESSORS = (None, "ByteLevel")  # ByteLevel only trims offsets; IDs are unchanged
_DECODERS = (None, "ByteLevel", "Fuse")


@functools.cache
def byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from the 256 bytes to printable characters."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    mapping = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


@functools.cache
def unicode_to_byte() -> dict[str, int]:
    return {char: b for b, char in byte_to_unicode().items()}


# ---- writing ------------------------------------------------------------------------------------


def save(tokenizer: Tokenizer, path: str | os.PathLike[str]) -> None:
    atomic.write_json(path, to_dict(tokenizer))


def to_dict(tokenizer: Tokenizer) -> dict[str, Any]:
    if tokenizer.kind == "word":
        from pipeline.tokenizer import word

        return word.to_hf_dict(tokenizer)
    spell = _byte_speller() if tokenizer.kind == "byte" else _char_speller(tokenizer)
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [_added_token(name, token_id) for name, token_id in
                         sorted(tokenizer.special_tokens.items(), key=lambda item: item[1])],
        "normalizer": None,
        "pre_tokenizer": _pre_tokenizer_dict(tokenizer),
        "post_processor": None,
        "decoder": _decoder_dict(tokenizer.kind),
        "model": _model_dict(tokenizer, spell),
    }


def _byte_speller():
    table = byte_to_unicode()
    return lambda data: "".join(table[b] for b in data)


def _char_speller(tokenizer: Tokenizer):
    unk = unknown_token_text(tokenizer.alphabet)
    return lambda data: data.decode("utf-8") if data != b"" else unk


def unknown_token_text(alphabet: list[str]) -> str:
    """U+FFFD names the unknown token unless it is a training character; then a private-use one does."""
    taken = set(alphabet)
    return next(c for c in (UNKNOWN_TEXT, *map(chr, range(0xE000, 0xF900))) if c not in taken)


def _added_token(name: str, token_id: int) -> dict[str, Any]:
    return {"id": token_id, "content": name, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": True}


def _pre_tokenizer_dict(tokenizer: Tokenizer) -> dict[str, Any] | None:
    steps = []
    if tokenizer.pattern:
        steps.append({"type": "Split", "pattern": {"Regex": tokenizer.pattern}, "behavior": "Isolated",
                      "invert": False})
    if tokenizer.kind == "byte":
        steps.append({"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False})
    if not steps:
        return None
    return steps[0] if len(steps) == 1 else {"type": "Sequence", "pretokenizers": steps}


def _decoder_dict(kind: str) -> dict[str, Any]:
    if kind == "byte":
        return {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
    return {"type": "Fuse"}


def _model_dict(tokenizer: Tokenizer, spell) -> dict[str, Any]:
    specials = set(tokenizer.special_tokens.values())
    regular = [i for i in range(tokenizer.vocab_size) if i not in specials]
    names = {i: spell(b"" if i == tokenizer.unk_id else tokenizer.token_bytes(i)) for i in regular}
    return {
        "type": "BPE",
        "dropout": None,
        "unk_token": names[tokenizer.unk_id] if tokenizer.unk_id is not None else None,
        "continuing_subword_prefix": None,
        "end_of_word_suffix": None,
        "fuse_unk": False,
        "byte_fallback": False,
        "ignore_merges": False,
        "vocab": {names[i]: i for i in regular},
        "merges": [[names[a], names[b]] for a, b in tokenizer.merges],
        "lmprep": _metadata(tokenizer),
    }


def _metadata(tokenizer: Tokenizer) -> dict[str, Any]:
    meta = {"format_version": FORMAT_VERSION, "kind": tokenizer.kind, "merge_newlines": tokenizer.merge_newlines}
    if tokenizer.kind == "char":
        meta |= {"alphabet": tokenizer.alphabet, "unk_id": tokenizer.unk_id}
    return meta


# ---- reading ------------------------------------------------------------------------------------


def load(path: str | os.PathLike[str]) -> Tokenizer:
    try:
        text = open(path, encoding="utf-8").read()
    except FileNotFoundError:
        raise TokenizerFormatError(f"tokenizer file {os.fspath(path)} does not exist; train one first") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TokenizerFormatError(f"cannot read tokenizer file {os.fspath(path)}: {exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TokenizerFormatError(f"{os.fspath(path)} is not valid JSON: {exc}") from None
    try:
        return from_dict(data)
    except TokenizerFormatError as exc:
        raise TokenizerFormatError(f"{os.fspath(path)}: {exc}") from None


def from_dict(data: Any) -> Tokenizer:
    """Validate a parsed tokenizer.json and build the Tokenizer it describes."""
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        raise TokenizerFormatError("not a tokenizer.json: no 'model' object")
    if data["model"].get("type") == "WordLevel":
        from pipeline.tokenizer import word

        return word.from_hf_dict(data)
    _check_supported(data)
    model = data["model"]
    meta = model.get("lmprep") or {}
    pattern, byte_level = _read_pre_tokenizer(data.get("pre_tokenizer"))
    kind = meta.get("kind") or ("byte" if byte_level else None)
    if kind not in ("byte", "char") or (kind == "byte") != byte_level:
        raise TokenizerFormatError(
            "BPE model without a ByteLevel pre-tokenizer and without lmprep metadata; "
            "only byte-level BPE files and lmprep's own char-level files are supported"
        )
    specials = _read_added_tokens(data.get("added_tokens") or [])
    vocab = _read_vocab(model, special_ids=set(specials.values()))
    tokens, unk_id = _decode_vocab(vocab, kind=kind, unk_token=model.get("unk_token"))
    merges = _read_merges(model.get("merges"), vocab)
    return Tokenizer(kind=kind, pattern=pattern, tokens=tokens, merges=merges, special_tokens=specials,
                     unk_id=unk_id, merge_newlines=bool(meta.get("merge_newlines", True)))


def _check_supported(data: Mapping[str, Any]) -> None:
    """Refuse components that would make HF's IDs differ from what we compute."""
    model = data["model"]
    _require(model.get("type") == "BPE", f"model type {model.get('type')!r} is not supported (only BPE)")
    _require(_type_of(data.get("normalizer")) is None,
             f"normalizer {_type_of(data.get('normalizer'))!r} is not supported; lmprep normalizes text in prepare")
    _require(_type_of(data.get("post_processor")) in _IDS_ONLY_POST_PROCESSORS,
             f"post_processor {_type_of(data.get('post_processor'))!r} is not supported (it adds IDs)")
    _require(_type_of(data.get("decoder")) in _DECODERS, f"decoder {_type_of(data.get('decoder'))!r} is not supported")
    for key in ("truncation", "padding"):
        _require(data.get(key) is None, f"{key} is set; lmprep supports only {key}: null")
    for key in ("dropout", "continuing_subword_prefix", "end_of_word_suffix"):
        _require(not model.get(key), f"BPE {key}={model.get(key)!r} is not supported")
    for key in ("byte_fallback", "ignore_merges", "fuse_unk"):
        _require(not model.get(key), f"BPE {key}=true is not supported")
    meta = model.get("lmprep")
    if meta is not None:
        _require(isinstance(meta, dict) and meta.get("format_version") == FORMAT_VERSION,
                 f"lmprep format version {meta.get('format_version') if isinstance(meta, dict) else meta!r} "
                 f"is not supported (this lmprep reads version {FORMAT_VERSION})")


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise TokenizerFormatError(message)


def _type_of(component: Any) -> str | None:
    if component is None:
        return None
    return component.get("type", "<no type>") if isinstance(component, dict) else repr(component)


def _read_pre_tokenizer(component: Any) -> tuple[str, bool]:
    """(split regex, whether bytes are mapped by ByteLevel) for the supported pre-tokenizers."""
    steps = component.get("pretokenizers") if _type_of(component) == "Sequence" else [component]
    steps = [step for step in (steps or []) if step is not None]
    kinds = [_type_of(step) for step in steps]
    if kinds == []:
        return "", False
    if kinds == ["ByteLevel"]:
        return _byte_level_pattern(steps[0]), True
    if kinds == ["Split"]:
        return _split_pattern(steps[0]), False
    if kinds == ["Split", "ByteLevel"]:
        _require(_byte_level_pattern(steps[1]) == "",
                 "ByteLevel use_regex=true after a Split is not supported")
        return _split_pattern(steps[0]), True
    raise TokenizerFormatError(f"pre_tokenizer {' + '.join(map(str, kinds))} is not supported; "
                               "supported: Split, ByteLevel, or Split then ByteLevel(use_regex=false)")


def _byte_level_pattern(step: Mapping[str, Any]) -> str:
    _require(not step.get("add_prefix_space"), "ByteLevel add_prefix_space=true is not supported")
    return patterns.GPT2 if step.get("use_regex", True) else ""


def _split_pattern(step: Mapping[str, Any]) -> str:
    _require(step.get("behavior") == "Isolated" and not step.get("invert"),
             f"Split behavior {step.get('behavior')!r} (invert={step.get('invert')}) is not supported; use Isolated")
    spec = step.get("pattern") or {}
    if "String" in spec:
        raise TokenizerFormatError("Split with a String pattern is not supported; use a Regex pattern")
    regex_ = spec.get("Regex")
    _require(isinstance(regex_, str), "Split pattern has no Regex")
    resolved = patterns.resolve_pattern(regex_, kind="byte")
    _require(resolved == regex_, f"Split regex {regex_!r} may leave text unmatched; lmprep needs it to end "
                                 r"with '|[\s\S]' (as lmprep writes custom patterns)")
    return regex_


def _read_added_tokens(entries: Any) -> dict[str, int]:
    _require(isinstance(entries, list), "added_tokens must be a list")
    specials: dict[str, int] = {}
    for entry in entries:
        name = entry.get("content") if isinstance(entry, dict) else None
        _require(isinstance(name, str) and isinstance(entry.get("id"), int), f"malformed added token {entry!r}")
        _require(bool(entry.get("special")), f"added token {name!r} is not special; only special added tokens "
                                             "are supported")
        for flag in ("single_word", "lstrip", "rstrip"):
            _require(not entry.get(flag), f"added token {name!r} has {flag}=true, which is not supported")
        _require(name not in specials, f"added token {name!r} appears twice")
        specials[name] = entry["id"]
    return specials


def _read_vocab(model: Mapping[str, Any], *, special_ids: set[int]) -> dict[str, int]:
    vocab = model.get("vocab")
    _require(isinstance(vocab, dict), "model.vocab must be an object mapping tokens to IDs")
    seen: dict[int, str] = {}
    for name, token_id in vocab.items():
        _require(isinstance(token_id, int) and not isinstance(token_id, bool) and token_id >= 0,
                 f"vocab token {name!r} has ID {token_id!r}; IDs are non-negative integers")
        _require(token_id not in seen, f"duplicate ID {token_id} for tokens {seen.get(token_id)!r} and {name!r}")
        seen[token_id] = name
    return {name: i for name, i in vocab.items() if i not in special_ids}


def _decode_vocab(vocab: dict[str, int], *, kind: str, unk_token: Any) -> tuple[dict[int, bytes], int | None]:
    """Token bytes by ID (ByteLevel spelling undone for the byte kind) and the unknown token's ID."""
    if kind == "char":
        _require(isinstance(unk_token, str), f"char-level model's unk_token must be a string, got {unk_token!r}")
        _require(unk_token in vocab, f"char-level model needs its unk_token {unk_token!r} in the vocab")
        unk_id = vocab[unk_token]
        return {i: (UNKNOWN_TEXT if i == unk_id else name).encode("utf-8") for name, i in vocab.items()}, unk_id
    _require(unk_token is None, f"byte-level model must not have an unk_token (has {unk_token!r})")
    table = unicode_to_byte()
    try:  # a C-level map per token (load of 32k IDs: 0.17-0.21 s -> 0.15 s); the except only names the culprit
        tokens = {token_id: bytes(map(table.__getitem__, name)) for name, token_id in vocab.items()}
    except KeyError:
        name, bad = next((name, c) for name in vocab for c in name if c not in table)
        raise TokenizerFormatError(
            f"vocab token {name!r} (ID {vocab[name]}) has {bad!r}, which is not a ByteLevel character"
        ) from None
    singles = {data for data in tokens.values() if len(data) == 1}
    _require(len(singles) == 256, f"byte-level vocab has {len(singles)} of the 256 single bytes; it cannot "
                                  "encode every text")
    return tokens, None


def _read_merges(merges: Any, vocab: Mapping[str, int]) -> list[tuple[int, int]]:
    """The merges as ID pairs.

    Well-formed merges take one comprehension (0.17 s -> 0.04 s for 32k merges,
    on the path of every encode before its workers start); the checked loop
    runs only to name the entry at fault.
    """
    _require(isinstance(merges, list), "model.merges must be a list")
    try:
        return [(vocab[left], vocab[right]) for left, right in map(_merge_parts, merges)]
    except (KeyError, TypeError, ValueError):
        return _read_merges_checked(merges, vocab)


def _merge_parts(merge: Any) -> list[Any] | None:
    """A merge's parts: HF writes ``"a b"`` (older files) or ``["a", "b"]``; None for anything else."""
    if isinstance(merge, str):
        return merge.split(" ")
    return merge if isinstance(merge, list) else None


def _read_merges_checked(merges: list[Any], vocab: Mapping[str, int]) -> list[tuple[int, int]]:
    pairs = []
    for rank, merge in enumerate(merges):
        parts = _merge_parts(merge)
        _require(isinstance(parts, list) and len(parts) == 2 and all(isinstance(p, str) for p in parts),
                 f"merge #{rank} {merge!r} does not have exactly two parts")
        missing = next((p for p in parts if p not in vocab), None)
        _require(missing is None, f"merge #{rank} {merge!r}: part {missing!r} is not in the vocab")
        pairs.append((vocab[parts[0]], vocab[parts[1]]))
    return pairs
