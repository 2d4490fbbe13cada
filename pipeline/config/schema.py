"""The run configuration: a YAML file read into typed, frozen dataclasses.

The dataclasses below *are* the schema. A generic builder walks their type
hints, so a new option is one annotated field: its type, default and bounds
drive validation, ``--set`` overrides and ``lmprep config show``. Every error
names the key path, the value at fault and what is allowed, and an unknown key
comes with a did-you-mean suggestion, because a typo in a config file should
never silently fall back to a default.

Paths in a config file are relative to the file's directory (as DVC's are to
``dvc.yaml``), so a project runs the same from any working directory; outputs
(and ``state_dir``) are relative to ``output_root``, itself relative to that
directory. ``--set`` paths are relative to the current directory. A config may
``extends: other.yaml`` and give only the keys that differ; every value
remembers where it came from (:func:`load_config_with_origins`).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import os
import re
import reprlib
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Union

import yaml

from pipeline.engine import storage
from pipeline.errors import ConfigError

BYTE_ALPHABET = 256
MAX_SEED = 2**63 - 1  # numpy and torch seeds are 64-bit
MAX_WORKERS = 256  # a fixed bound, so a config valid on one machine is valid on all; cores cap the processes
MAX_DIM = 65_536
MAX_POSITIONS = 2**20  # train.context and train.batch_size
# BPE training holds each base token and merge as a character: one per Unicode scalar value except
# U+10FFFF (pipeline/tokenizer/_train_pairs.py), so 1,114,112 code points less 2,048 surrogates less one.
# Special tokens come on top.
MAX_TRAINED_IDS = 1_112_063


INTERNAL = "internal"  # field metadata: not a key of the file (Config.root)
PATH = "path"  # field metadata: "input" (relative to the config's directory) or "output" (to output_root)


def _path(default: Any, kind: str) -> Any:
    return field(default=default, metadata={PATH: kind})


def _bounded(default: Any, *, low: float | None = None, high: float | None = None,
             high_inclusive: bool = True) -> Any:
    """A field with a default and an allowed range, checked at load time."""
    return field(default=default, metadata={"low": low, "high": high, "high_inclusive": high_inclusive})


@dataclass(frozen=True)
class SourceConfig:
    """One glob of raw files. ``separator`` applies to .txt files: ``document``
    (a file is one document), ``blank_line``, ``line``, or any other string,
    which is used literally (for example ``<|endoftext|>``)."""

    glob: str = field(metadata={PATH: "input"})
    format: Literal["auto", "txt", "jsonl", "parquet"] = "auto"
    separator: str = "document"
    field: str = "text"


@dataclass(frozen=True)
class DataConfig:
    sources: tuple[SourceConfig, ...] = ()


@dataclass(frozen=True)
class ExactDedupStep:
    """Drop a document whose cleaned text equals an earlier one's; the first copy in corpus order stays.
    It has no parameters: its tasks are ``prepare.dedup_buckets``."""


@dataclass(frozen=True)
class NearDedupStep:
    """Drop a document whose MinHash-estimated Jaccard similarity with an earlier one is at least
    ``threshold`` (docs/curation.md): ``bands`` × ``rows`` of the ``hashes`` signature values find the
    candidate pairs, all ``hashes`` values verify them."""

    shingle: Literal["words", "chars"] = "words"
    shingle_size: int = _bounded(5, low=1, high=1024)
    hashes: int = _bounded(256, low=1, high=4096)
    bands: int = _bounded(16, low=1)
    rows: int = _bounded(4, low=1)
    threshold: float = _bounded(0.8, low=0.0, high=1.0)
    seed: int = _bounded(0, low=0, high=2**32 - 1)
    buckets: int = _bounded(16, low=1)


@dataclass(frozen=True)
class GopherQualityStep:
    """Gopher's quality rules (Rae et al. 2021, A.1.1): drop a document outside these bounds."""

    min_words: int = _bounded(50, low=0)
    max_words: int = _bounded(100_000, low=0)
    min_mean_word_length: float = _bounded(3.0, low=0.0)
    max_mean_word_length: float = _bounded(10.0, low=0.0)
    max_symbol_word_ratio: float = _bounded(0.1, low=0.0)  # "#" per word, and "..." per word
    max_bullet_lines: float = _bounded(0.9, low=0.0, high=1.0)
    max_ellipsis_lines: float = _bounded(0.3, low=0.0, high=1.0)
    min_alphabetic_words: float = _bounded(0.8, low=0.0, high=1.0)
    min_stop_words: int = _bounded(2, low=0)
    stop_words: tuple[str, ...] = ("the", "be", "to", "of", "and", "that", "have", "with")


@dataclass(frozen=True)
class GopherRepetitionStep:
    """Gopher's repetition rules (Rae et al. 2021, table A1): drop a document that repeats itself more."""

    max_duplicate_lines: float = _bounded(0.3, low=0.0, high=1.0)
    max_duplicate_paragraphs: float = _bounded(0.3, low=0.0, high=1.0)
    max_duplicate_line_chars: float = _bounded(0.2, low=0.0, high=1.0)
    max_duplicate_paragraph_chars: float = _bounded(0.2, low=0.0, high=1.0)
    max_top_ngram_chars: tuple[float, ...] = (0.20, 0.18, 0.16)  # the n-grams of 2, 3, 4 words
    max_duplicate_ngram_chars: tuple[float, ...] = (0.15, 0.14, 0.13, 0.12, 0.11, 0.10)  # of 5 to 10 words


@dataclass(frozen=True)
class C4Step:
    """C4's rules (Raffel et al. 2020, section 2.2): lines kept only when they end in terminal punctuation,
    have ``min_words_per_line`` words and mention neither JavaScript nor a cookie or terms policy; pages
    dropped with fewer than ``min_sentences`` sentences left, "lorem ipsum" or a curly bracket."""

    min_words_per_line: int = _bounded(3, low=0)
    min_sentences: int = _bounded(5, low=0)
    max_word_length: int = _bounded(1000, low=1)
    terminal_punctuation: bool = True
    javascript_lines: bool = True  # drop the lines that mention javascript
    policy_lines: bool = True  # drop the lines that mention terms of use, privacy or cookie policies
    lorem_ipsum: bool = True  # drop the pages with "lorem ipsum"
    curly_bracket: bool = True  # drop the pages with "{" (code)
    citations: bool = True  # remove citation markers such as [1] and [citation needed] from lines


@dataclass(frozen=True)
class FineWebStep:
    """FineWeb's own rules (Penedo et al. 2024, section 3.4): drop a document when at most
    ``min_punctuated_lines`` of its lines end in punctuation, at least ``max_duplicate_line_chars`` of its
    characters are in repeated lines, or at least ``max_short_lines`` of its lines are shorter than
    ``short_line_chars``."""

    min_punctuated_lines: float = _bounded(0.12, low=0.0, high=1.0)
    max_duplicate_line_chars: float = _bounded(0.1, low=0.0, high=1.0)
    max_short_lines: float = _bounded(0.67, low=0.0, high=1.0)
    short_line_chars: int = _bounded(30, low=0)


@dataclass(frozen=True)
class LanguageStep:
    """Keep documents whose language (identified by py3langid on the first ``sample_chars`` characters)
    is one of ``languages`` (any when empty) with a probability of at least ``min_score``."""

    languages: tuple[str, ...] = ("en",)
    min_score: float = _bounded(0.5, low=0.0, high=1.0)
    sample_chars: int = _bounded(2000, low=1)


@dataclass(frozen=True)
class StepConfig:
    """One step of prepare's chain: exactly one of these keys, mapping to the step's parameters."""

    exact_dedup: ExactDedupStep | None = None
    near_dedup: NearDedupStep | None = None
    gopher_quality: GopherQualityStep | None = None
    gopher_repetition: GopherRepetitionStep | None = None
    c4: C4Step | None = None
    fineweb: FineWebStep | None = None
    language: LanguageStep | None = None


@dataclass(frozen=True)
class PrepareConfig:
    normalize: Literal["NFC", "NFKC", "none"] = "NFC"
    min_chars: int = _bounded(1, low=0)
    max_chars: int | None = _bounded(None, low=1)
    on_decode_error: Literal["error", "replace", "skip"] = "error"
    steps: tuple[StepConfig, ...] = (StepConfig(exact_dedup=ExactDedupStep()),)
    val_fraction: float = _bounded(0.05, low=0.0, high=1.0, high_inclusive=False)
    seed: int = _bounded(0, low=0, high=MAX_SEED)
    partition_bytes: int = _bounded(64_000_000, low=1)
    dedup_buckets: int = _bounded(16, low=1)
    output_dir: str = _path("data/prepared", "output")


@dataclass(frozen=True)
class TokenizerConfig:
    path: str | None = _path(None, "input")
    kind: Literal["byte", "char", "word"] = "byte"
    vocab_size: int | None = _bounded(2048, low=1)  # or set merges instead (and this to null); see _one_size_key
    merges: int | None = _bounded(None, low=0)
    pattern: str | None = None
    merge_newlines: bool | None = None
    min_frequency: int = _bounded(2, low=1)
    special_tokens: tuple[str, ...] = ("<|endoftext|>",)
    workers: int = _bounded(0, low=0, high=MAX_WORKERS)
    output: str = _path("data/tokenizer/tokenizer.json", "output")


@dataclass(frozen=True)
class EncodeConfig:
    eos_token: str | None = "<|endoftext|>"
    bos_token: str | None = None
    shard_tokens: int = _bounded(1_000_000, low=1)
    workers: int = _bounded(0, low=0, high=MAX_WORKERS)
    chunk_cache_mb: int = _bounded(256, low=0)
    output_dir: str = _path("data/shards", "output")


@dataclass(frozen=True)
class TrainConfig:
    dim: int = _bounded(64, low=1, high=MAX_DIM)
    tie_weights: bool = False
    context: int = _bounded(64, low=1, high=MAX_POSITIONS)
    batch_size: int = _bounded(32, low=1, high=MAX_POSITIONS)
    steps: int = _bounded(300, low=0)
    lr: float = _bounded(1e-2, low=0.0)
    weight_decay: float = _bounded(0.0, low=0.0)
    eval_every: int = _bounded(100, low=1)
    eval_batches: int = _bounded(8, low=1)
    checkpoint_every: int | None = _bounded(None, low=1)  # also save a checkpoint every N steps (resumable)
    seed: int = _bounded(1337, low=0, high=MAX_SEED)
    output_dir: str = _path("checkpoints/default", "output")


EXPORT_FORMATS = ("parquet", "nanogpt")


@dataclass(frozen=True)
class ExportConfig:
    """The optional ``export`` stage: present when ``output_dir`` is set."""

    formats: tuple[Literal["parquet", "nanogpt"], ...] = EXPORT_FORMATS
    output_dir: str | None = _path(None, "output")


@dataclass(frozen=True)
class StatsConfig:
    """The optional ``stats`` stage: present when ``output_dir`` is set."""

    top: int = _bounded(10, low=0)
    output_dir: str | None = _path(None, "output")


@dataclass(frozen=True)
class ExecutorConfig:
    """Where partition tasks run: ``local`` worker processes, or a Dask cluster at ``address``
    (``tcp://host:8786``, or ``local`` for a cluster started on this machine)."""

    kind: Literal["local", "dask"] = "local"
    address: str | None = None
    workers: int = _bounded(0, low=0)
    timeout: float = _bounded(10.0, low=0.0)


@dataclass(frozen=True)
class Config:
    data: DataConfig = DataConfig()
    prepare: PrepareConfig = PrepareConfig()
    tokenizer: TokenizerConfig = TokenizerConfig()
    encode: EncodeConfig = EncodeConfig()
    train: TrainConfig = TrainConfig()
    export: ExportConfig = ExportConfig()
    stats: StatsConfig = StatsConfig()
    executor: ExecutorConfig = ExecutorConfig()
    output_root: str = _path(".", "input")
    state_dir: str = _path(".lmprep", "output")
    root: str = field(default=".", compare=False, metadata={INTERNAL: True})
    """The config file's directory (absolute; "." for a config not read from a file): what paths are relative to."""

    @property
    def project_root(self) -> str:
        """``output_root`` as a path from the current directory: what the pipeline's lock records
        paths relative to, so the lock is the same whichever directory lmprep runs in."""
        return self.here(self.output_root)

    def out(self, value: str) -> str:
        """An output key's value as a path relative to :attr:`project_root` (it is written so), or a URL."""
        return value if storage.is_url(value) else _as_directory_if(value, os.path.normpath(value))

    def input(self, value: str) -> str:
        """An input path of the config (relative to its directory) as a path relative to :attr:`project_root`
        (an absolute one stays absolute)."""
        if os.path.isabs(value) or storage.is_url(value):
            return value
        return os.path.relpath(os.path.join(self.root, value), os.path.join(self.root, self.output_root))

    def here(self, value: str | os.PathLike[str]) -> str:
        """A path relative to :attr:`root`, as one to open from the current directory: relative while it
        stays below the current directory, else absolute."""
        if self.root == "." or storage.is_url(value):
            return os.fspath(value)
        absolute = os.path.normpath(os.path.join(self.root, value))
        relative = os.path.relpath(absolute)
        return _as_directory_if(value, absolute if relative == ".." or relative.startswith(".." + os.sep) else relative)

    def output_path(self, value: str) -> str:
        """An output key's value as a path to open from the current directory (a URL as it is)."""
        return value if storage.is_url(value) else self.here(os.path.join(self.output_root, value))

    def output_value(self, path: str | os.PathLike[str]) -> str:
        """The value of an output key naming ``path`` (a path from the current directory): relative to
        ``output_root``, as a command-line option's path is rewritten."""
        if storage.is_url(path):
            return os.fspath(path)
        return os.path.relpath(os.path.abspath(path), os.path.abspath(self.here(self.output_root)))

    def to_dict(self) -> dict[str, Any]:
        """The whole config as plain JSON-able data (tuples become lists)."""
        return _plain(self)

    def value(self, key_path: str) -> Any:
        """JSON-able value of a key or a section, e.g. ``"train"`` or ``"tokenizer.vocab_size"``."""
        node: Any = self.to_dict()
        for part in _split_key(key_path):
            node = _child(node, part, key_path)
        return node


def load_config(path: str | os.PathLike[str], overrides: Sequence[str] = ()) -> Config:
    """Read ``path`` (YAML, with what it extends), apply ``key.path=value`` overrides, validate, freeze."""
    return load_config_with_origins(path, overrides)[0]


def load_config_with_origins(path: str | os.PathLike[str],
                             overrides: Sequence[str] = ()) -> tuple[Config, Origins]:
    """:func:`load_config`, plus where each key's value came from (a file, ``--set`` or the built-in default)."""
    raw, origins = _read_extended(os.fspath(path), ())
    config_dir = os.path.dirname(os.path.abspath(path))
    for override in overrides:
        key_path = _apply_override(raw, override)
        origins.set(key_path, SET_ORIGIN)
        _normalize_urls(raw)
        _rebase_set_path(raw, key_path, config_dir)
    config = _build(Config, _one_size_key(raw), "", origins)
    _check_consistency(config, origins)
    return dataclasses.replace(config, root=config_dir), origins


def parse_config(raw: Mapping[str, Any], *, origin: str = "<config>") -> Config:
    """Validate an already-parsed mapping (as found in a YAML file); its paths are relative to the current directory."""
    origins = Origins(origin)
    config = _build(Config, _one_size_key(dict(raw)), "", origins)
    _check_consistency(config, origins)
    return config


SET_ORIGIN = "--set"
DEFAULT_ORIGIN = "built-in default"
MAX_EXTENDS = 16
"""How many configs a chain of ``extends:`` may hold."""


class Origins:
    """Where each key's value came from: the longest recorded prefix of a key path names its source."""

    def __init__(self, fallback: str):
        self.fallback = fallback
        self._by_key: dict[str, str] = {}

    def set(self, key_path: str, origin: str) -> None:
        """Record ``origin`` for ``key_path`` and everything under it."""
        prefix = key_path + "."
        for key in [key for key in self._by_key if key.startswith(prefix)]:
            del self._by_key[key]
        self._by_key[key_path] = origin

    def record(self, raw: Any, origin: str, prefix: str = "") -> None:
        """Record ``origin`` for every leaf of ``raw`` (a list counts as one value)."""
        if isinstance(raw, dict) and raw:
            for key, value in raw.items():
                self.record(value, origin, _join(prefix, str(key)))
        elif prefix:
            self.set(prefix, origin)

    def of(self, key_path: str) -> str:
        """The source of ``key_path`` (``a.b[0].c`` or ``a.b.0.c``); the built-in default if none set it."""
        parts = key_path.replace("[", ".").replace("]", "").split(".")
        for end in range(len(parts), 0, -1):
            origin = self._by_key.get(".".join(parts[:end]))
            if origin is not None:
                return origin
        return DEFAULT_ORIGIN

    def __call__(self, key_path: str) -> str:
        """The source to name in an error about ``key_path``: a default value's error is the file's."""
        origin = self.of(key_path)
        return self.fallback if origin == DEFAULT_ORIGIN else origin


def _read_extended(path: str, chain: tuple[str, ...]) -> tuple[dict[str, Any], Origins]:
    """The raw mapping of ``path`` laid over what it ``extends:`` (recursively), with each leaf's origin.

    Mappings merge key by key; any other value (a list included) replaces the parent's. The parent's
    paths are rebased onto this file's directory, so each stays relative to the file that wrote it.
    """
    raw = _read_yaml(path)
    _normalize_urls(raw)
    origins = Origins(path)
    parent = raw.pop("extends", None)
    if parent is None:
        origins.record(raw, path)
        return raw, origins
    if not isinstance(parent, str) or not parent:
        raise ConfigError(f"{path}: extends must be the path of another config file, got {_show(parent)}")
    parent_path = os.path.normpath(os.path.join(os.path.dirname(path), parent))
    identity = os.path.realpath(parent_path)
    if identity in chain or os.path.realpath(path) == identity:
        raise ConfigError(f"{path}: extends {parent!r}, which extends it back (a cycle); remove one of the extends")
    if len(chain) >= MAX_EXTENDS:
        raise ConfigError(f"{path}: more than {MAX_EXTENDS} configs in one chain of extends")
    base, origins = _read_extended(parent_path, (*chain, os.path.realpath(path)))
    _rebase_paths(base, os.path.dirname(os.path.abspath(parent_path)), os.path.dirname(os.path.abspath(path)))
    origins.fallback = path
    origins.record(raw, path)
    return _merge(base, raw), origins


def _merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in top.items():
        below = merged.get(key)
        merged[key] = _merge(below, value) if isinstance(below, dict) and isinstance(value, dict) else value
    return merged


def _normalize_urls(raw: Any, parts: tuple[str, ...] = ()) -> None:
    """Rewrite each ``file://`` value of a path key as the local path it names, before paths are rebased,
    and spell other URLs' schemes in lower case (``S3://b/x`` is ``s3://b/x``), so that paths compare as places."""
    items = raw.items() if isinstance(raw, dict) else enumerate(raw) if isinstance(raw, list) else ()
    for key, value in list(items):
        if isinstance(value, (dict, list)):
            _normalize_urls(value, (*parts, str(key)))
        elif isinstance(value, str) and "://" in value and _is_path_key([*parts, str(key)]):
            raw[key] = storage.normalize_url(value)


def _is_path_key(parts: list[str]) -> bool:
    try:
        return _path_kind(parts) is not None
    except (StopIteration, KeyError):  # not a key of the schema: validation names it
        return False


def _rebase_paths(raw: dict[str, Any], from_dir: str, to_dir: str) -> None:
    """Rewrite the relative paths of ``raw`` (written in ``from_dir``) to mean the same from ``to_dir``.

    Outputs are relative to ``output_root``, so only it moves: written out when the file left it at
    its default, so that the outputs stay where that file put them.
    """
    if from_dir == to_dir:
        return
    raw.setdefault("output_root", ".")
    for key_path in _input_path_keys(raw):
        node, last = _parent_node(raw, key_path)
        value = node[last]
        if isinstance(value, str) and not os.path.isabs(value) and not storage.is_url(value):
            node[last] = os.path.relpath(os.path.join(from_dir, value), to_dir)


def _input_path_keys(raw: dict[str, Any]) -> list[str]:
    """The key paths of ``raw`` holding paths relative to the config's directory."""
    keys = [key for key in ("output_root", "tokenizer.path") if _has_key(raw, key)]
    sources = raw.get("data", {}).get("sources") if isinstance(raw.get("data"), dict) else None
    if isinstance(sources, list):
        keys += [f"data.sources.{i}.glob" for i, item in enumerate(sources)
                 if isinstance(item, dict) and "glob" in item]
    return keys


def _has_key(raw: dict[str, Any], key_path: str) -> bool:
    node: Any = raw
    for part in key_path.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def _parent_node(raw: Any, key_path: str) -> tuple[Any, Any]:
    *parents, last = key_path.split(".")
    node = raw
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node, (int(last) if isinstance(node, list) else last)


def _rebase_set_path(raw: dict[str, Any], key_path: str, config_dir: str) -> None:
    """A ``--set`` path is relative to the current directory: rewrite it relative to where the
    config's paths are (its directory, or ``output_root`` for an output)."""
    kind = _path_kind(_split_key(key_path))
    node, last = _parent_node(raw, key_path)
    value = node[last]
    if kind is None or not isinstance(value, str) or os.path.isabs(value) or storage.is_url(value):
        return
    base = config_dir
    if kind == "output":
        output_root = raw.get("output_root", ".")
        base = os.path.join(config_dir, output_root if isinstance(output_root, str) else ".")
    node[last] = _as_directory_if(value, os.path.relpath(os.path.abspath(value), os.path.abspath(base)))


def _as_directory_if(written: str | os.PathLike[str], path: str) -> str:
    """``path`` with a trailing separator when ``written`` had one (it says "a directory": keep saying it)."""
    return path + os.sep if os.fspath(written).endswith(("/", os.sep)) and not path.endswith(os.sep) else path


def _path_kind(parts: list[str]) -> str | None:
    """``"input"``, ``"output"`` or None: whether the key at ``parts`` holds a path, and relative to what."""
    cls: Any = Config
    spec = None
    for part in parts:
        if _sequence_item_type(cls) is not None:
            cls = _sequence_item_type(cls)
            continue
        if not _is_dataclass_type(cls):
            return None
        spec = next(f for f in _schema_fields(cls) if f.name == part)
        cls = _section_type(_field_types(cls)[part]) or _field_types(cls)[part]
    return spec.metadata.get(PATH) if spec is not None and not _is_dataclass_type(cls) else None


def dump_yaml(config: Config) -> str:
    """The effective config as YAML, in schema order."""
    return yaml.safe_dump(config.to_dict(), sort_keys=False, allow_unicode=True)


# -- reading ---------------------------------------------------------------

MAX_CONFIG_BYTES = 1 << 20
"""A config is a few kilobytes; pure-Python YAML takes a second or more per megabyte, so a bigger file is refused."""
MAX_NESTING = 32
"""Levels of YAML nesting (after expanding aliases); the schema needs four."""
MAX_NODES = 100_000
"""YAML values after expanding aliases, so that an alias bomb is refused before it is built."""


def _read_yaml(path: str | os.PathLike[str]) -> dict[str, Any]:
    name = os.fspath(path)
    try:
        with open(path, "rb") as file:
            data = file.read(MAX_CONFIG_BYTES + 1)
        text = data.decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file {name} not found; pass --config PATH") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {name} cannot be read as UTF-8 text ({exc})") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"config file {name} is larger than {MAX_CONFIG_BYTES:,} bytes; "
                          "a config holds settings, not data: list data files in data.sources")
    raw = _parse_yaml(text, name)
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{name}: the top level must be a mapping of sections, got {_kind(raw)}")
    return raw


def _parse_yaml(text: str, origin: str) -> Any:
    """``text`` parsed by :class:`_ConfigLoader`; a YAML error or a refused document is a ConfigError."""
    try:
        return yaml.load(text, Loader=_ConfigLoader)
    except _Refused as exc:
        raise ConfigError(f"{origin}: line {exc.problem_mark.line + 1}: {exc.problem}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{origin}: not valid YAML: {' '.join(str(exc).split())}") from None


class _Refused(yaml.MarkedYAMLError):
    """A well-formed YAML document that exceeds a bound of :class:`_ConfigLoader`."""


class _ConfigLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` with bounds, reading floats as YAML 1.2 does.

    PyYAML follows YAML 1.1, where a float needs a dot and a signed exponent, so ``1e-3``
    is a string; a user typing a learning rate means a number (as in YAML 1.2 and JSON).

    Bounds: the composer recurses per level, so deeper nesting than ``MAX_NESTING`` is
    refused as it is read, not left to hit Python's recursion limit. Aliases share nodes,
    so a few lines can describe billions of values ("billion laughs"); before anything is
    built the node graph is measured as if expanded, and more than ``MAX_NODES`` values,
    an expanded depth beyond ``MAX_NESTING`` or an alias inside its own anchor is refused.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self._depth >= MAX_NESTING:
            raise _Refused(problem=f"nested more than {MAX_NESTING} levels deep",
                           problem_mark=self.peek_event().start_mark)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_document(self, node: Any) -> Any:
        _check_expanded_size(node)
        return super().construct_document(node)

    def construct_yaml_int(self, node: Any) -> int:
        """An integer, refusing one too long for Python to convert (over 4,300 digits)."""
        try:
            return super().construct_yaml_int(node)
        except ValueError:
            raise _Refused(problem=f"the integer {node.value[:20]}... has too many digits",
                           problem_mark=node.start_mark) from None


_ConfigLoader.add_constructor("tag:yaml.org,2002:int", _ConfigLoader.construct_yaml_int)
_ConfigLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def _check_expanded_size(root: yaml.Node) -> None:
    """Refuse a node graph whose aliases expand beyond ``MAX_NODES`` values or ``MAX_NESTING`` levels.

    Sizes and depths are memoised per node, so the walk costs one visit per distinct node.
    """
    measured: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded values, levels)
    open_nodes: set[int] = set()

    def too_big(node: yaml.Node) -> _Refused:
        return _Refused(problem=f"aliases expand to more than {MAX_NODES:,} values or {MAX_NESTING} levels "
                        "of nesting", problem_mark=node.start_mark)

    def measure(node: yaml.Node, depth: int) -> tuple[int, int]:
        if id(node) in open_nodes:
            raise _Refused(problem="an alias refers to a node that contains it", problem_mark=node.start_mark)
        if id(node) not in measured:
            if depth > MAX_NESTING:
                raise too_big(node)
            open_nodes.add(id(node))
            children = [measure(child, depth + 1) for child in _child_nodes(node)]
            open_nodes.discard(id(node))
            measured[id(node)] = (1 + sum(size for size, _ in children),
                                  1 + max((levels for _, levels in children), default=0))
        size, levels = measured[id(node)]
        if size > MAX_NODES or depth + levels - 1 > MAX_NESTING:
            raise too_big(node)
        return size, levels

    measure(root, 1)


def _child_nodes(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _apply_override(raw: dict[str, Any], override: str) -> str:
    """Set ``key.path=value`` in the raw mapping and return the key path; the value is parsed as a
    YAML scalar or flow value."""
    key_path, sep, text = override.partition("=")
    if not sep or not key_path.strip():
        raise ConfigError(f"--set {override!r}: expected KEY=VALUE, for example train.steps=500")
    parts = _split_key(key_path.strip())
    _check_key_path(parts)
    try:
        value = yaml.load(text, Loader=_ConfigLoader) if text.strip() else None
    except _Refused as exc:
        raise ConfigError(f"--set {key_path}: {exc.problem}") from None
    except yaml.YAMLError:
        value = text
    node = raw
    for part in parts[:-1]:
        node = _descend_for_override(node, part, key_path)
    _assign(node, parts[-1], value, key_path)
    return ".".join(parts)


def _descend_for_override(node: Any, part: str, key_path: str) -> Any:
    if isinstance(node, list):
        return node[_list_index(node, part, key_path)]
    if not isinstance(node.get(part), (dict, list)):
        node[part] = {}
    return node[part]


def _assign(node: Any, part: str, value: Any, key_path: str) -> None:
    if isinstance(node, list):
        node[_list_index(node, part, key_path)] = value
    else:
        node[part] = value


def _list_index(items: list, part: str, key_path: str) -> int:
    if not part.isdigit() or int(part) >= len(items):
        raise ConfigError(f"--set {key_path}: {part!r} is not an index of a list of {len(items)} items")
    return int(part)


def _check_key_path(parts: list[str]) -> None:
    """Fail with did-you-mean if ``parts`` does not name a field of the schema."""
    cls: Any = Config
    for depth, part in enumerate(parts):
        where = ".".join(parts[:depth])
        if _sequence_item_type(cls) is not None:
            if not part.isdigit():
                raise ConfigError(f"--set: {where} is a list; address an item by index, e.g. {where}.0")
            cls = _sequence_item_type(cls)
            continue
        if not _is_dataclass_type(cls):
            raise ConfigError(f"--set: {where} is a value, it has no key {part!r}")
        names = [f.name for f in _schema_fields(cls)]
        if part not in names:
            raise ConfigError(_unknown_key_message(_join(where, part), part, names, "--set"))
        cls = _section_type(_field_types(cls)[part]) or _field_types(cls)[part]


# -- building --------------------------------------------------------------


def _build(cls: type, raw: Any, path: str, origin: Origins) -> Any:
    """Make a ``cls`` instance from ``raw`` (a mapping), validating every field."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{origin(path)}: {path or 'the config'} must be a mapping, got {_kind(raw)} {_show(raw)}")
    fields = {f.name: f for f in _schema_fields(cls)}
    for key in raw:
        if key not in fields:
            key_path = _join(path, str(key))
            raise ConfigError(_unknown_key_message(key_path, str(key), list(fields), origin(key_path)))
    missing = [name for name, f in fields.items() if _has_no_default(f) and name not in raw]
    if missing:
        raise ConfigError(f"{origin(path)}: {_join(path, missing[0])} is required")
    hints = _field_types(cls)
    values = {name: _convert(hints[name], raw[name], _join(path, name), origin, fields[name])
              for name in fields if name in raw}
    return cls(**values)


def _convert(hint: Any, value: Any, key: str, origin: Origins, spec: dataclasses.Field | None = None) -> Any:
    """Check ``value`` against the type ``hint`` and the field's bounds; return the typed value."""
    section = _section_type(hint)
    if section is not None and not (value is None and section is not hint):
        return _build(section, value, key, origin)
    item_type = _sequence_item_type(hint)
    if item_type is not None:
        return _convert_sequence(item_type, value, key, origin)
    if typing.get_origin(hint) is Literal:
        return _convert_choice(typing.get_args(hint), value, key, origin)
    allowed = _union_members(hint)
    if value is None:
        if type(None) in allowed:
            return None
        raise ConfigError(f"{origin(key)}: {key} must be {_describe(hint, spec)}, got null")
    scalar = next(t for t in allowed if t is not type(None))
    converted = _convert_scalar(scalar, value, key, origin, _describe(hint, spec))
    _check_bounds(converted, key, origin, spec, _describe(hint, spec))
    return converted


def _convert_sequence(item_type: Any, value: Any, key: str, origin: Origins) -> tuple:
    if not isinstance(value, (list, tuple)):
        raise ConfigError(f"{origin(key)}: {key} must be a list, got {_kind(value)} {_show(value)}")
    return tuple(_convert(item_type, item, f"{key}[{i}]", origin) for i, item in enumerate(value))


def _convert_choice(choices: tuple, value: Any, key: str, origin: Origins) -> Any:
    if value in choices and type(value) is type(next(c for c in choices if c == value)):
        return value
    allowed = ", ".join(repr(c) for c in choices)
    hint = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1)
    suggestion = f"; did you mean {hint[0]!r}?" if hint else ""
    raise ConfigError(f"{origin(key)}: {key} must be one of {allowed}; got {_show(value)}{suggestion}")


def _convert_scalar(scalar: type, value: Any, key: str, origin: Origins, wanted: str) -> Any:
    if scalar is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise ConfigError(f"{origin(key)}: {key} must be {wanted}, got {_show(value)}")
        return float(value)
    if isinstance(value, scalar) and not (scalar is int and isinstance(value, bool)):
        return value
    raise ConfigError(f"{origin(key)}: {key} must be {wanted}, got {_kind(value)} {_show(value)}")


def _check_bounds(value: Any, key: str, origin: Origins, spec: dataclasses.Field | None, wanted: str) -> None:
    if spec is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    low, high = spec.metadata.get("low"), spec.metadata.get("high")
    too_high = high is not None and (value > high if spec.metadata.get("high_inclusive") else value >= high)
    if (low is not None and value < low) or too_high:
        raise ConfigError(f"{origin(key)}: {key} must be {wanted}, got {_show(value)}")


def _one_size_key(raw: dict[str, Any]) -> dict[str, Any]:
    """``tokenizer.merges`` given without ``vocab_size``: the vocab size is not the default but unset."""
    tok = raw.get("tokenizer")
    if isinstance(tok, dict) and tok.get("merges") is not None and "vocab_size" not in tok:
        return {**raw, "tokenizer": {**tok, "vocab_size": None}}
    return raw


def resolved_size(tok: TokenizerConfig) -> tuple[int | None, int | None]:
    """``(vocab_size, merges)`` with the unset one filled in where the config alone decides it: the byte
    kind always has 256 base tokens; the char kind's base is the training text's characters (None)."""
    if tok.kind != "byte":
        return tok.vocab_size, tok.merges
    reserved = BYTE_ALPHABET + len(tok.special_tokens)
    if tok.merges is None:
        return tok.vocab_size, tok.vocab_size - reserved
    return reserved + tok.merges, tok.merges


# paths that may not be fsspec URLs: the runner's state (its lock needs a local file system)
LOCAL_ONLY_KEYS = ("state_dir",)
OUTPUT_KEYS = ("prepare.output_dir", "tokenizer.output", "encode.output_dir", "train.output_dir", "export.output_dir",
               "stats.output_dir")


def _check_consistency(config: Config, origin: Origins) -> None:
    """Rules that involve more than one key."""
    prepare, tok, encode = config.prepare, config.tokenizer, config.encode
    for index, source in enumerate(config.data.sources):
        if not source.separator:
            raise ConfigError(f"{origin(f'data.sources.{index}.separator')}: data.sources[{index}].separator must not be empty; use 'document', "
                              "'blank_line', 'line' or a literal string such as '<|endoftext|>'")
    for key in LOCAL_ONLY_KEYS:
        value = config.value(key)
        if value is not None and storage.is_url(value):
            raise ConfigError(f"{origin(key)}: {key} {value!r} must be a local path (URLs are supported for "
                              "data.sources, tokenizer.path and every output)")
    for key in OUTPUT_KEYS:
        value = config.value(key)
        if value is not None and storage.is_url(value) and storage.is_container(value):
            raise ConfigError(f"{origin(key)}: {key} {value!r} is a whole bucket; name a prefix inside it "
                              f"(such as {value.rstrip('/')}/{key.partition('.')[0]}): lmprep replaces and cleans an "
                              "output as a whole")
    _check_steps(prepare.steps, origin)
    if prepare.max_chars is not None and prepare.max_chars < prepare.min_chars:
        raise ConfigError(f"{origin('prepare.max_chars')}: prepare.max_chars ({prepare.max_chars}) is below "
                          f"prepare.min_chars ({prepare.min_chars})")
    if not config.export.formats or len(set(config.export.formats)) != len(config.export.formats):
        raise ConfigError(f"{origin('export.formats')}: export.formats must list distinct formats among {list(EXPORT_FORMATS)}, "
                          f"got {list(config.export.formats)}")
    if "" in tok.special_tokens or len(set(tok.special_tokens)) != len(tok.special_tokens):
        raise ConfigError(f"{origin('tokenizer.special_tokens')}: tokenizer.special_tokens must be distinct non-empty strings, "
                          f"got {list(tok.special_tokens)}")
    if tok.vocab_size is not None and tok.merges is not None:
        raise ConfigError(f"{origin('tokenizer.merges')}: tokenizer.vocab_size ({tok.vocab_size}) and tokenizer.merges ({tok.merges}) "
                          "are both set; keep one and set the other to null (e.g. --set tokenizer.vocab_size=null)")
    if tok.vocab_size is None and tok.merges is None:
        raise ConfigError(f"{origin('tokenizer.vocab_size')}: tokenizer.vocab_size and tokenizer.merges are both null; set one of them")
    if tok.kind == "word" and tok.merges is not None:
        raise ConfigError(f"{origin('tokenizer.merges')}: tokenizer.merges does not apply to the word kind (it has no merges); "
                          "set tokenizer.vocab_size instead")
    floor = (BYTE_ALPHABET if tok.kind == "byte" else 1) + len(tok.special_tokens)
    if tok.vocab_size is not None and tok.vocab_size < floor:
        raise ConfigError(f"{origin('tokenizer.vocab_size')}: tokenizer.vocab_size must be at least {floor} for a {tok.kind}-level "
                          f"tokenizer with {len(tok.special_tokens)} special tokens, got {tok.vocab_size}")
    _check_trained_ids(tok, origin)
    if tok.path is None:
        for key in ("eos_token", "bos_token"):
            token = getattr(encode, key)
            if token is not None and token not in tok.special_tokens:
                raise ConfigError(f"{origin(f'encode.{key}')}: encode.{key} {token!r} is not one of tokenizer.special_tokens "
                                  f"{list(tok.special_tokens)}; add it there or set encode.{key}: null")


def _check_steps(steps: Sequence[StepConfig], origin: Origins) -> None:
    """Each item of ``prepare.steps`` names exactly one step, and a near_dedup's bands fit in its hashes."""
    names = [f.name for f in _schema_fields(StepConfig)]
    for index, step in enumerate(steps):
        key = f"prepare.steps[{index}]"
        given = [name for name in names if getattr(step, name) is not None]
        if len(given) != 1:
            raise ConfigError(f"{origin(f'prepare.steps.{index}')}: {key} must name exactly one step among "
                              f"{', '.join(names)}, got {given or 'none'}")
        near = step.near_dedup
        if near is not None and near.bands * near.rows > near.hashes:
            raise ConfigError(f"{origin(f'prepare.steps.{index}.near_dedup')}: {key}.near_dedup bands × rows "
                              f"({near.bands} × {near.rows}) exceeds hashes ({near.hashes})")


def _check_trained_ids(tok: TokenizerConfig, origin: Origins) -> None:
    """BPE base tokens and merges fit in ``MAX_TRAINED_IDS`` (the byte kind's 256 bytes are known here;
    the char kind's alphabet only after counting, when training checks again)."""
    if tok.kind == "word":
        return
    limit = MAX_TRAINED_IDS + len(tok.special_tokens)
    if tok.vocab_size is not None and tok.vocab_size > limit:
        raise ConfigError(f"{origin('tokenizer.vocab_size')}: tokenizer.vocab_size must be at most {limit} ({MAX_TRAINED_IDS} base tokens "
                          f"and merges, the most training can hold, and {len(tok.special_tokens)} special tokens), "
                          f"got {tok.vocab_size}")
    base = BYTE_ALPHABET if tok.kind == "byte" else 2  # the char kind: unknown and at least one character
    if tok.merges is not None and tok.merges > MAX_TRAINED_IDS - base:
        raise ConfigError(f"{origin('tokenizer.merges')}: tokenizer.merges must be at most {MAX_TRAINED_IDS - base} for a "
                          f"{tok.kind}-level tokenizer ({MAX_TRAINED_IDS} base tokens and merges, the most "
                          f"training can hold), got {tok.merges}")


# -- schema helpers --------------------------------------------------------


@functools.cache
def _field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _schema_fields(cls: type) -> list[dataclasses.Field]:
    """The fields that are keys of a config file (not :attr:`Config.root`)."""
    return [f for f in dataclasses.fields(cls) if not f.metadata.get(INTERNAL)]


def _is_dataclass_type(hint: Any) -> bool:
    return isinstance(hint, type) and dataclasses.is_dataclass(hint)


def _section_type(hint: Any) -> Any:
    """The dataclass of a section key: ``X`` for ``X`` or ``X | None`` (an optional section), else None."""
    return next((member for member in _union_members(hint) if _is_dataclass_type(member)), None)


def _sequence_item_type(hint: Any) -> Any:
    """``X`` for ``tuple[X, ...]``, else None."""
    if typing.get_origin(hint) is tuple:
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return args[0]
    return None


def _union_members(hint: Any) -> tuple:
    if typing.get_origin(hint) in (Union, types.UnionType):
        return typing.get_args(hint)
    return (hint,)


def _has_no_default(f: dataclasses.Field) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


_TYPE_WORDS = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}


def _describe(hint: Any, spec: dataclasses.Field | None) -> str:
    members = _union_members(hint)
    words = " or ".join(_TYPE_WORDS.get(t, "null") for t in members if t is not type(None))
    if spec is not None:
        low, high = spec.metadata.get("low"), spec.metadata.get("high")
        if low is not None:
            words += f" >= {low}"
        if high is not None:
            words += f" and {'<=' if spec.metadata.get('high_inclusive') else '<'} {high}"
    return words + (" (or null)" if type(None) in members else "")


def _unknown_key_message(key: str, name: str, known: list[str], origin: str) -> str:
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    hint = f" did you mean {_join(key.rpartition('.')[0], close[0])!r}?" if close else ""
    return f"{origin}: unknown key {key!r};{hint} allowed here: {', '.join(known)}"


def _child(node: Any, part: str, key_path: str) -> Any:
    if isinstance(node, list) and part.isdigit() and int(part) < len(node):
        return node[int(part)]
    if isinstance(node, dict) and part in node:
        return node[part]
    known = list(node) if isinstance(node, dict) else []
    raise ConfigError(_unknown_key_message(key_path, part, known, "config"))


def _split_key(key_path: str) -> list[str]:
    parts = key_path.split(".")
    if any(not p for p in parts):
        raise ConfigError(f"{key_path!r} is not a key path; use dots between names, e.g. train.steps")
    return parts


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


_SHORT_REPR = reprlib.Repr()
_SHORT_REPR.maxstring = _SHORT_REPR.maxother = 80
_SHORT_REPR.maxlong = 40


def _show(value: Any) -> str:
    """``repr(value)`` shortened with "...", so an error about a huge value stays one readable line."""
    return _SHORT_REPR.repr(value)


def _kind(value: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "a list", dict: "a mapping", type(None): "null"}.get(type(value), type(value).__name__)


def _plain(value: Any) -> Any:
    """JSON-able data; an optional section left unset (such as a step of ``prepare.steps``) is left out."""
    if dataclasses.is_dataclass(value):
        hints = _field_types(type(value))
        return {f.name: _plain(getattr(value, f.name)) for f in _schema_fields(type(value))
                if not (getattr(value, f.name) is None and _section_type(hints[f.name]) is not None)}
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value
