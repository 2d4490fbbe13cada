"""The Tokenizer: a BPE vocabulary (byte or char kind), its merges, special tokens and split pattern.

The word kind (``pipeline.tokenizer.word``) is a Tokenizer without merges whose base tokens are pieces.

IDs are laid out as the trainer makes them (``layout``; byte kind: 0–255 raw bytes, then
one ID per merge; char kind: 0 unknown, then the alphabet in code-point order,
then merges; special tokens last), but any layout that a valid HF byte-level
``tokenizer.json`` uses loads too: the class only requires that the IDs be
``0..vocab_size-1``, each used once, and that every merge produce a token whose
bytes are its two parts joined.
"""

from __future__ import annotations

import functools
import itertools
import os
import types
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Literal

import numpy as np
import regex

from pipeline.engine.hashing import canonical_hash
from pipeline.errors import AlphabetTooLargeError, InvalidUtf8Error, TokenizerError, TokenizerFormatError, counted
from pipeline.tokenizer import patterns, reference
from pipeline.tokenizer.encoder import NativeEncoder, PythonEncoder, native_encoder
from pipeline.tokenizer.layout import BYTE_IDS, UNKNOWN_ID, base_id_count, ids_dtype, results_of_merges, token_table

KINDS = ("byte", "char", "word")
UNKNOWN_TEXT = "\ufffd"
# Hashed into every fingerprint. Bump it whenever the same tokenizer file would encode or decode
# differently (so that shards and checkpoints made before are refused, not silently reused);
# tests/test_code_versions.py pins what each version does.
FINGERPRINT_VERSION = 2


class Tokenizer:
    """Exact, fast BPE: ``encode`` replays the merges in training order; ``decode`` joins token bytes."""

    def __init__(
        self,
        *,
        kind: str,
        pattern: str,
        tokens: Mapping[int, bytes],
        merges: Sequence[tuple[int, int]],
        special_tokens: Mapping[str, int] | None = None,
        unk_id: int | None = None,
        merge_newlines: bool = True,
        stop_reason: str | None = None,
        coverage_note: str | None = None,
    ):
        """``tokens`` maps every non-special ID to its bytes (the char kind's ``unk_id`` to U+FFFD);
        ``stop_reason`` says why training stopped before its limit (None: it reached it, or was not trained),
        ``coverage_note`` how many characters ``character_coverage`` left out of the alphabet (None: none)."""
        _check_kind(kind)
        if pattern:
            patterns.compile_checked(pattern)
        self._kind = kind
        self._pattern = pattern
        self._merge_newlines = merge_newlines
        self._unk_id = unk_id
        self._stop_reason = stop_reason
        self._coverage_note = coverage_note
        self._special_tokens = dict(special_tokens or {})
        self._merges = _int_pairs(merges)
        self._token_bytes = token_table(tokens, self._special_tokens)
        self._merge_results = results_of_merges(self._token_bytes, self._merges, tokens, unk_id)
        self._special_splitters: dict[frozenset[str], regex.Pattern] = {}
        self._fingerprint = self._compute_fingerprint()

    # ---- construction ---------------------------------------------------------------------------

    @classmethod
    def from_merges(
        cls,
        *,
        kind: str,
        pattern: str,
        merges: Sequence[tuple[int, int]],
        alphabet: Sequence[str] = (),
        special_tokens: Sequence[str] = (),
        merge_newlines: bool = True,
        stop_reason: str | None = None,
        coverage_note: str | None = None,
    ) -> Tokenizer:
        """A tokenizer in the trainer's ID layout: base tokens, merges in order, then special tokens."""
        _check_kind(kind)
        if kind == "byte":
            tokens = {i: bytes([i]) for i in range(BYTE_IDS)}
        else:
            characters = enumerate(alphabet, start=UNKNOWN_ID + 1)
            tokens = {UNKNOWN_ID: UNKNOWN_TEXT.encode()} | {i: c.encode() for i, c in characters}
        base = len(tokens)
        try:  # the IDs defined so far are the keys: a part defined later is a KeyError
            for new_id, (a, b) in enumerate(merges, start=base):
                tokens[new_id] = tokens[a] + tokens[b]
        except KeyError:
            raise TokenizerFormatError(f"merge #{new_id - base} ({a}, {b}) uses an ID not defined before it") from None
        specials = {token: len(tokens) + i for i, token in enumerate(_check_special_names(special_tokens))}
        unk_id = UNKNOWN_ID if kind == "char" else None
        return cls(kind=kind, pattern=pattern, tokens=tokens, merges=merges, special_tokens=specials,
                   unk_id=unk_id, merge_newlines=merge_newlines, stop_reason=stop_reason,
                   coverage_note=coverage_note)

    @classmethod
    def train(
        cls,
        texts: Iterable[str],
        *,
        vocab_size: int | None = None,
        merges: int | None = None,
        kind: str = "byte",
        pattern: str | None = None,
        special_tokens: Sequence[str] = (),
        min_frequency: int = 2,
        merge_newlines: bool | None = None,
        character_coverage: float = 1.0,
        workers: int = 0,
        progress: bool = False,
    ) -> Tokenizer:
        """Learn merges from ``texts`` (each one training sequence) up to ``vocab_size`` IDs in all
        and up to ``merges`` merges (give at least one; with both, the first limit reached stops it).

        ``vocab_size`` counts base tokens, merges and special tokens; both are upper bounds:
        training stops early when no pair occurs ``min_frequency`` times, and the returned
        tokenizer's ``stop_reason`` says so. ``merge_newlines`` defaults to False for the char
        kind (newline stays a token of its own, so it can end generation) and True for bytes.
        ``character_coverage`` (char kind) keeps only the most frequent characters that make up that share
        of the text; the rest encode as the unknown ID 0 (``coverage_note`` says how many).
        """
        from pipeline.tokenizer.trainer import train_merges

        _check_kind(kind)
        _check_coverage(kind, character_coverage)
        if kind == "word":
            return _train_word(texts, vocab_size=vocab_size, merges=merges, pattern=pattern,
                               special_tokens=special_tokens, min_frequency=min_frequency, workers=workers,
                               progress=progress)

        def learn(regex_: str, num_merges: int, newlines: bool):
            return train_merges(texts, kind=kind, pattern=regex_, num_merges=num_merges, min_frequency=min_frequency,
                                merge_newlines=newlines, character_coverage=character_coverage, workers=workers,
                                progress=progress)

        return cls._train(learn, vocab_size=vocab_size, merges=merges, kind=kind, pattern=pattern,
                          special_tokens=special_tokens, merge_newlines=merge_newlines)

    @classmethod
    def train_from_counts(
        cls,
        chunk_counts,
        *,
        vocab_size: int | None = None,
        merges: int | None = None,
        kind: str = "byte",
        pattern: str | None = None,
        special_tokens: Sequence[str] = (),
        min_frequency: int = 2,
        merge_newlines: bool | None = None,
        character_coverage: float = 1.0,
        progress: bool = False,
    ) -> Tokenizer:
        """:meth:`train` (byte and char kinds) from the counts of the distinct pre-split chunks, however
        they were counted (per partition and summed, on a cluster): a dict, or the native ``ChunkCounter``
        that ``_train_count.tally`` gives (emptied here); the chunks must come from splitting the texts with
        ``patterns.resolve_pattern(pattern, kind=kind)``, as ``count_chunks`` does."""
        from pipeline.tokenizer.trainer import merges_from_counts

        _check_kind(kind)
        _check_coverage(kind, character_coverage)
        if kind == "word":
            raise TokenizerError("the word kind is trained from texts, not from chunk counts")

        def learn(_regex: str, num_merges: int, newlines: bool):
            return merges_from_counts(chunk_counts, kind=kind, num_merges=num_merges, min_frequency=min_frequency,
                                      merge_newlines=newlines, character_coverage=character_coverage,
                                      progress=progress)

        return cls._train(learn, vocab_size=vocab_size, merges=merges, kind=kind, pattern=pattern,
                          special_tokens=special_tokens, merge_newlines=merge_newlines)

    @classmethod
    def _train(cls, learn, *, vocab_size: int | None, merges: int | None, kind: str, pattern: str | None,
               special_tokens: Sequence[str], merge_newlines: bool | None) -> Tokenizer:
        regex_ = patterns.resolve_pattern(pattern, kind=kind)
        specials = _check_special_names(special_tokens)
        newlines = (kind == "byte") if merge_newlines is None else merge_newlines
        reserved = base_id_count(kind) + len(specials)
        if vocab_size is None and merges is None:
            raise TokenizerError("give a vocabulary size or a number of merges to train")
        if vocab_size is not None and vocab_size < reserved:
            raise TokenizerError(
                f"vocab_size {vocab_size} is too small: {kind} kind needs at least {reserved} IDs "
                f"for its base tokens and {counted(len(specials), 'special token')}; raise --vocab-size"
            )
        room = None if vocab_size is None else vocab_size - reserved
        result = learn(regex_, min(limit for limit in (merges, room) if limit is not None), newlines)
        learned, stop_reason = _fit_merges(result, kind=kind, vocab_size=vocab_size, reserved=reserved)
        return cls.from_merges(kind=kind, pattern=regex_, merges=learned, alphabet=result.alphabet,
                               special_tokens=specials, merge_newlines=newlines, stop_reason=stop_reason,
                               coverage_note=result.coverage_note)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Tokenizer:
        """Read and validate a HF ``tokenizer.json``, a file or a URL (TokenizerFormatError names what is wrong)."""
        from pipeline.tokenizer import hf_json

        return hf_json.load(path)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write a HF ``tokenizer.json`` atomically (to a URL in one request); the same tokenizer always gives
        the same bytes."""
        from pipeline.tokenizer import hf_json

        hf_json.save(self, path)

    def export_tiktoken(self, path: str | os.PathLike[str]) -> None:
        """Write tiktoken's ranks file (``base64(token) rank`` per line); byte kind only."""
        from pipeline.tokenizer import tiktoken_export

        tiktoken_export.write_ranks(self, path)

    # ---- properties -----------------------------------------------------------------------------

    # Read-only: the encoder, the merge results and the fingerprint are derived from these at construction.

    @property
    def kind(self) -> str:
        return self._kind

    @property
    def pattern(self) -> str:
        """The split regex (``""``: no pre-split)."""
        return self._pattern

    @property
    def merges(self) -> tuple[tuple[int, int], ...]:
        """The merged pairs in rank (training) order."""
        return self._merges

    @property
    def special_tokens(self) -> Mapping[str, int]:
        """Special token -> ID, read-only."""
        return types.MappingProxyType(self._special_tokens)

    @property
    def unk_id(self) -> int | None:
        """The ID of unknown text (char and word kinds), else None."""
        return self._unk_id

    @property
    def merge_newlines(self) -> bool:
        return self._merge_newlines

    @property
    def stop_reason(self) -> str | None:
        """Why training stopped before its limit, or None."""
        return self._stop_reason

    @property
    def coverage_note(self) -> str | None:
        """How many characters ``character_coverage`` left out of the alphabet, or None."""
        return self._coverage_note

    @property
    def fingerprint(self) -> str:
        return self._fingerprint

    @property
    def vocab_size(self) -> int:
        return len(self._token_bytes)

    @property
    def id_dtype(self) -> np.dtype:
        """The smallest unsigned dtype holding every ID."""
        return ids_dtype(self.vocab_size)

    @property
    def merge_results(self) -> list[int]:
        """The ID each merge makes, in merge order (``256 + rank`` for a byte tokenizer lmprep trained)."""
        return list(self._merge_results)

    @property
    def alphabet(self) -> list[str]:
        """Char kind: the characters of the base tokens in ID order (empty for the byte kind)."""
        if self.kind != "char":
            return []
        return [self._token_bytes[i].decode() for i in self._base_ids()]

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes of one token (a special token's are its UTF-8 string, the unknown token's U+FFFD)."""
        if not _is_id(token_id, self.vocab_size):  # not _check_ids, which builds lists: callers ask for every ID
            raise _invalid_id(token_id, 0, self.vocab_size)
        return self._token_bytes[token_id]

    @property
    def vocab_bytes(self) -> tuple[bytes, ...]:
        """Every ID's bytes in ID order: ``token_bytes`` of each, without a check per ID."""
        return tuple(self._token_bytes)

    def render_token(self, token_id: int) -> str:
        """A token for humans: special tokens by name, others quoted with invalid UTF-8 as ``\\xNN``."""
        for name, special_id in self.special_tokens.items():
            if special_id == token_id:
                return name
        return repr(self.token_bytes(token_id).decode("utf-8", errors="backslashreplace"))

    def first_token_merges_do_not_make(self) -> int | None:
        """Byte kind: the lowest regular ID whose bytes, encoded alone, do not give that one ID; else None.

        Such a token is either one that no merge makes (a vocabulary entry appended without a merge)
        or one whose merges rank order never reaches. Encoders that look a whole chunk up in the
        vocabulary before merging (tiktoken, HF with ``ignore_merges``) emit it where ``encode`` does
        not; every token of a tokenizer lmprep trains passes.
        """
        rank_of = {pair: rank for rank, pair in enumerate(self.merges)}
        byte_id = [0] * 256
        for i in self._base_ids():
            byte_id[self._token_bytes[i][0]] = i
        specials = set(self.special_tokens.values())
        for token_id, data in enumerate(self._token_bytes):
            if len(data) > 1 and token_id not in specials \
                    and reference.encode_chunk([byte_id[b] for b in data], rank_of, self._merge_results) != [token_id]:
                return token_id
        return None

    # ---- encoding -------------------------------------------------------------------------------

    def encode_ordinary(self, text: str) -> list[int]:
        """IDs of ``text``; special-token strings in it are ordinary text."""
        return self._encode_checked(self._encoder.ids, text)

    def encode(self, text: str, *, allowed_special: Collection[str] | Literal["all"] = ()) -> list[int]:
        """IDs of ``text``; only special tokens named in ``allowed_special`` (or ``"all"``) become their IDs.

        By default special-token strings are plain text, so untrusted input can never forge one.
        """
        allowed = self._allowed_specials(allowed_special)
        if not allowed:
            return self.encode_ordinary(text)
        ids: list[int] = []
        pieces = self._special_splitter(allowed).split(text)
        for i, piece in enumerate(pieces):
            if i % 2:
                ids.append(self.special_tokens[piece])
            elif piece:
                ids.extend(self.encode_ordinary(piece))
        return ids

    def encode_array(self, text: str) -> np.ndarray:
        """IDs of ``text`` (ordinary) as a numpy array of :attr:`id_dtype`."""
        return self._encode_checked(self._encoder.array, text).astype(self.id_dtype)

    def encode_batch(self, texts: Iterable[str], *, threads: int = 1) -> list[list[int]]:
        """``[encode_ordinary(text) for text in texts]``, as fast as :meth:`encode_batch_flat`: the new chunks of
        all texts are merged together. ``threads``: as in :meth:`encode_batch_flat`."""
        texts = texts if isinstance(texts, Sequence) else list(texts)
        return self._encode_checked(self._encoder.lists, texts, _check_threads(threads))

    def encode_batch_flat(self, texts: Sequence[str], *, threads: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """All texts' IDs concatenated (``np.uint32``) and ``len(texts) + 1`` document offsets (``np.int64``).

        ``threads`` > 1: the native core encodes consecutive ranges of ``texts`` in that many threads,
        without the GIL, sharing this tokenizer's cache; the result is the same whatever the number. The
        Python path encodes in one thread whatever it says.
        """
        return self._encode_checked(self._encoder.flat, texts, _check_threads(threads))

    def split_base_ids(self, text: str) -> list[list[int]]:
        """``text`` cut by the pattern into chunks, each as the base IDs that merging starts from."""
        base_ids = self._base_ids_function()
        return self._encode_checked(lambda t: [base_ids(chunk) for chunk in patterns.splitter(self.pattern)(t)], text)

    def build_encoder(self) -> None:
        """Build the encoder now, not at the first encode: a process about to fork workers that encode builds it
        once for them all."""
        _ = self._encoder

    def bound_cache(self, max_bytes: int) -> None:
        """Keep at most about ``max_bytes`` of encoded chunks in memory (the IDs never depend on it)."""
        self._encoder.bound_cache(max_bytes)

    # ---- decoding -------------------------------------------------------------------------------

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        """The raw bytes of ``ids`` joined (may end inside a character)."""
        ids = self._check_ids(ids)
        table = self._token_bytes
        return b"".join([table[i] for i in ids])

    def decode(self, ids: Iterable[int], *, errors: Literal["strict", "replace"] = "strict") -> str:
        """The text of ``ids``. Bytes that are not UTF-8 raise unless ``errors="replace"``."""
        if errors not in ("strict", "replace"):
            raise TokenizerError(f"errors must be 'strict' or 'replace', got {errors!r}")
        data = self.decode_bytes(ids)
        try:
            return data.decode("utf-8", errors)
        except UnicodeDecodeError as exc:
            raise InvalidUtf8Error(
                f"the IDs decode to bytes that are not valid UTF-8 (at byte offset {exc.start}: "
                f"{data[exc.start:exc.end]!r})", "pass errors='replace' or use decode_bytes"
            ) from None

    # ---- internals ------------------------------------------------------------------------------

    @functools.cached_property
    def _encoder(self) -> NativeEncoder | PythonEncoder:
        """The native encoder when the core is built; else, and for the word kind (no merges: a lookup per
        chunk), the Python one. Built at the first encode (:meth:`build_encoder`): training, loading to check a
        fingerprint or to decode never encode, and building it takes 0.04-0.05 s at 65,536 IDs."""
        rank_of = {pair: rank for rank, pair in enumerate(self.merges)}
        if self.kind != "word":
            fast = native_encoder(self.pattern, self._base_id_table(), self.unk_id, rank_of, self._merge_results)
            if fast is not None:
                return fast
        return PythonEncoder(patterns.splitter(self.pattern), self._base_ids_function(), rank_of, self._merge_results)

    def _base_ids(self) -> list[int]:
        """The IDs a chunk is first cut into: the regular tokens of one byte (byte kind), one character
        (char kind) or one whole piece (word kind).

        A longer token that no merge makes (a vocabulary entry appended without a merge) is never
        emitted, as in HF ``tokenizers``; it only decodes.
        """
        specials = set(self.special_tokens.values())
        unit = {"byte": lambda data: len(data) == 1,
                "char": lambda data: len(data.decode()) == 1,
                "word": lambda data: True}[self.kind]  # a word token is a whole piece of the split
        return [i for i, data in enumerate(self._token_bytes)
                if unit(data) and i not in specials and i != self.unk_id]

    def _base_id_table(self) -> list[int] | dict[str, int]:
        """Byte kind: the base ID of each byte value; char and word kinds: character or piece -> base ID."""
        base = self._base_ids()
        if self.kind != "byte":
            return {self._token_bytes[i].decode(): i for i in base}
        byte_id = {self._token_bytes[i][0]: i for i in base}
        return [byte_id[b] for b in range(256)]

    def _base_ids_function(self):
        table = self._base_id_table()
        unk = self.unk_id
        if self.kind == "word":
            return lambda chunk: [table.get(chunk, unk)]
        if self.kind == "char":
            return lambda chunk: [table.get(c, unk) for c in chunk]
        if table == list(range(256)):
            return lambda chunk: list(chunk.encode("utf-8"))
        return lambda chunk: [table[b] for b in chunk.encode("utf-8")]

    def _encode_checked(self, function, *arguments):
        try:
            return function(*arguments)
        except UnicodeEncodeError as exc:
            raise TokenizerError(
                f"text contains {exc.object[exc.start:exc.end]!r} at character {exc.start}, "
                "which is not encodable as UTF-8 (a lone surrogate); clean the text first"
            ) from None

    def _allowed_specials(self, allowed_special: Collection[str] | Literal["all"]) -> frozenset[str]:
        if allowed_special == "all":
            return frozenset(self.special_tokens)
        if isinstance(allowed_special, str):
            raise TokenizerError(f"allowed_special must be 'all' or a collection of tokens, got {allowed_special!r}")
        unknown = [token for token in allowed_special if token not in self.special_tokens]
        if unknown:
            raise TokenizerError(
                f"allowed_special names {unknown[0]!r}, which is not a special token of this tokenizer "
                f"(it has {sorted(self.special_tokens)})"
            )
        return frozenset(allowed_special)

    def _special_splitter(self, allowed: frozenset[str]) -> regex.Pattern:
        """A regex whose capturing ``split`` isolates the allowed special tokens (longest first)."""
        if allowed not in self._special_splitters:
            alternatives = "|".join(regex.escape(t) for t in sorted(allowed, key=lambda t: (-len(t), t)))
            self._special_splitters[allowed] = regex.compile(f"({alternatives})")
        return self._special_splitters[allowed]

    def _check_ids(self, ids: Iterable[int]) -> Sequence[int]:
        """Return ``ids`` as a list of ints, or raise naming the first invalid ID and its position."""
        if isinstance(ids, np.ndarray):
            return _check_id_array(ids, self.vocab_size)
        ids = list(ids)
        size = self.vocab_size
        for position, token_id in enumerate(ids):
            if not _is_id(token_id, size):
                raise _invalid_id(token_id, position, size)
        return [int(i) for i in ids]

    def _compute_fingerprint(self) -> str:
        """sha256 of everything that decides encoding and decoding, not of any file's bytes."""
        return canonical_hash({
            "version": FINGERPRINT_VERSION,
            "kind": self.kind,
            "pattern": self.pattern,
            "vocab": list(map(bytes.hex, self._token_bytes)),
            "merges": self._merges,  # pairs as tuples: the same JSON as lists, without a list per merge
            "special_tokens": self._special_tokens,
            "unk_id": self.unk_id,
        })

    def __repr__(self) -> str:
        return (f"Tokenizer(kind={self.kind!r}, vocab_size={self.vocab_size}, merges={len(self.merges)}, "
                f"pattern={patterns.pattern_name(self.pattern)!r}, special_tokens={self._special_tokens!r})")


def _int_pairs(merges: Sequence[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """The merges as pairs of Python ints: kept as they are when they already are (three passes of builtins, not
    a tuple made per merge)."""
    merges = tuple(merges)
    if (set(map(type, merges)) <= {tuple} and set(map(len, merges)) <= {2}
            and set(map(type, itertools.chain.from_iterable(merges))) <= {int}):
        return merges
    return tuple((int(a), int(b)) for a, b in merges)


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise TokenizerError(f"unknown tokenizer kind {kind!r}; use one of {', '.join(KINDS)}")


def _train_word(texts, *, vocab_size: int | None, merges: int | None, **options) -> Tokenizer:
    from pipeline.tokenizer import word

    if merges is not None or vocab_size is None:
        raise TokenizerError("the word kind has no merges: give a vocabulary size, not a number of merges")
    options["special_tokens"] = _check_special_names(options["special_tokens"])
    return word.train(texts, vocab_size=vocab_size, **options)


def _check_special_names(special_tokens: Sequence[str]) -> list[str]:
    names = list(special_tokens)
    for name in names:
        if not isinstance(name, str) or not name:
            raise TokenizerError(f"special token {name!r} must be a non-empty string")
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise TokenizerError(f"special token {duplicates[0]!r} is given more than once")
    return names


def _fit_merges(result, *, kind: str, vocab_size: int | None,
                reserved: int) -> tuple[list[tuple[int, int]], str | None]:
    """The char kind learns its alphabet while training: keep only the merges that fit ``vocab_size``."""
    if kind == "byte" or vocab_size is None:
        return list(result.merges), result.stop_reason
    room = vocab_size - reserved - len(result.alphabet)
    if room < 0:
        raise AlphabetTooLargeError(
            f"vocab_size {vocab_size:,} is smaller than the {len(result.alphabet):,} characters of the training "
            f"text plus the unknown token and special tokens ({reserved + len(result.alphabet):,})",
            "raise --vocab-size, or keep fewer characters with --character-coverage (such as 0.9995)"
        )
    if len(result.merges) > room:
        return list(result.merges[:room]), None
    return list(result.merges), result.stop_reason


def _check_coverage(kind: str, coverage: float) -> None:
    if not 0 < coverage <= 1:
        raise TokenizerError(f"character_coverage must be above 0 and at most 1, got {coverage}")
    if coverage < 1 and kind != "char":
        raise TokenizerError(f"character_coverage {coverage} applies to the char kind only, not to the {kind} kind")


def _check_threads(threads: object) -> int:
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise TokenizerError(f"threads must be a whole number of at least 1, got {threads!r}")
    return threads


def _is_id(value: object, size: int) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool) and 0 <= value < size


def _invalid_id(token_id: object, position: int, size: int) -> TokenizerError:
    return TokenizerError(f"invalid token ID {token_id!r} at position {position}: IDs are integers in 0..{size - 1}")


def _check_id_array(ids: np.ndarray, size: int) -> list[int]:
    if ids.dtype.kind not in "iu":
        raise TokenizerError(f"token IDs must be integers, got an array of {ids.dtype}")
    flat = ids.ravel()
    bad = np.flatnonzero((flat < 0) | (flat >= size))
    if bad.size:
        position = int(bad[0])
        raise _invalid_id(int(flat[position]), position, size)
    return flat.tolist()
