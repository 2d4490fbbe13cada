"""The config schema: typed, frozen dataclasses, their defaults and bounds.

The dataclasses below *are* the schema. A generic builder (:mod:`pipeline.config.validate`) walks
their type hints, so a new option is one annotated field: its type, default and bounds drive
validation, ``--set`` overrides and ``lmprep config show``. The helpers at the end walk the schema
for the other modules of the package.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import os
import re
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal, Union

from pipeline.engine import locations
from pipeline.errors import ConfigError
from pipeline.tokenizer.layout import base_id_count

MAX_SEED = 2**63 - 1  # numpy and torch seeds are 64-bit
MAX_WORKERS = 256  # a fixed bound, so a config valid on one machine is valid on all; cores cap the processes
MAX_DIM = 65_536
MAX_POSITIONS = 2**20  # train.context and train.batch_size
# dedup buckets: one task and file each, each task reading every partition's keys (65,536 took over 400 s on a
# corpus of 137 KB). Buckets only bound a task's memory, some 80 bytes a document: 10 billion documents
# (tens of terabytes of text) in 1,024 buckets is under 800 MB a bucket, so no real corpus needs more
MAX_BUCKETS = 1024
# BPE training holds each base token and merge as a character: one per Unicode scalar value except
# U+10FFFF (pipeline/tokenizer/_train_pairs.py), so 1,114,112 code points less 2,048 surrogates less one.
# Special tokens come on top.
MAX_TRAINED_IDS = 1_112_063


INTERNAL = "internal"  # field metadata: not a key of the file (Config.root)
PATH = "path"  # field metadata: "input" (relative to the config's directory) or "output" (to output_root)


def _path(default: Any, kind: str) -> Any:
    return field(default=default, metadata={PATH: kind})


def bounded(default: Any, *, low: float | None = None, high: float | None = None,
             high_inclusive: bool = True, low_inclusive: bool = True) -> Any:
    """A field with a default and an allowed range, checked at load time."""
    return field(default=default, metadata={"low": low, "high": high, "high_inclusive": high_inclusive,
                                            "low_inclusive": low_inclusive})


@dataclass(frozen=True)
class SourceConfig:
    """One glob of raw files (docs/extending.md for ``metadata`` and ``reader``). ``separator`` applies to
    .txt files: ``document`` (a file is one document), ``blank_line``, ``line``, or any other string,
    which is used literally (for example ``<|endoftext|>``). ``weight`` is the source's target share of
    the training tokens, relative to the other sources' (docs/curation.md); with no weight anywhere,
    training samples the natural proportions. It only shapes sampling: prepare and encode ignore it."""

    glob: str = field(metadata={PATH: "input"})
    format: str = "auto"  # "auto" (from the extension) or a reader of pipeline.data.registry: txt, jsonl, parquet, …
    separator: str = "document"
    field: str = "text"
    weight: float | None = bounded(None, low=0.0, low_inclusive=False)
    name: str | None = None  # what a step's only:/except: and the stats call the source
    metadata: tuple[str, ...] = ()  # fields or columns kept with each document: "name" (a string) or "name:type"
    reader: str | None = None  # a function of the user's reading each file: "path/to/file.py:name" or "module:name"


SAMPLING_KEYS = ("weight",)
"""The keys of a source that only training reads (so changing one re-runs train, not prepare)."""


@dataclass(frozen=True)
class DataConfig:
    sources: tuple[SourceConfig, ...] = ()


@dataclass(frozen=True)
class StepConfig:
    """One item of ``prepare.steps``: the step's registered name (:mod:`pipeline.data.registry`) as its one
    key, mapping to its parameters (``settings``, the step's own ``Settings`` dataclass), and optionally
    ``only:`` or ``except:``, the names of the sources (``data.sources[i].name``) it applies to or skips."""

    name: str
    settings: Any = None  # None: the step's defaults (the validation fills them in)
    only: tuple[str, ...] = ()
    except_: tuple[str, ...] = ()

    def plain(self) -> dict[str, Any]:
        """The item as a config file writes it."""
        scope = {key: list(names) for key, names in (("only", self.only), ("except", self.except_)) if names}
        return {self.name: _plain(self.settings), **scope}


@dataclass(frozen=True)
class PrepareConfig:
    normalize: Literal["NFC", "NFKC", "none"] = "NFC"
    min_chars: int = bounded(1, low=0)
    max_chars: int | None = bounded(None, low=1)
    on_decode_error: Literal["error", "replace", "skip"] = "error"
    steps: tuple[StepConfig, ...] = (StepConfig("exact_dedup"),)
    val_fraction: float = bounded(0.05, low=0.0, high=1.0, high_inclusive=False)
    seed: int = bounded(0, low=0, high=MAX_SEED)
    partition_bytes: int = bounded(64_000_000, low=1)
    dedup_buckets: int | None = bounded(None, low=1, high=MAX_BUCKETS)  # deprecated: exact_dedup's own buckets
    output_dir: str = _path("data/prepared", "output")


@dataclass(frozen=True)
class TokenizerConfig:
    path: str | None = _path(None, "input")
    kind: Literal["byte", "char", "word"] = "byte"
    vocab_size: int | None = bounded(2048, low=1)  # or set merges instead (and this to null); see _one_size_key
    merges: int | None = bounded(None, low=0)
    pattern: str | None = None
    merge_newlines: bool | None = None
    min_frequency: int = bounded(2, low=1)
    character_coverage: float = bounded(1.0, low=0.0, high=1.0)  # char kind: share of the text its characters cover
    special_tokens: tuple[str, ...] = ("<|endoftext|>",)
    workers: int = bounded(0, low=0, high=MAX_WORKERS)
    model_max_length: int = bounded(1024, low=1)  # tokenizer_config.json's: where transformers' truncation cuts
    output: str = _path("data/tokenizer/tokenizer.json", "output")


@dataclass(frozen=True)
class EncodeConfig:
    eos_token: str | None = "<|endoftext|>"
    bos_token: str | None = None
    shard_tokens: int = bounded(1_000_000, low=1)
    workers: int = bounded(0, low=0, high=MAX_WORKERS)
    chunk_cache_mb: int = bounded(256, low=0)
    output_dir: str = _path("data/shards", "output")


@dataclass(frozen=True)
class TrainConfig:
    dim: int = bounded(64, low=1, high=MAX_DIM)
    tie_weights: bool = False
    pad_vocab_to: int | None = bounded(None, low=1, high=MAX_DIM)  # model vocab rounded up to a multiple of it
    context: int = bounded(64, low=1, high=MAX_POSITIONS)
    batch_size: int = bounded(32, low=1, high=MAX_POSITIONS)
    steps: int = bounded(300, low=0)
    lr: float = bounded(1e-2, low=0.0)
    weight_decay: float = bounded(0.0, low=0.0)
    eval_every: int = bounded(100, low=1)
    eval_batches: int = bounded(8, low=1)
    checkpoint_every: int | None = bounded(None, low=1)  # also save a checkpoint every N steps (resumable)
    seed: int = bounded(1337, low=0, high=MAX_SEED)
    output_dir: str = _path("checkpoints/default", "output")
    mixture: tuple[float, ...] | None = field(default=None, metadata={INTERNAL: True})
    """``data.sources[i].weight`` of every source, when they are set (the train stage fills it in): not a key
    of the section, but a setting that shapes the weights, so a checkpoint records it and resumes only with it."""


@dataclass(frozen=True)
class ExportConfig:
    """The optional ``export`` stage: present when ``output_dir`` is set."""

    formats: tuple[Literal["parquet", "nanogpt", "megatron"], ...] = ("parquet", "nanogpt")
    output_dir: str | None = _path(None, "output")


@dataclass(frozen=True)
class StatsConfig:
    """The optional ``stats`` stage: present when ``output_dir`` is set."""

    top: int = bounded(10, low=0)
    output_dir: str | None = _path(None, "output")


@dataclass(frozen=True)
class ReportConfig:
    """The optional ``report`` stage (one HTML page of the run): present when ``output`` is set. ``sample``:
    the rejected documents shown per step and rule."""

    sample: int = bounded(12, low=0, high=100)
    output: str | None = _path(None, "output")


@dataclass(frozen=True)
class ExecutorConfig:
    """Where partition tasks run: ``local`` worker processes, or a Dask cluster at ``address``
    (``tcp://host:8786``, or ``local`` for a cluster started on this machine)."""

    kind: Literal["local", "dask"] = "local"
    address: str | None = None
    workers: int = bounded(0, low=0)
    timeout: float = bounded(10.0, low=0.0)


@dataclass(frozen=True)
class StorageConfig:
    """Requests to object stores (``s3://`` and other URLs): the deadline of each connection and read, in
    seconds, and how many times a transient failure is retried, after ``backoff`` seconds doubling each time
    (docs/faults.md). Never changes an output."""

    timeout: float = bounded(15.0, low=0.1, high=3600.0)
    retries: int = bounded(3, low=0, high=20)
    backoff: float = bounded(0.5, low=0.0, high=60.0)


@dataclass(frozen=True)
class Config:
    data: DataConfig = DataConfig()
    prepare: PrepareConfig = PrepareConfig()
    tokenizer: TokenizerConfig = TokenizerConfig()
    encode: EncodeConfig = EncodeConfig()
    train: TrainConfig = TrainConfig()
    export: ExportConfig = ExportConfig()
    stats: StatsConfig = StatsConfig()
    report: ReportConfig = ReportConfig()
    executor: ExecutorConfig = ExecutorConfig()
    storage: StorageConfig = StorageConfig()
    output_root: str = _path(".", "input")
    state_dir: str = _path(".lmprep", "output")
    # shared by the project's configs, so beside their files (as output_root), not under any one's outputs; null = none
    run_cache_dir: str | None = _path(".lmprep/runs", "input")
    root: str = field(default=".", compare=False, metadata={INTERNAL: True})
    """The config file's directory (absolute; "." for a config not read from a file): what paths are relative to."""

    @property
    def project_root(self) -> str:
        """``output_root`` as a path from the current directory: what the pipeline's lock records
        paths relative to, so the lock is the same whichever directory lmprep runs in."""
        return self.here(self.output_root)

    def out(self, value: str) -> str:
        """An output key's value as a path relative to :attr:`project_root` (it is written so), or a URL."""
        return value if locations.is_url(value) else as_directory_if(value, os.path.normpath(value))

    def input(self, value: str) -> str:
        """An input path of the config (relative to its directory) as a path relative to :attr:`project_root`
        (an absolute one stays absolute)."""
        if os.path.isabs(value) or locations.is_url(value):
            return value
        return os.path.relpath(os.path.join(self.root, value), os.path.join(self.root, self.output_root))

    @property
    def names_root(self) -> str:
        """The config's directory as a path from the current directory: what document IDs and the run cache
        name input files from, as the config's globs do, so that configs moving their outputs elsewhere (another
        ``output_root``) give the same IDs and share their runs."""
        return self.here(".")

    def here(self, value: str | os.PathLike[str]) -> str:
        """A path relative to :attr:`root`, as one to open from the current directory: relative while it
        stays below the current directory, else absolute."""
        if self.root == "." or locations.is_url(value):
            return os.fspath(value)
        return as_directory_if(value, locations.openable(os.path.join(self.root, value)))

    def output_path(self, value: str) -> str:
        """An output key's value as a path to open from the current directory (a URL as it is)."""
        return value if locations.is_url(value) else self.here(os.path.join(self.output_root, value))

    def output_value(self, path: str | os.PathLike[str]) -> str:
        """The value of an output key naming ``path`` (a path from the current directory): relative to
        ``output_root``, as a command-line option's path is rewritten."""
        if locations.is_url(path):
            return os.fspath(path)
        return os.path.relpath(os.path.abspath(path), os.path.abspath(self.here(self.output_root)))

    def to_dict(self) -> dict[str, Any]:
        """The whole config as plain JSON-able data (tuples become lists)."""
        return _plain(self)

    def value(self, key_path: str) -> Any:
        """JSON-able value of a key or a section, e.g. ``"train"`` or ``"tokenizer.vocab_size"``."""
        node: Any = self.to_dict()
        for part in split_key(key_path):
            node = _child(node, part, key_path)
        return node



def resolved_size(tok: TokenizerConfig) -> tuple[int | None, int | None]:
    """``(vocab_size, merges)`` with the unset one filled in where the config alone decides it: the byte
    kind always has 256 base tokens; the char kind's base is the training text's characters (None)."""
    if tok.kind != "byte":
        return tok.vocab_size, tok.merges
    reserved = base_id_count("byte") + len(tok.special_tokens)
    if tok.merges is None:
        return tok.vocab_size, tok.vocab_size - reserved
    return reserved + tok.merges, tok.merges


# paths that may not be fsspec URLs: the runner's state (its lock needs a local file system)
LOCAL_ONLY_KEYS = ("state_dir", "run_cache_dir")
OUTPUT_KEYS = ("prepare.output_dir", "tokenizer.output", "encode.output_dir", "train.output_dir", "export.output_dir",
               "stats.output_dir", "report.output")


def as_directory_if(written: str | os.PathLike[str], path: str) -> str:
    """``path`` with a trailing separator when ``written`` had one (it says "a directory": keep saying it)."""
    return path + os.sep if os.fspath(written).endswith(("/", os.sep)) and not path.endswith(os.sep) else path


def path_kind(parts: list[str]) -> str | None:
    """``"input"``, ``"output"`` or None: whether the key at ``parts`` holds a path, and relative to what."""
    cls: Any = Config
    spec = None
    for part in parts:
        if cls is StepConfig:
            return None  # a step's settings hold no config path (a custom step's file is relative to the config)
        if sequence_item_type(cls) is not None:
            cls = sequence_item_type(cls)
            continue
        if not is_dataclass_type(cls):
            return None
        spec = next(f for f in schema_fields(cls) if f.name == part)
        cls = section_type(field_types(cls)[part]) or field_types(cls)[part]
    return spec.metadata.get(PATH) if spec is not None and not is_dataclass_type(cls) else None



# -- walking the schema ----------------------------------------------------


@functools.cache
def field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def schema_fields(cls: type) -> list[dataclasses.Field]:
    """The fields that are keys of a config file (not :attr:`Config.root`)."""
    return [f for f in dataclasses.fields(cls) if not f.metadata.get(INTERNAL)]


def is_dataclass_type(hint: Any) -> bool:
    return isinstance(hint, type) and dataclasses.is_dataclass(hint)


def section_type(hint: Any) -> Any:
    """The dataclass of a section key: ``X`` for ``X`` or ``X | None`` (an optional section), else None."""
    return next((member for member in union_members(hint) if is_dataclass_type(member)), None)


def sequence_item_type(hint: Any) -> Any:
    """``X`` for ``tuple[X, ...]``, else None."""
    if typing.get_origin(hint) is tuple:
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return args[0]
    return None


def union_members(hint: Any) -> tuple:
    if typing.get_origin(hint) in (Union, types.UnionType):
        return typing.get_args(hint)
    return (hint,)



def unknown_key_message(key: str, name: str, known: list[str], origin: str) -> str:
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    hint = f" did you mean {join_key(key.rpartition('.')[0], close[0])!r}?" if close else ""
    return f"{origin}: unknown key {key!r};{hint} allowed here: {', '.join(known)}"


def _child(node: Any, part: str, key_path: str) -> Any:
    if isinstance(node, list) and part.isdigit() and int(part) < len(node):
        return node[int(part)]
    if isinstance(node, dict) and part in node:
        return node[part]
    known = list(node) if isinstance(node, dict) else []
    raise ConfigError(unknown_key_message(key_path, part, known, "config"))


def split_key(key_path: str) -> list[str]:
    """``data.sources[0].glob`` or ``data.sources.0.glob`` as ``["data", "sources", "0", "glob"]``."""
    parts = re.sub(r"\[(\d+)\]", r".\1", key_path).split(".")
    if any(not p for p in parts):
        raise ConfigError(f"{key_path!r} is not a key path; use dots between names, e.g. train.steps")
    return parts


def join_key(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name



def _plain(value: Any) -> Any:
    """JSON-able data; an optional section left unset (such as a step of ``prepare.steps``) is left out."""
    if isinstance(value, StepConfig):
        return value.plain()
    if dataclasses.is_dataclass(value):
        hints = field_types(type(value))
        return {f.name: _plain(getattr(value, f.name)) for f in schema_fields(type(value))
                if not (getattr(value, f.name) is None and section_type(hints[f.name]) is not None)}
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value

