"""Checkpoints that load without executing code, and the tokenizer guard.

A checkpoint is one safetensors file. Its tensors are the model weights, the
optimizer's per-parameter state and the torch RNG state, each under a flat
name (``model.embed.weight``, ``optimizer.0.exp_avg``, ``rng.torch``). Its
header metadata holds one JSON document with the step, the model config, the
resolved train config, the shard-set fingerprint, the numpy RNG state and a
record of the tokenizer: fingerprint, vocab size, kind, pattern, special tokens
and the merges themselves. Reading parses JSON and raw tensor bytes only, so a
pickle hidden in the file can never run; pickles and ``torch.save`` archives
are recognised by their first bytes and refused with a message that says why.

The metadata also holds checksums (:mod:`pipeline.model.integrity`): of the
rest of the metadata and, per tensor, of its dtype, shape and bytes. Every read checks
the metadata's (header-only reads included), every load the tensors' too, so a
damaged file, or a header whose shapes lie, is refused, never trained on or
sampled from: the train stage then sets it aside as unreadable and retrains.
A checkpoint without checksums (written before they were recorded) is refused
the same way.

The guard needs only the header (8 bytes of length, then JSON):
:func:`read_header` reads it without loading a tensor or importing torch, so
checking a checkpoint costs milliseconds whatever its size (it verifies the
metadata's checksum, not the tensors'). :func:`read_checkpoint`
checks the model config against the tensor shapes the header lists before it
builds the model, so a forged config cannot make it allocate more than the
file holds.

A checkpoint directory may be a remote output (``s3://…``, see
:mod:`pipeline.engine.storage`): its files are read through the output's commit.
:func:`read_header` then reads only the header's two byte ranges, and
:func:`read_checkpoint` the file's body once, into memory; messages name the
URL, never a temporary copy.

Why keep the whole merge list (about 10 bytes a merge, 20 kB at vocab 2048)
rather than a digest: a retrained tokenizer usually has the same vocab size,
and "the first differing merge is #17: 'th'+'e' vs 'e'+' '" tells a user what
changed where two fingerprints alone would not.
"""

from __future__ import annotations

import functools
import json
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol

from safetensors import SafetensorError, safe_open

from pipeline.engine import atomic, locations, storage
from pipeline.engine.locations import Location
from pipeline.errors import CheckpointError, StorageError, TokenizerMismatchError, describe, json_error_reason, shorten
from pipeline.model import integrity, optimizer_state

if TYPE_CHECKING:
    import torch

    from pipeline.model.bigram import BigramLM, ModelConfig

FORMAT = "lmprep-checkpoint/1"
CHECKPOINT_FILE = "checkpoint.safetensors"
TOKENIZER_FILE = "tokenizer.json"
"""Beside the checkpoint: the exact tokenizer file it was trained with, so the directory is self-contained."""
_METADATA_KEY = "lmprep"
_MAX_HEADER_BYTES = 100_000_000  # safetensors' own limit on the JSON header
_MODEL_PREFIX = "model."
_TORCH_RNG = "rng.torch"
_PICKLE_MAGIC = (b"\x80", b"PK\x03\x04")  # pickle protocol 2+, torch.save's zip archive
# What parsing malformed metadata raises (OverflowError: int() of an infinite float).
_MALFORMED = (KeyError, TypeError, ValueError, AttributeError, OverflowError)


class TokenizerLike(Protocol):
    """What the guard reads from a tokenizer (``pipeline.tokenizer.Tokenizer`` has it all)."""

    fingerprint: str
    vocab_size: int
    kind: str
    pattern: str
    special_tokens: Mapping[str, int]
    merges: Sequence[tuple[int, int]]

    def token_bytes(self, id: int) -> bytes: ...


@dataclass(frozen=True)
class TokenizerRecord:
    """What a checkpoint remembers about the tokenizer it was trained with."""

    fingerprint: str
    vocab_size: int
    kind: str
    pattern: str
    special_tokens: dict[str, int]
    merges: list[tuple[int, int]]
    merge_pieces: list[tuple[str, str]]

    @classmethod
    def of(cls, tokenizer: TokenizerLike) -> TokenizerRecord:
        merges = [(int(a), int(b)) for a, b in tokenizer.merges]
        return cls(
            fingerprint=tokenizer.fingerprint,
            vocab_size=tokenizer.vocab_size,
            kind=tokenizer.kind,
            pattern=tokenizer.pattern,
            special_tokens=dict(tokenizer.special_tokens),
            merges=merges,
            merge_pieces=[(_piece(tokenizer, a), _piece(tokenizer, b)) for a, b in merges],
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "fingerprint": self.fingerprint,
            "vocab_size": self.vocab_size,
            "kind": self.kind,
            "pattern": self.pattern,
            "special_tokens": self.special_tokens,
            "merges": [list(pair) for pair in self.merges],
            "merge_pieces": [list(pair) for pair in self.merge_pieces],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TokenizerRecord:
        return cls(
            fingerprint=str(data["fingerprint"]),
            vocab_size=int(data["vocab_size"]),
            kind=str(data["kind"]),
            pattern=str(data["pattern"]),
            special_tokens={str(k): int(v) for k, v in data["special_tokens"].items()},
            merges=[(int(a), int(b)) for a, b in data["merges"]],
            merge_pieces=[(str(a), str(b)) for a, b in data["merge_pieces"]],
        )


@dataclass(frozen=True)
class CheckpointHeader:
    """What a checkpoint's safetensors header says: its metadata and each tensor's shape."""

    path: Location  # a URL for a checkpoint in object storage
    step: int
    tokenizer: TokenizerRecord
    metadata: dict[str, Any]
    shapes: dict[str, tuple[int, ...]]
    checksums: dict[str, str]  # tensor name -> SHA-256 of its dtype, shape and bytes

    @property
    def train_config(self) -> dict[str, Any]:
        """The train settings the checkpoint was trained with (CheckpointError if the header's are malformed)."""
        recorded = self.metadata.get("train_config")
        if not isinstance(recorded, dict):
            raise CheckpointError(_malformed_message(self.path, TypeError(f"train_config is {describe(recorded)}")))
        return recorded

    @property
    def shard_fingerprint(self) -> str | None:
        return self.metadata.get("shard_fingerprint")


@dataclass
class Checkpoint:
    """A loaded checkpoint: the model with its weights, plus what resuming needs."""

    path: Location  # a URL for a checkpoint in object storage
    step: int
    model: BigramLM
    tokenizer: TokenizerRecord
    shard_fingerprint: str | None
    train_config: dict[str, Any]
    optimizer_state: dict[str, Any] | None = None
    numpy_rng_state: dict[str, Any] | None = None
    torch_rng_state: torch.Tensor | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def model_config(self) -> ModelConfig:
        return self.model.config


def checkpoint_file(path: Location) -> Path | str:
    """The checkpoint file for ``path``, which may name the file or its directory (a URL stays a URL)."""
    if locations.is_url(path):
        text = os.fspath(path).rstrip("/")
        return text if text.endswith(".safetensors") else locations.join(text, CHECKPOINT_FILE)
    path = Path(path)
    return path if path.suffix == ".safetensors" else path / CHECKPOINT_FILE


def checkpoint_exists(path: Location) -> bool:
    """Whether there is a checkpoint file at ``path`` (remotely: in the committed output)."""
    file = checkpoint_file(path)
    return storage.exists(file) if isinstance(file, str) else file.exists()


def tokenizer_beside(path: Location) -> Path | str | None:
    """The tokenizer file kept beside a checkpoint (given as its file or directory), if there is one;
    remotely the committed object to read."""
    file = checkpoint_file(path)
    if isinstance(file, str):
        beside = locations.join(file.rsplit("/", 1)[0], TOKENIZER_FILE)
        return stored_object(beside) if storage.exists(beside) else None
    beside = file.with_name(TOKENIZER_FILE)
    return beside if beside.is_file() else None


def stored_object(location: str) -> str:
    """Where a file named in a remote checkpoint directory (a committed output) is read: in its committed attempt
    (StorageError naming the directory when it holds no commit)."""
    directory, _, name = os.fspath(location).rpartition("/")
    return os.fspath(locations.join(storage.committed(directory), name))


def save_checkpoint(
    path: Location,
    *,
    model: BigramLM,
    step: int,
    tokenizer: TokenizerLike,
    shard_fingerprint: str | None,
    train_config: Mapping[str, Any],
    optimizer: torch.optim.Optimizer | None = None,
    numpy_rng_state: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
    companions: Mapping[str, bytes] | None = None,
) -> Path:
    """Atomically write a checkpoint to ``path`` (a ``.safetensors`` file or a directory), with ``companions``
    (file name -> bytes) beside it, their checksums in its metadata."""
    import torch

    tensors = {_MODEL_PREFIX + name: t.detach().contiguous() for name, t in model.state_dict().items()}
    tensors[_TORCH_RNG] = torch.get_rng_state()
    optimizer_meta = None
    if optimizer is not None:
        optimizer_tensors, optimizer_meta = optimizer_state.flatten(optimizer.state_dict())
        tensors.update(optimizer_tensors)
    metadata = {
        "format": FORMAT,
        "step": step,
        "model": model.config.to_dict(),
        "tokenizer": TokenizerRecord.of(tokenizer).to_dict(),
        "shard_fingerprint": shard_fingerprint,
        "train_config": dict(train_config),
        "optimizer": optimizer_meta,
        "numpy_rng_state": dict(numpy_rng_state) if numpy_rng_state is not None else None,
        "extra": dict(extra or {}),
    }
    target = checkpoint_file(path)
    if companions is not None:
        metadata[integrity.COMPANIONS] = integrity.companion_checksums(companions)
        for name, data in companions.items():
            atomic.write_bytes(target.with_name(name), data)
    with atomic.atomic_path(target) as tmp:
        _save_file(tensors, tmp, metadata={_METADATA_KEY: integrity.seal(metadata, tensors)})
    return target


def _save_file(tensors: dict[str, torch.Tensor], path: Path, metadata: dict[str, str]) -> None:
    """safetensors' ``save_file``, raising a failed write (a full disk) as the OSError it is:
    safetensors reports it as its own error type with ``(os error N)`` in the text."""
    from safetensors.torch import save_file

    try:
        save_file(tensors, str(path), metadata=metadata)
    except SafetensorError as exc:
        found = re.search(r"\(os error (\d+)\)", str(exc))
        if found is None:
            raise
        code = int(found.group(1))
        raise OSError(code, os.strerror(code), str(path)) from exc


def read_header(path: Location) -> CheckpointHeader:
    """Read a checkpoint's header only: no tensor is loaded and torch is not imported."""
    file = checkpoint_file(path)
    if isinstance(file, str):
        with storage.open_input(stored_object(file)) as handle:  # two ranges: the length, then the header
            head = handle.read(8)
            return _header(file, *_remote_header(file, head, handle.read(_header_size(head))))
    return _header(file, *_local_header(file))


def read_sealed_header(path: Location) -> CheckpointHeader:
    """A checkpoint's header and, for a local one, its tensors' bytes checked against their checksums, as
    :func:`read_checkpoint` checks them, without importing torch or holding more than one tensor (a remote
    one's tensors are not downloaded). What only building the model tells (NaN weights, an optimizer state that
    does not fit it) is left to :func:`read_checkpoint`."""
    header = read_header(path)
    if not isinstance(header.path, Path):
        return header
    if sys.byteorder != "little":  # the checksums are of the bytes torch holds, which the file's are not
        read_checkpoint(path)
        return header
    with open(header.path, "rb") as handle:
        integrity.verify_stored_tensors(header.path, header.checksums, _stored_tensors(header.path, handle))
    return header


def read_checkpoint(path: Location) -> Checkpoint:
    """Read a checkpoint without checking its tokenizer (use :func:`load_checkpoint`).

    A remote one is read in one request: header and tensors come from the same bytes."""
    from pipeline.model.bigram import ModelConfig

    file = checkpoint_file(path)
    data = storage.read_bytes(stored_object(file)) if isinstance(file, str) else None
    if data is None:
        header = read_header(file)
    else:
        header = _header(file, *_remote_header(file, data[:8], data[8:8 + _header_size(data[:8])]))
    try:
        config = ModelConfig.from_dict(header.metadata["model"])
        _check_model_shapes(header, config)
        tensors = _read_tensors(file) if data is None else _tensors_of_bytes(file, data)
        integrity.verify_tensors(header.path, header.checksums, tensors)
        return _assemble(header, config, tensors)
    except _MALFORMED as exc:
        raise CheckpointError(_malformed_message(header.path, exc)) from None


def _header(file: Location, raw: str | None, shapes: dict[str, tuple[int, ...]]) -> CheckpointHeader:
    """The header of ``file`` from its raw lmprep metadata (a JSON text) and its tensors' shapes; the metadata
    must match its checksum."""
    if raw is None:
        raise CheckpointError(f"{file} is a safetensors file without lmprep checkpoint metadata")
    try:
        metadata = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise CheckpointError(f"checkpoint {file} has metadata that is not JSON: {json_error_reason(exc)}") from None
    if not isinstance(metadata, dict) or metadata.get("format") != FORMAT:
        raise CheckpointError(f"checkpoint {file} is not in format {FORMAT!r}")
    tensor_checksums = integrity.verify_metadata(file, metadata)
    if _name(file) == CHECKPOINT_FILE:  # in its directory: the files beside it are its own
        integrity.verify_companions(file, metadata, lambda name: _companion(file, name))
    try:
        return CheckpointHeader(path=file, step=_non_negative_int(metadata["step"]),
                                tokenizer=TokenizerRecord.from_dict(metadata["tokenizer"]),
                                metadata=metadata, shapes=shapes, checksums=tensor_checksums)
    except _MALFORMED as exc:
        raise CheckpointError(_malformed_message(file, exc)) from None


def _name(file: Location) -> str:
    return file.name if isinstance(file, Path) else file.rstrip("/").rsplit("/", 1)[-1]


def _companion(file: Location, name: str) -> bytes | None:
    """The bytes of the file ``name`` beside the checkpoint ``file`` (None: there is none), read within a bound."""
    if isinstance(file, str):
        beside: Location = stored_object(locations.join(file.rsplit("/", 1)[0], name))
    else:
        beside = file.with_name(name)
    try:
        return storage.read_bounded(beside, integrity.MAX_COMPANION_BYTES, what="checkpoint file")
    except FileNotFoundError:
        return None
    except StorageError as exc:  # not a regular file, too large
        raise CheckpointError(f"checkpoint {file} is damaged: {exc}; retrain it with `lmprep run train`") from None


def _malformed_message(file: Location, exc: Exception) -> str:
    reason = shorten(f"{type(exc).__name__}: {exc}")
    return f"checkpoint {file} has malformed metadata ({reason}); retrain it with `lmprep run train`"


def load_checkpoint(path: Location, tokenizer: TokenizerLike) -> Checkpoint:
    """Read a checkpoint and refuse it unless ``tokenizer`` is the one it was trained with."""
    checkpoint = read_checkpoint(path)
    check_tokenizer(checkpoint, tokenizer)
    return checkpoint


def check_tokenizer(checkpoint: Checkpoint | CheckpointHeader, tokenizer: TokenizerLike) -> None:
    """Raise TokenizerMismatchError unless the fingerprints (and vocab sizes) are equal.

    Equal vocab sizes prove nothing: a tokenizer retrained on changed data has
    the same size but gives the IDs other meanings, so the model would read
    garbage. The fingerprint covers every merge, the pattern and the specials.
    """
    expected = checkpoint.tokenizer
    if expected.fingerprint == tokenizer.fingerprint and expected.vocab_size == tokenizer.vocab_size:
        return
    actual = TokenizerRecord.of(tokenizer)
    raise TokenizerMismatchError(
        f"checkpoint {checkpoint.path} was trained with tokenizer {expected.fingerprint} "
        f"(vocab size {expected.vocab_size:,}), but the given tokenizer is {actual.fingerprint} "
        f"(vocab size {actual.vocab_size:,}); {describe_difference(expected, actual)}. "
        "Sample with the tokenizer the checkpoint was trained with, or retrain: `lmprep run train`"
    )


def describe_difference(expected: TokenizerRecord, actual: TokenizerRecord) -> str:
    """Name the first thing that differs, merges first since they change most often."""
    for index, (old, new) in enumerate(zip(_merge_keys(expected), _merge_keys(actual))):
        if old != new:
            return (
                f"first differing merge is #{index}: checkpoint {_show_merge(old)} "
                f"vs tokenizer {_show_merge(new)}"
            )
    if len(expected.merges) != len(actual.merges):
        shared = min(len(expected.merges), len(actual.merges))
        return (
            f"the checkpoint's tokenizer has {len(expected.merges):,} merges and the given one "
            f"{len(actual.merges):,}; the first {shared:,} agree"
        )
    for name in ("kind", "pattern", "special_tokens"):
        old, new = getattr(expected, name), getattr(actual, name)
        if old != new:
            return f"the merges agree but {name} differs: checkpoint {old!r} vs tokenizer {new!r}"
    return "merges, kind, pattern and special tokens agree, so another setting differs"


def _merge_keys(record: TokenizerRecord) -> list[tuple[tuple[int, int], tuple[str, str]]]:
    return list(zip(record.merges, record.merge_pieces))


def _show_merge(key: tuple[tuple[int, int], tuple[str, str]]) -> str:
    (a, b), (left, right) = key
    return f"{left!r}+{right!r} (IDs {a}, {b})"


def _piece(tokenizer: TokenizerLike, id: int) -> str:
    """A token's bytes as readable text; bytes that are not UTF-8 show as ``\\xNN``."""
    return tokenizer.token_bytes(id).decode("utf-8", errors="backslashreplace")


def _local_header(file: Path) -> tuple[str | None, dict[str, tuple[int, ...]]]:
    """The raw lmprep metadata and every tensor's shape, from a local file's header alone."""
    if not file.is_file():
        if file.name == CHECKPOINT_FILE and file.parent.is_file():  # a file given where its directory would be
            raise CheckpointError(f"{file.parent} is not a checkpoint: give a .safetensors file or the directory "
                                  f"that holds {CHECKPOINT_FILE}")
        raise CheckpointError(
            f"no checkpoint at {file}; train one with `lmprep run train` or give the path of an existing checkpoint"
        )
    try:
        with safe_open(str(file), framework="numpy") as handle:  # "numpy": opening does not import torch
            raw = (handle.metadata() or {}).get(_METADATA_KEY)
            shapes = {name: tuple(handle.get_slice(name).get_shape()) for name in handle.keys()}
    except (SafetensorError, OSError) as exc:
        raise CheckpointError(_unreadable_message(file, exc)) from None
    return raw, shapes


def _header_size(head: bytes) -> int:
    """The header's length that a safetensors file's first 8 bytes give; 0 where none is plausible."""
    length = int.from_bytes(head, "little") if len(head) == 8 else 0
    return length if length <= _MAX_HEADER_BYTES else 0


def _remote_header(file: str, head: bytes, rest: bytes) -> tuple[str | None, dict[str, tuple[int, ...]]]:
    """:func:`_local_header` from a remote file's first 8 bytes and (at least) the header after them. No library
    reads a safetensors header over ranges."""
    header = _parsed_header(file, head, rest)
    try:
        raw = header.get("__metadata__", {}).get(_METADATA_KEY)
        if raw is not None and not isinstance(raw, str):
            raise TypeError("the metadata is not text")
        shapes = {name: tuple(int(size) for size in entry["shape"])
                  for name, entry in header.items() if name != "__metadata__"}
    except _MALFORMED as exc:
        raise CheckpointError(_unreadable_message(file, f"malformed header: {type(exc).__name__}", head)) from None
    return raw, shapes


def _parsed_header(file: Location, head: bytes, rest: bytes) -> dict[str, Any]:
    """A safetensors header from a file's first 8 bytes and (at least) the header after them, as the format lays
    it out: the header's length, little-endian, then the header, a JSON object of ``__metadata__`` (text to text)
    and each tensor's dtype, shape and offsets into the data after the header."""
    length = _header_size(head)
    if not 0 < length <= len(rest):
        raise CheckpointError(_unreadable_message(file, "no safetensors header", head))
    try:
        header = json.loads(rest[:length])
    except (ValueError, RecursionError) as exc:
        raise CheckpointError(_unreadable_message(file, f"malformed header: {type(exc).__name__}", head)) from None
    if not isinstance(header, dict):
        raise CheckpointError(_unreadable_message(file, "malformed header: not an object", head))
    return header


def _stored_tensors(file: Path, handle: BinaryIO) -> dict[str, tuple[str, list[int], Callable[[], bytes]]]:
    """Each tensor of the safetensors file open as ``handle``: its dtype code, shape and a reader of its bytes."""
    head = handle.read(8)
    header = _parsed_header(file, head, handle.read(_header_size(head)))
    start, size = 8 + _header_size(head), os.fstat(handle.fileno()).st_size
    stored = {}
    try:
        for name, entry in header.items():
            if name == "__metadata__":
                continue
            begin, end = (start + int(offset) for offset in entry["data_offsets"])
            if entry["dtype"] not in integrity.TORCH_DTYPES or not start <= begin <= end <= size:
                raise ValueError(f"tensor {name}: dtype {entry['dtype']!r}, or its bytes are outside the file")
            read = functools.partial(_read_range, handle, begin, end - begin)
            stored[name] = (entry["dtype"], [int(length) for length in entry["shape"]], read)
    except _MALFORMED as exc:
        raise CheckpointError(_unreadable_message(file, f"malformed header: {type(exc).__name__}", head)) from None
    return stored


def _read_range(handle: BinaryIO, offset: int, size: int) -> bytes:
    handle.seek(offset)
    return handle.read(size)


def _read_tensors(file: Path) -> dict[str, torch.Tensor]:
    try:
        with safe_open(str(file), framework="pt") as handle:
            return {name: handle.get_tensor(name) for name in handle.keys()}
    except (SafetensorError, OSError) as exc:
        raise CheckpointError(_unreadable_message(file, exc)) from None


def _tensors_of_bytes(file: str, data: bytes) -> dict[str, torch.Tensor]:
    """The tensors of a checkpoint read into memory (safetensors checks the header against the bytes)."""
    from safetensors.torch import load

    try:
        return load(data)
    except (SafetensorError, OSError) as exc:
        raise CheckpointError(_unreadable_message(file, exc, data[:4])) from None


def _unreadable_message(file: Location, reason: object, head: bytes | None = None) -> str:
    """Say why a file is refused, given its first bytes (read here from a local file); pickles get their own
    reason (they could run code)."""
    if head is None:
        with open(file, "rb") as handle:
            head = handle.read(4)
    if head.startswith(_PICKLE_MAGIC):
        return (
            f"{file} is a pickle or torch.save archive; lmprep refuses to load it because "
            "unpickling can run arbitrary code. Checkpoints are safetensors files written by "
            "`lmprep run train`"
        )
    return f"{file} is not a readable safetensors checkpoint ({reason}); retrain it with `lmprep run train`"


def _check_model_shapes(header: CheckpointHeader, config: ModelConfig) -> None:
    """The model tensors the header lists must be exactly those ``config`` builds, shape for shape.

    The model is built on torch's meta device, which allocates nothing, so a
    config forged to need 400 GB is refused before any memory is taken.
    """
    import torch

    from pipeline.model.bigram import BigramLM

    found = {name[len(_MODEL_PREFIX) :]: shape for name, shape in header.shapes.items()
             if name.startswith(_MODEL_PREFIX)}
    try:
        with torch.device("meta"):
            expected = {name: tuple(t.shape) for name, t in BigramLM(config).state_dict().items()}
    except RuntimeError:  # sizes whose product overflows: no file holds such tensors
        expected = None
    if found != expected:
        raise CheckpointError(
            f"checkpoint {header.path}: its model config {config.to_dict()} does not match the model "
            f"tensors the file holds {found}; retrain it with `lmprep run train`"
        )
    padded = _padded_vocab_size(header)
    if config.vocab_size != padded:
        padding = "" if padded == header.tokenizer.vocab_size else f", padded to {padded}"
        raise CheckpointError(
            f"checkpoint {header.path}: the model has vocab size {config.vocab_size:,}, but its tokenizer "
            f"record says {header.tokenizer.vocab_size:,}{padding}; retrain it with `lmprep run train`"
        )


def _padded_vocab_size(header: CheckpointHeader) -> int:
    """The model vocab size the checkpoint's tokenizer record and recorded ``train.pad_vocab_to`` make."""
    from pipeline.model.bigram import padded_vocab_size

    multiple = header.train_config.get("pad_vocab_to")
    if multiple is not None and (type(multiple) is not int or multiple < 1):
        raise CheckpointError(_malformed_message(header.path, TypeError(f"pad_vocab_to is {multiple!r:.60}")))
    return padded_vocab_size(header.tokenizer.vocab_size, multiple)


def _assemble(header: CheckpointHeader, config: ModelConfig, tensors: dict[str, torch.Tensor]) -> Checkpoint:
    metadata = header.metadata
    optimizer_meta = metadata["optimizer"]
    checkpoint = Checkpoint(
        path=header.path,
        step=header.step,
        model=_build_model(header.path, config, tensors),
        tokenizer=header.tokenizer,
        shard_fingerprint=metadata["shard_fingerprint"],
        train_config=dict(metadata["train_config"]),
        optimizer_state=None if optimizer_meta is None else optimizer_state.unflatten(optimizer_meta, tensors),
        numpy_rng_state=metadata["numpy_rng_state"],
        torch_rng_state=tensors.get(_TORCH_RNG),
        extra=dict(metadata.get("extra") or {}),
    )
    _check_resume_state(checkpoint)
    return checkpoint


def _check_resume_state(checkpoint: Checkpoint) -> None:
    """Raise one of ``_MALFORMED`` unless training can resume from the checkpoint: its optimizer
    state loads into AdamW over its model with numeric hyperparameters and per-parameter tensors of
    their parameter's shape (or scalars), and its numpy state is a
    PCG64 state (``numpy.random.default_rng``'s). Found here, a bad state sets the checkpoint aside
    as unreadable instead of failing half-way into resuming."""
    import numpy as np
    import torch

    state = checkpoint.optimizer_state
    if state is not None:
        optimizer = torch.optim.AdamW(checkpoint.model.parameters())
        optimizer.load_state_dict(state)  # checks the parameter counts, not the state's shapes
        for parameter, values in optimizer.state.items():
            for key, value in values.items():
                if isinstance(value, torch.Tensor) and value.dim() and value.shape != parameter.shape:
                    raise ValueError(f"optimizer state {key} has shape {list(value.shape)}, its parameter "
                                     f"{list(parameter.shape)}")
        for group in state["param_groups"]:
            beta1, beta2 = group["betas"]
            for value in (group["lr"], group["eps"], group["weight_decay"], beta1, beta2):
                if not isinstance(value, (int, float)) or isinstance(value, bool):
                    raise TypeError(f"optimizer hyperparameter {value!r} is not a number")
    if checkpoint.numpy_rng_state is not None:
        np.random.PCG64().state = checkpoint.numpy_rng_state


def _build_model(file: Path, config: ModelConfig, tensors: dict[str, torch.Tensor]) -> BigramLM:
    """The model with the file's weights; NaN or infinite weights are refused (they only make NaN)."""
    import torch

    from pipeline.model.bigram import BigramLM

    weights = {
        name[len(_MODEL_PREFIX) :]: tensor
        for name, tensor in tensors.items()
        if name.startswith(_MODEL_PREFIX)
    }
    for name, tensor in weights.items():
        if not bool(torch.isfinite(tensor).all()):
            raise CheckpointError(
                f"checkpoint {file}: {_MODEL_PREFIX}{name} holds NaN or infinite weights; "
                "retrain it with `lmprep run train`"
            )
    model = BigramLM(config)
    try:
        model.load_state_dict(weights, strict=True)
    except RuntimeError as exc:
        raise CheckpointError(f"checkpoint {file} weights do not fit its model config {config}: {exc}") from None
    model.eval()
    return model


def _non_negative_int(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"step must be a non-negative integer, not {value!r}")
    return value
