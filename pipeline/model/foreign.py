"""The tokenizer guard for models trained elsewhere: a ``transformers`` ``save_pretrained`` directory or a
nanoGPT ``ckpt.pt``.

lmprep's own checkpoints carry their tokenizer's record in their header; a model another tool trained on
lmprep's exports carries nothing. :func:`stamp_model` writes that record (a
:class:`~pipeline.model.checkpoint.TokenizerRecord`, merges included, so a mismatch names the first differing
merge) into ``lmprep.json`` beside the model's files; :func:`check_model` reads it back with the vocabulary
size the model declares itself: ``config.json``'s ``vocab_size`` for ``transformers``, ``model_args['vocab_size']``
of a nanoGPT checkpoint (else its token embedding's rows). A ``ckpt.pt`` is opened with
``torch.load(weights_only=True, mmap=True)``: no pickled code can run and no tensor is read.

A model may have more embedding rows than the tokenizer has IDs (nanoGPT pads GPT-2's 50,257 to 50,304,
Megatron to a multiple of 128): the tokenizer never produces the extra IDs. Fewer rows cannot be the model
of that tokenizer. The stamp also records the model's vocabulary size, so a directory that was trained anew
after it was stamped is not vouched for by its old stamp.
"""

from __future__ import annotations

import json
import os
import pickle
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.engine import atomic
from pipeline.errors import CheckpointError, TokenizerMismatchError, json_error_reason
from pipeline.model.checkpoint import TokenizerLike, TokenizerRecord, describe_difference

STAMP_FILE = "lmprep.json"
STAMP_FORMAT = "lmprep-stamp/1"
HF_CONFIG = "config.json"
NANOGPT_CHECKPOINT = "ckpt.pt"
# nanoGPT's token embedding, also under torch.compile's prefix (nanoGPT saves the compiled model's state)
NANOGPT_EMBEDDING = ("transformer.wte.weight", "_orig_mod.transformer.wte.weight")


@dataclass(frozen=True)
class ForeignModel:
    """A model trained elsewhere: where it is, which tool's, and the vocabulary size it declares."""

    directory: Path
    tool: str  # "transformers" or "nanoGPT"
    source: Path  # the file the vocabulary size was read from
    vocab_size: int

    @property
    def stamp_path(self) -> Path:
        return self.directory / STAMP_FILE


@dataclass(frozen=True)
class Stamp:
    """What ``lmprep.json`` says: the tokenizer the model was trained with, and the model's vocabulary size then."""

    tokenizer: TokenizerRecord
    model_vocab_size: int


def is_foreign_model(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a local ``transformers`` model directory, a nanoGPT ``ckpt.pt`` or its directory."""
    path = Path(path)
    if path.suffix == ".pt":
        return path.is_file()
    return path.is_dir() and any((path / name).is_file() for name in (HF_CONFIG, NANOGPT_CHECKPOINT))


def open_model(path: str | os.PathLike[str]) -> ForeignModel:
    """The model at ``path`` (see :func:`is_foreign_model`); CheckpointError naming the file at fault."""
    path = Path(path)
    if path.suffix == ".pt" or not (path / HF_CONFIG).is_file():
        file = path if path.suffix == ".pt" else path / NANOGPT_CHECKPOINT
        if not file.is_file():
            raise CheckpointError(f"{path}: no {HF_CONFIG} (a transformers save_pretrained directory) or "
                                  f"{NANOGPT_CHECKPOINT} (a nanoGPT checkpoint) here")
        return ForeignModel(file.parent, "nanoGPT", file, _nanogpt_vocab_size(file))
    config = path / HF_CONFIG
    return ForeignModel(path, "transformers", config, _hf_vocab_size(config))


def stamp_model(path: str | os.PathLike[str], tokenizer: TokenizerLike, *, force: bool = False) -> ForeignModel:
    """Write ``tokenizer``'s record beside the model at ``path``: the user vouches it was trained with it.

    TokenizerMismatchError if the model has fewer IDs than the tokenizer (it cannot have been), or if it is
    already stamped with another tokenizer and ``force`` is not set (a stamp is never silently replaced)."""
    model = open_model(path)
    if model.vocab_size < tokenizer.vocab_size:
        raise TokenizerMismatchError(f"{_too_small(model, tokenizer)}; it cannot have been trained with it")
    stamp = read_stamp(model)
    if stamp is not None and stamp.tokenizer.fingerprint != tokenizer.fingerprint and not force:
        raise TokenizerMismatchError(
            f"{model.stamp_path} already says the model was trained with tokenizer {stamp.tokenizer.fingerprint}, not "
            f"{tokenizer.fingerprint}; pass --force to replace the stamp (only if that one is wrong)")
    atomic.write_json(model.stamp_path, {"format": STAMP_FORMAT, "tool": model.tool,
                                         "model_vocab_size": model.vocab_size,
                                         "tokenizer": TokenizerRecord.of(tokenizer).to_dict()})
    return model


def check_model(path: str | os.PathLike[str], tokenizer: TokenizerLike) -> ForeignModel:
    """The model at ``path`` if it was stamped with ``tokenizer`` and holds its IDs, else TokenizerMismatchError
    saying what differs (the first differing merge where the fingerprints do)."""
    model = open_model(path)
    stamp = read_stamp(model)
    if stamp is None:
        raise TokenizerMismatchError(
            f"{model.directory} has no {STAMP_FILE}, so nothing says which tokenizer the model was trained with; "
            f"run `lmprep stamp {model.directory} --tokenizer <the tokenizer it was trained with>`")
    recorded = stamp.tokenizer
    if recorded.fingerprint != tokenizer.fingerprint or recorded.vocab_size != tokenizer.vocab_size:
        actual = TokenizerRecord.of(tokenizer)
        raise TokenizerMismatchError(
            f"{model.directory} was trained with tokenizer {recorded.fingerprint} (vocab size "
            f"{recorded.vocab_size:,}, says {model.stamp_path}), but the given tokenizer is {actual.fingerprint} "
            f"(vocab size {actual.vocab_size:,}); {describe_difference(recorded, actual)}")
    if stamp.model_vocab_size != model.vocab_size:
        raise TokenizerMismatchError(
            f"{model.source} declares {model.vocab_size:,} IDs but {stamp.model_vocab_size:,} when {model.stamp_path} "
            "was written: the model changed since; stamp it again with the tokenizer it was trained with")
    if model.vocab_size < tokenizer.vocab_size:
        raise TokenizerMismatchError(_too_small(model, tokenizer))
    return model


def read_stamp(model: ForeignModel) -> Stamp | None:
    """The model's stamp; None if it has none, CheckpointError if it is malformed."""
    if not model.stamp_path.is_file():
        return None
    data = _read_json(model.stamp_path)
    if not isinstance(data, dict) or data.get("format") != STAMP_FORMAT:
        raise CheckpointError(f"{model.stamp_path} is not an lmprep stamp (format {STAMP_FORMAT!r}); "
                              "remove it and stamp the model with `lmprep stamp`")
    try:
        size = data["model_vocab_size"]
        if type(size) is not int:
            raise TypeError(f"model_vocab_size is {size!r:.40}")
        return Stamp(TokenizerRecord.from_dict(data["tokenizer"]), size)
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
        reason = " ".join(f"{type(exc).__name__}: {exc}".split())[:200]
        raise CheckpointError(f"{model.stamp_path} is malformed ({reason}); remove it and stamp the model "
                              "with `lmprep stamp`") from None


def _too_small(model: ForeignModel, tokenizer: TokenizerLike) -> str:
    return (f"{model.source} declares a vocabulary of {model.vocab_size:,} IDs, fewer than the "
            f"{tokenizer.vocab_size:,} of tokenizer {tokenizer.fingerprint}")


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_bytes())
    except (ValueError, RecursionError) as exc:
        raise CheckpointError(f"{path} is not JSON: {json_error_reason(exc)}") from None


def _hf_vocab_size(config: Path) -> int:
    """``vocab_size`` of a ``transformers`` config (a composite model's is in ``text_config``)."""
    data = _read_json(config)
    if isinstance(data, dict) and "vocab_size" not in data and isinstance(data.get("text_config"), dict):
        data = data["text_config"]
    size = data.get("vocab_size") if isinstance(data, dict) else None
    if type(size) is not int or size < 1:
        raise CheckpointError(f"{config} gives no vocab_size (a positive integer), got {size!r:.40}")
    return size


def _nanogpt_vocab_size(file: Path) -> int:
    """``model_args['vocab_size']`` of a nanoGPT checkpoint, else the rows of its token embedding."""
    checkpoint = _load_weights_only(file)
    args = checkpoint.get("model_args") if isinstance(checkpoint, Mapping) else None
    size = args.get("vocab_size") if isinstance(args, Mapping) else None
    if type(size) is int and size >= 1:
        return size
    state = checkpoint.get("model") if isinstance(checkpoint, Mapping) else None
    for name in NANOGPT_EMBEDDING:
        embedding = state.get(name) if isinstance(state, Mapping) else None
        if getattr(embedding, "ndim", 0) == 2:
            return int(embedding.shape[0])
    raise CheckpointError(f"{file} has neither model_args['vocab_size'] nor model['transformer.wte.weight']: "
                          "not a nanoGPT checkpoint")


def _load_weights_only(file: Path) -> Any:
    """``torch.load`` that only builds tensors and plain containers (never runs pickled code), memory-mapped."""
    import torch

    try:
        return torch.load(file, map_location="cpu", weights_only=True, mmap=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError, ValueError) as exc:
        reason = " ".join(str(exc).split())[:200]
        raise CheckpointError(f"{file} cannot be read as weights alone, so lmprep does not load it (unpickling "
                              f"anything else can run code): {reason}") from None
