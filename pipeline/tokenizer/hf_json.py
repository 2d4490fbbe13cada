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

Foreign files: the reader accepts a file only when our encoder gives HF's IDs
for every text, and refuses anything else with one line naming the field or
token. Accepted: byte-level BPE (``ByteLevel`` pre-tokenizer, or ``Split`` then
``ByteLevel(use_regex=false)``), special added tokens, vocabulary entries that
no merge makes (HF never emits them; they only decode), ``byte_fallback``,
``unk_token`` and ``fuse_unk`` (a byte-level vocabulary never needs them), and
``ignore_merges`` when every token encodes alone to itself. Refused: any
normalizer, ``dropout``, ``continuing_subword_prefix``, ``end_of_word_suffix``,
``add_prefix_space``, post-processors that add IDs, non-special added tokens,
and malformed or wrong-typed fields. An accepted file is written back with :func:`dumps` wherever lmprep
outputs it (the tokenizer stage's frozen copy), so its output is always a file HF loads, whatever values
of the input HF's stricter reader would refuse (``0`` for ``false``, a missing ``single_word``).
"""

from __future__ import annotations

import functools
import itertools
import json
import operator
import os
from collections.abc import Mapping
from typing import Any

from pipeline.engine import atomic, storage
from pipeline.errors import TokenizerError, TokenizerFormatError, describe
from pipeline.tokenizer import backend, patterns
from pipeline.tokenizer.core import UNKNOWN_TEXT, Tokenizer

FORMAT_VERSION = 1
MAX_FILE_BYTES = 256 << 20
"""The largest tokenizer.json lmprep reads or writes. The largest byte or char vocabulary (1,112,063 IDs) takes
about 100 bytes per ID as lmprep writes it; a bigger file, a FIFO or a device is refused before it is read."""
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
    """Write ``path`` whole: a local file renamed into place, a remote object in one request."""
    storage.write_bytes(path, dumps(tokenizer))


def dumps(tokenizer: Tokenizer) -> bytes:
    """The bytes of the tokenizer's ``tokenizer.json``: the same tokenizer always gives the same bytes, and a file
    lmprep wrote reads back as the tokenizer that gives them again."""
    data = (atomic.dumps_json(_tokenizer_dict(tokenizer, _written_sections)) + "\n").encode("utf-8")
    if len(data) > MAX_FILE_BYTES:
        raise TokenizerError(f"the tokenizer's file would take {len(data):,} bytes, more than the {MAX_FILE_BYTES:,} "
                             "lmprep reads back; use a smaller vocabulary")
    return data


def to_dict(tokenizer: Tokenizer) -> dict[str, Any]:
    """The file's content as JSON values."""
    return _tokenizer_dict(tokenizer, _named_sections)


def _tokenizer_dict(tokenizer: Tokenizer, sections) -> dict[str, Any]:
    """The file's content, the model's vocab and merges made by ``sections`` (given the tokenizer and its regular
    IDs)."""
    if tokenizer.kind == "word":
        from pipeline.tokenizer import word

        return word.to_hf_dict(tokenizer)
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
        "model": _model_dict(tokenizer, sections),
    }


def _byte_speller():
    """Bytes to GPT-2's characters: latin-1 makes one character per byte, ``translate`` maps them in C."""
    table = str.maketrans(byte_to_unicode())
    return lambda data: data.decode("latin-1").translate(table)


def _spelled(tokenizer: Tokenizer, ids: list[int]) -> list[str]:
    """The names the file gives the tokens ``ids``: the byte kind's spelled in GPT-2's characters by one
    ``translate`` of all their bytes, cut where each ends (not a call per token)."""
    table = tokenizer.vocab_bytes
    if tokenizer.kind == "byte":
        datas = list(map(table.__getitem__, ids))
        ends = list(itertools.accumulate(map(len, datas)))
        text = _byte_speller()(b"".join(datas))
        return list(map(text.__getitem__, map(slice, [0, *ends[:-1]], ends)))
    unk = unknown_token_text(tokenizer.alphabet)
    return [unk if i == tokenizer.unk_id else table[i].decode("utf-8") for i in ids]


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


def _model_dict(tokenizer: Tokenizer, sections) -> dict[str, Any]:
    """The BPE model, its vocab and merges made by ``sections`` from the regular (not special) IDs."""
    specials = set(tokenizer.special_tokens.values())
    regular = [i for i in range(tokenizer.vocab_size) if i not in specials]
    vocab, merges = sections(tokenizer, regular)
    return {
        "type": "BPE",
        "dropout": None,
        "unk_token": _spelled(tokenizer, [tokenizer.unk_id])[0] if tokenizer.unk_id is not None else None,
        "continuing_subword_prefix": None,
        "end_of_word_suffix": None,
        "fuse_unk": False,
        "byte_fallback": False,
        "ignore_merges": False,
        "vocab": vocab,
        "merges": merges,
        "lmprep": _metadata(tokenizer),
    }


def _named_sections(tokenizer: Tokenizer, regular: list[int]) -> tuple[dict[str, int], list[list[str]]]:
    """The vocab (name → ID) and the merges as pairs of names, each made by builtins from the names of the IDs."""
    names = _spelled(tokenizer, regular)
    name_of = dict(zip(regular, names)).__getitem__
    merges = tokenizer.merges
    return dict(zip(names, regular)), list(map(list, zip(map(name_of, map(operator.itemgetter(0), merges)),
                                                        map(name_of, map(operator.itemgetter(1), merges)))))


def _written_sections(tokenizer: Tokenizer, regular: list[int]):
    """:func:`_named_sections`' two values, but for the byte kind where the native core is built, as the JSON text
    :func:`atomic.dumps_json` would write for them, which the core writes in one pass (a 65,536-ID tokenizer:
    about 0.3 s less of Python)."""
    if tokenizer.kind != "byte" or backend.native is None:
        return _named_sections(tokenizer, regular)
    tokens, plain, escaped = tokenizer.vocab_bytes, *_byte_spellings()
    lefts, rights = (list(map(operator.itemgetter(side), tokenizer.merges)) for side in (0, 1))
    vocab = atomic.Preformatted(lambda newline, step: backend.native.vocab_json(tokens, regular, plain, escaped,
                                                                                 newline, step))
    merges = atomic.Preformatted(lambda newline, step: backend.native.merges_json(
        tokens, regular, lefts, rights, plain, escaped, newline, step))
    return vocab, merges


@functools.cache
def _byte_spellings() -> tuple[tuple[bytes, ...], tuple[bytes, ...]]:
    """Each byte's GPT-2 character as UTF-8, and as a JSON string writes it (inside its quotes)."""
    chars = [byte_to_unicode()[b] for b in range(256)]
    return (tuple(char.encode("utf-8") for char in chars),
            tuple(atomic.dumps_json(char, indent=None)[1:-1].encode("utf-8") for char in chars))


def _metadata(tokenizer: Tokenizer) -> dict[str, Any]:
    meta = {"format_version": FORMAT_VERSION, "kind": tokenizer.kind, "merge_newlines": tokenizer.merge_newlines}
    if tokenizer.kind == "char":
        meta |= {"alphabet": tokenizer.alphabet, "unk_id": tokenizer.unk_id}
    return meta
# ---- reading ------------------------------------------------------------------------------------


def load(path: str | os.PathLike[str]) -> Tokenizer:
    return loads(read_file(path), name=os.fspath(path))


def read_file(path: str | os.PathLike[str]) -> bytes:
    """The bytes of a local file or a remote object, read in one request (never part of an object), and at most
    ``MAX_FILE_BYTES`` of them (StorageError for a larger file, a FIFO or a device)."""
    try:
        return storage.read_bounded(path, MAX_FILE_BYTES, what="tokenizer file")
    except FileNotFoundError:
        raise TokenizerFormatError(f"tokenizer file {os.fspath(path)} does not exist; train one first") from None
    except OSError as exc:
        raise TokenizerFormatError(f"cannot read tokenizer file {os.fspath(path)}: {exc}") from None


def loads(data: bytes, *, name: str) -> Tokenizer:
    """Validate the bytes of a ``tokenizer.json``; ``name`` says where they came from in messages."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TokenizerFormatError(f"cannot read tokenizer file {name}: {exc}") from None
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TokenizerFormatError(f"{name} is not valid JSON: {exc}") from None
    except RecursionError:
        raise TokenizerFormatError(f"{name} nests JSON too deeply to be a tokenizer.json") from None
    except ValueError as exc:  # an integer of more digits than Python converts (the advice after ';' is for code)
        raise TokenizerFormatError(f"{name} is not a tokenizer.json: {str(exc).split(';')[0]}") from None
    try:
        return from_dict(parsed)
    except TokenizerFormatError as exc:
        raise TokenizerFormatError(f"{name}: {exc}") from None


def from_dict(data: Any) -> Tokenizer:
    """Validate a parsed tokenizer.json and build the Tokenizer it describes.

    A file is accepted only when our encoder gives the IDs HF ``tokenizers`` gives: components and
    options that would change them are refused with a message naming the field.
    """
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
    _check_model_options(model, kind)
    specials = _read_added_tokens(data.get("added_tokens") or [])
    model_vocab = _read_vocab(model)
    special_ids = set(specials.values())
    vocab = {name: i for name, i in model_vocab.items() if i not in special_ids}
    tokens, unk_id = _decode_vocab(vocab, kind=kind, unk_token=model.get("unk_token"))
    merges = _read_merges(model.get("merges"), vocab)
    tokenizer = Tokenizer(kind=kind, pattern=pattern, tokens=tokens, merges=merges, special_tokens=specials,
                          unk_id=unk_id, merge_newlines=bool(meta.get("merge_newlines", True)))
    if model.get("ignore_merges"):
        _check_whole_chunk_lookup(tokenizer, model_vocab, specials)
    return tokenizer


def _check_supported(data: Mapping[str, Any]) -> None:
    """Refuse components that would make HF's IDs differ from what we compute."""
    model = data["model"]
    _require(model.get("type") == "BPE", f"model type {describe(model.get('type'))} is not supported (only BPE)")
    _require(_type_of(data.get("normalizer")) is None,
             f"normalizer {_type_of(data.get('normalizer'))!r} is not supported; lmprep normalizes text in prepare")
    _require(_type_of(data.get("post_processor")) in _IDS_ONLY_POST_PROCESSORS,
             f"post_processor {_type_of(data.get('post_processor'))!r} is not supported (it adds IDs)")
    _require(_type_of(data.get("decoder")) in _DECODERS, f"decoder {_type_of(data.get('decoder'))!r} is not supported")
    for key in ("truncation", "padding"):
        _require(data.get(key) is None, f"{key} is set; lmprep supports only {key}: null")
    meta = model.get("lmprep")
    if meta is not None:
        _require(isinstance(meta, dict) and meta.get("format_version") == FORMAT_VERSION,
                 f"lmprep format version {describe(meta.get('format_version') if isinstance(meta, dict) else meta)} "
                 f"is not supported (this lmprep reads version {FORMAT_VERSION})")


def _check_model_options(model: Mapping[str, Any], kind: str) -> None:
    """The BPE options: those that change IDs are refused, those that cannot here are accepted.

    A byte-level vocabulary holds all 256 byte characters (checked when reading it), so HF never
    needs ``byte_fallback``, ``unk_token`` or ``fuse_unk`` on it; ``ignore_merges`` is checked
    against the vocabulary once it is read.
    """
    dropout = model.get("dropout")
    _require(dropout is None or (isinstance(dropout, (int, float)) and not isinstance(dropout, bool) and dropout == 0),
             f"BPE dropout={describe(dropout)} is not supported (it makes encoding random); use null")
    for key in ("continuing_subword_prefix", "end_of_word_suffix"):
        _require(model.get(key) in (None, ""), f"BPE {key}={describe(model.get(key))} is not supported")
    for key in ("byte_fallback", "ignore_merges", "fuse_unk"):
        value = model.get(key)
        _require(value is None or isinstance(value, bool), f"BPE {key}={describe(value)} is not true or false")
        _require(kind == "byte" or not value, f"BPE {key}=true is not supported in a char-level model")


def _check_whole_chunk_lookup(tokenizer: Tokenizer, model_vocab: Mapping[str, int],
                              specials: Mapping[str, int]) -> None:
    """``ignore_merges``: HF looks each chunk up in the model's vocabulary before merging.

    That gives our IDs exactly when every regular token encodes alone to itself (then the lookup
    finds what the merges make) and no chunk can be spelt like a special token's vocabulary entry
    (HF takes special tokens out of the text before, so only a literal spelling is safe).
    """
    spell = _byte_speller()
    by_id = {token_id: name for name, token_id in specials.items()}
    for name, token_id in model_vocab.items():
        if token_id in by_id:
            _require(name == by_id[token_id] == spell(name.encode("utf-8")),
                     f"BPE ignore_merges=true with vocab entry {describe(name)} for special token ID {token_id} "
                     f"({describe(by_id[token_id])}) is not supported")
    bad = tokenizer.first_token_merges_do_not_make()
    _require(bad is None, lambda: f"BPE ignore_merges=true: vocab token {describe(spell(tokenizer.token_bytes(bad)))} "
                                  f"(ID {bad}) is not what the merges make of its bytes, so HF emits it where lmprep "
                                  "does not")


def _require(condition: bool, message) -> None:
    """Raise TokenizerFormatError with ``message`` (a string, or a function making one) unless ``condition``."""
    if not condition:
        raise TokenizerFormatError(message() if callable(message) else message)


def _type_of(component: Any) -> str | None:
    if component is None:
        return None
    if not isinstance(component, dict):
        return describe(component)
    kind = component.get("type", "<no type>")
    return kind if isinstance(kind, str) else describe(kind)


def _bool_field(step: Mapping[str, Any], key: str, default: bool) -> bool:
    value = step.get(key, default)
    _require(isinstance(value, bool), f"{step.get('type')} {key}={describe(value)} is not true or false")
    return value


def _read_pre_tokenizer(component: Any) -> tuple[str, bool]:
    """(split regex, whether bytes are mapped by ByteLevel) for the supported pre-tokenizers."""
    if _type_of(component) == "Sequence":
        steps = component.get("pretokenizers")
        _require(isinstance(steps, list), f"pre_tokenizer Sequence has pretokenizers={describe(steps)}, not a list")
    else:
        steps = [component]
    steps = [step for step in steps if step is not None]
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
    _require(not _bool_field(step, "add_prefix_space", True), "ByteLevel add_prefix_space=true is not supported")
    return patterns.GPT2 if _bool_field(step, "use_regex", True) else ""


def _split_pattern(step: Mapping[str, Any]) -> str:
    _require(step.get("behavior") == "Isolated" and step.get("invert") in (None, False),
             f"Split behavior {describe(step.get('behavior'))} (invert={describe(step.get('invert'))}) is not "
             "supported; use Isolated")
    spec = step.get("pattern")
    _require(isinstance(spec, dict), f"Split pattern {describe(spec)} is not an object with a Regex")
    _require("String" not in spec, "Split with a String pattern is not supported; use a Regex pattern")
    regex_ = spec.get("Regex")
    _require(is_text(regex_), f"Split pattern Regex {describe(regex_)} is not a string of Unicode characters")
    try:
        resolved = patterns.resolve_pattern(regex_, kind="byte")
    except TokenizerError as exc:
        raise TokenizerFormatError(f"Split pattern: {exc}") from None
    _require(resolved == regex_, f"Split regex {describe(regex_)} may leave text unmatched; lmprep needs it to end "
                                 r"with '|[\s\S]' (as lmprep writes custom patterns)")
    return regex_


def _read_added_tokens(entries: Any) -> dict[str, int]:
    _require(isinstance(entries, list), f"added_tokens {describe(entries)} is not a list")
    specials: dict[str, int] = {}
    for entry in entries:
        name = entry.get("content") if isinstance(entry, dict) else None
        _require(is_text(name) and is_id(entry.get("id")), f"malformed added token {describe(entry)}")
        _require(entry.get("special") is True, f"added token {describe(name)} is not special; only special added "
                                               "tokens are supported")
        for flag in ("single_word", "lstrip", "rstrip"):
            _require(not entry.get(flag), f"added token {describe(name)} has {flag}={describe(entry.get(flag))}, "
                                          "which is not supported")
        _require(name not in specials, f"added token {describe(name)} appears twice")
        specials[name] = entry["id"]
    return specials


def is_text(value: Any) -> bool:
    """A string that UTF-8 can encode (JSON escapes can spell lone surrogates, which it cannot)."""
    if not isinstance(value, str):
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def is_id(value: Any) -> bool:
    """A token ID as JSON gives one: a non-negative integer, not a boolean."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _read_vocab(model: Mapping[str, Any]) -> dict[str, int]:
    """The vocabulary, each ID a non-negative integer used once.

    A well-formed one is checked by builtins over all its IDs at once (a load of 32k IDs: 0.54 s of building
    messages for entries that were fine -> 3 ms); the loop runs only to name the entry at fault.
    """
    vocab = model.get("vocab")
    _require(isinstance(vocab, dict), "model.vocab must be an object mapping tokens to IDs")
    ids = vocab.values()
    if set(map(type, ids)) <= {int} and min(ids, default=0) >= 0 and len(set(ids)) == len(vocab):
        return vocab
    seen: dict[int, str] = {}
    for name, token_id in vocab.items():
        _require(is_id(token_id),
                 f"vocab token {describe(name)} has ID {describe(token_id)}; IDs are non-negative integers")
        _require(token_id not in seen,
                 f"duplicate ID {token_id} for tokens {describe(seen.get(token_id))} and {describe(name)}")
        seen[token_id] = name
    return vocab


def _decode_vocab(vocab: dict[str, int], *, kind: str, unk_token: Any) -> tuple[dict[int, bytes], int | None]:
    """Token bytes by ID (ByteLevel spelling undone for the byte kind) and the unknown token's ID."""
    if kind == "char":
        _require(isinstance(unk_token, str),
                 f"char-level model's unk_token must be a string, got {describe(unk_token)}")
        _require(unk_token in vocab, f"char-level model needs its unk_token {describe(unk_token)} in the vocab")
        unk_id = vocab[unk_token]
        bad = next((name for name, i in vocab.items() if i != unk_id and not is_text(name)), None)
        _require(bad is None, lambda: f"vocab token {describe(bad)} (ID {vocab[bad]}) is not valid Unicode text")
        return {i: (UNKNOWN_TEXT if i == unk_id else name).encode("utf-8") for name, i in vocab.items()}, unk_id
    _require(unk_token is None or isinstance(unk_token, str), f"unk_token {describe(unk_token)} is not a string")
    datas = _byte_level_bytes(list(vocab))
    if datas is None:
        table = unicode_to_byte()
        name, bad = next((name, c) for name in vocab for c in name if c not in table)
        raise TokenizerFormatError(
            f"vocab token {describe(name)} (ID {vocab[name]}) has {bad!r}, which is not a ByteLevel character"
        )
    tokens = dict(zip(vocab.values(), datas))
    singles = set(itertools.compress(datas, map((1).__eq__, map(len, datas))))
    _require(len(singles) == 256, f"byte-level vocab has {len(singles)} of the 256 single bytes; it cannot "
                                  "encode every text")
    return tokens, None


def _byte_level_bytes(names: list[str]) -> list[bytes] | None:
    """The bytes each ByteLevel name spells, by one ``translate`` of all the names, not a map per name; None
    when a name has a character that is not a ByteLevel one.

    Each ByteLevel character becomes the Latin-1 character of its byte, so one encode gives a byte per
    character; any other Latin-1 character is deleted and any other character cannot be encoded, so either
    shows, as a shorter text or an error.
    """
    text = "".join(names)
    try:
        data = text.translate(_latin1_of_byte_level()).encode("latin-1")
    except UnicodeEncodeError:
        return None
    if len(data) != len(text):
        return None
    ends = list(itertools.accumulate(map(len, names)))
    return list(map(data.__getitem__, map(slice, [0, *ends[:-1]], ends)))


@functools.cache
def _latin1_of_byte_level() -> dict[int, int | None]:
    """``str.translate``'s table: each ByteLevel character to the Latin-1 character of its byte, each other
    Latin-1 character to nothing."""
    return dict.fromkeys(range(256)) | {ord(char): byte for char, byte in unicode_to_byte().items()}


def _read_merges(merges: Any, vocab: Mapping[str, int]) -> list[tuple[int, int]]:
    """The merges as ID pairs.

    Well-formed merges take one comprehension (0.17 s -> 0.04 s for 32k merges,
    on the path of every encode before its workers start); the checked loop
    runs only to name the entry at fault.
    """
    _require(isinstance(merges, list), lambda: f"model.merges {describe(merges)} is not a list")
    try:  # pairs as lists, as HF writes them now, need no call per merge to be read
        parts = merges if set(map(type, merges)) <= {list} else map(_merge_parts, merges)
        return [(vocab[left], vocab[right]) for left, right in parts]
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
                 f"merge #{rank} {describe(merge)} does not have exactly two parts")
        missing = next((p for p in parts if p not in vocab), None)
        _require(missing is None, f"merge #{rank} {describe(merge)}: part {describe(missing)} is not in the vocab")
        pairs.append((vocab[parts[0]], vocab[parts[1]]))
    return pairs
