"""Shard manifests: the sidecar ``{split}.manifest.json`` of a shard set, read, checked, written and joined.

A manifest repeats the stamp every shard carries (tokenizer fingerprint, vocab size, dtype,
special IDs, split, prepared-data fingerprint, format version), because HF ``datasets`` drops
custom schema metadata, and lists each shard with its rows, tokens, sha256 and ``sources``: for each
source (index in ``data.sources``) with rows in it, ``[source, rows, tokens]``. The manifest's own
``sources`` sums them per split: ``{"source": 0, "rows": …, "tokens": …}`` per source. Reading one checks
every field and every claim that follows from the others, so a hand-edited manifest is refused.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.engine import atomic, locations, storage
from pipeline.errors import FileTooLargeError, ShardError, counted, describe, json_error_reason
from pipeline.tokenizer.layout import ids_dtype

FORMAT_VERSION = 2  # 2: the source, file and document columns, and the counts per source
MAX_MANIFEST_BYTES = 64 << 20
"""The largest manifest read: about 300,000 shards of about 200 bytes each (a set of a trillion tokens or more)."""
# A shard damaged in place (bit rot keeps its size and mtime) still looks up to date to the runner.
REENCODE = "re-encode with 'lmprep run encode --force'"


def shard_name(prefix: str, index: int) -> str:
    return f"{prefix}-{index:05d}.arrow"


def manifest_path(directory: str | os.PathLike[str], split: str) -> Path | str:
    return locations.join(directory, f"{split}.manifest.json")


def has_split(directory: str | os.PathLike[str], split: str) -> bool:
    """Whether the shard directory (for a URL, its committed output) holds a shard set for ``split``."""
    return storage.exists(manifest_path(directory, split))


@dataclass(frozen=True)
class ShardStamp:
    """What every shard and manifest of a set records about how it was made.

    ``special_ids`` maps a role (``"bos"``, ``"eos"``) to the ID added to each
    document in that role, or ``None`` when none is added.
    """

    split: str
    tokenizer_fingerprint: str
    vocab_size: int
    special_ids: Mapping[str, int | None]
    prepared_fingerprint: str

    @property
    def dtype(self) -> np.dtype:
        return ids_dtype(self.vocab_size)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format_version": FORMAT_VERSION,
            "split": self.split,
            "tokenizer_fingerprint": self.tokenizer_fingerprint,
            "vocab_size": self.vocab_size,
            "dtype": self.dtype.name,
            "special_ids": dict(self.special_ids),
            "prepared_fingerprint": self.prepared_fingerprint,
        }


@dataclass(frozen=True)
class ShardEntry:
    """One shard as the manifest lists it."""

    file: str
    rows: int
    tokens: int
    sha256: str
    sources: tuple[tuple[int, int, int], ...]  # (source, rows, tokens) per source with rows in the shard

    def __post_init__(self) -> None:  # as read back from JSON, the counts are lists
        object.__setattr__(self, "sources", tuple(tuple(counts) for counts in self.sources))


@dataclass(frozen=True)
class Manifest:
    """The sidecar of a shard set: the stamp, per-shard entries and totals."""

    stamp: ShardStamp
    shards: tuple[ShardEntry, ...]
    max_id: int

    @property
    def rows(self) -> int:
        return sum(entry.rows for entry in self.shards)

    @property
    def tokens(self) -> int:
        return sum(entry.tokens for entry in self.shards)

    def task_summary(self) -> str:
        """For the stage's log: ``120 documents, 5,010 tokens, 2 shards``."""
        shards = counted(len(self.shards), "shard")
        return f"{counted(self.rows, 'document')}, {counted(self.tokens, 'token')}, {shards}"

    @property
    def sources(self) -> list[dict[str, int]]:
        """Rows and tokens per source (those with rows in the split), by source index."""
        totals: dict[int, list[int]] = {}
        for entry in self.shards:
            for source, rows, tokens in entry.sources:
                counts = totals.setdefault(source, [0, 0])
                counts[0] += rows
                counts[1] += tokens
        return [{"source": source, "rows": rows, "tokens": tokens} for source, (rows, tokens) in sorted(totals.items())]

    def to_dict(self) -> dict[str, Any]:
        shards = [{**vars(entry), "sources": [list(counts) for counts in entry.sources]} for entry in self.shards]
        totals = {"rows": self.rows, "tokens": self.tokens, "max_id": self.max_id, "sources": self.sources}
        return {**self.stamp.to_dict(), **totals, "shards": shards}

    @classmethod
    def from_dict(cls, data: Any) -> Manifest:
        """Parse a manifest; ValueError naming the first field that is missing or of the wrong type."""
        if not isinstance(data, dict):
            raise ValueError(f"expected a JSON object, got {type(data).__name__}")
        if _field(data, "format_version", int) != FORMAT_VERSION:
            raise ValueError(f"format_version {data['format_version']}, expected {FORMAT_VERSION}")
        stamp = ShardStamp(
            split=_field(data, "split", str),
            tokenizer_fingerprint=_field(data, "tokenizer_fingerprint", str),
            vocab_size=_field(data, "vocab_size", int),
            special_ids=_special_ids(_field(data, "special_ids", dict)),
            prepared_fingerprint=_field(data, "prepared_fingerprint", str),
        )
        if stamp.vocab_size < 1:
            raise ValueError(f"vocab_size must be positive, got {stamp.vocab_size}")
        listed = _field(data, "shards", list)
        shards = tuple(_shard_entry(entry, shard_name(stamp.split, index)) for index, entry in enumerate(listed))
        manifest = cls(stamp=stamp, shards=shards, max_id=_field(data, "max_id", int))
        _check_claims(manifest, data)
        return manifest


def _check_claims(manifest: Manifest, data: Mapping[str, Any]) -> None:
    """What the manifest states besides its entries must follow from them and from its vocab size.

    ``dtype``, ``rows`` and ``tokens`` are recomputed, never read, when a manifest is used, so a
    hand-edited value would otherwise pass unnoticed; ``max_id`` is what training checks the model's
    vocabulary against.
    """
    stamp = manifest.stamp
    if _field(data, "dtype", str) != stamp.dtype.name:
        raise ValueError(f"dtype {describe(data['dtype'])} disagrees with vocab_size {stamp.vocab_size}, "
                         f"whose IDs are stored as {stamp.dtype.name!r}")
    for key, total in (("rows", manifest.rows), ("tokens", manifest.tokens)):
        if _field(data, key, int) != total:
            raise ValueError(f"{key} {data[key]} is not the sum of the shards' {key} ({total})")
    if _field(data, "sources", list) != manifest.sources:
        raise ValueError(f"sources {describe(data['sources'])} is not the sum of the shards' sources")
    if not -1 <= manifest.max_id < stamp.vocab_size:
        raise ValueError(f"max_id {manifest.max_id} is not an ID of the vocabulary of {stamp.vocab_size}")
    if (manifest.max_id == -1) != (manifest.tokens == 0):
        raise ValueError(f"max_id {manifest.max_id} disagrees with tokens {manifest.tokens}")
    for role, special_id in stamp.special_ids.items():
        if special_id is not None and not 0 <= special_id < stamp.vocab_size:
            raise ValueError(f"special_ids.{role} {special_id} is not an ID of the vocabulary of {stamp.vocab_size}")


def _field(data: Mapping[str, Any], key: str, kind: type) -> Any:
    """``data[key]`` if it is a ``kind`` (booleans are not integers); ValueError otherwise."""
    if key not in data:
        raise ValueError(f"{key} is missing")
    value = data[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ValueError(f"{key} must be of type {kind.__name__}, got {type(value).__name__}")
    return value


def _special_ids(data: dict[str, Any]) -> dict[str, int | None]:
    for role, value in data.items():
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise ValueError(f"special_ids.{role} must be an integer or null, got {type(value).__name__}")
    return dict(data)


def _shard_entry(data: Any, expected_name: str) -> ShardEntry:
    """One manifest entry; its file must be the shard's own name, never a path elsewhere."""
    if not isinstance(data, dict):
        raise ValueError(f"a shard entry must be a JSON object, got {type(data).__name__}")
    if set(data) != {"file", "rows", "tokens", "sha256", "sources"}:
        raise ValueError(f"a shard entry has keys {sorted(data)}, expected file, rows, tokens, sha256, sources")
    if _field(data, "file", str) != expected_name:
        raise ValueError(f"shard file {describe(data['file'])} should be {expected_name!r}")
    entry = ShardEntry(file=expected_name, rows=_field(data, "rows", int), tokens=_field(data, "tokens", int),
                       sha256=_field(data, "sha256", str), sources=_source_counts(data, expected_name))
    if entry.rows < 0 or entry.tokens < 0:
        raise ValueError(f"{expected_name}: negative rows or tokens")
    if (sum(c[1] for c in entry.sources), sum(c[2] for c in entry.sources)) != (entry.rows, entry.tokens):
        raise ValueError(f"{expected_name}: its sources' rows and tokens do not add up to its own")
    return entry


def _source_counts(data: Mapping[str, Any], name: str) -> tuple[tuple[int, int, int], ...]:
    """A shard entry's ``sources``: ``[source, rows, tokens]`` of non-negative integers, by increasing source."""
    counts = _field(data, "sources", list)
    if not all(isinstance(c, list) and len(c) == 3 and all(type(n) is int and n >= 0 for n in c) for c in counts):
        raise ValueError(f"{name}: sources must be [source, rows, tokens] triples of non-negative integers")
    if [c[0] for c in counts] != sorted({c[0] for c in counts}):
        raise ValueError(f"{name}: sources must be listed once each, by increasing index")
    return tuple(tuple(c) for c in counts)


def read_manifest(directory: str | os.PathLike[str], split: str) -> Manifest:
    """The manifest of a shard directory (for a URL, of its committed output)."""
    path = manifest_path(storage.committed(directory) if locations.is_url(directory) else directory, split)
    try:
        manifest = Manifest.from_dict(json.loads(storage.read_bounded(path, MAX_MANIFEST_BYTES, what="shard manifest")))
    except FileTooLargeError as exc:
        raise ShardError(f"{exc}; {REENCODE}") from None
    except FileNotFoundError:
        raise ShardError(
            f"{path}: no shard set for split {split!r} (manifest missing); run 'lmprep run encode'"
        ) from None
    except OSError as exc:
        raise ShardError(f"{path}: cannot read the shard manifest ({exc.strerror})") from None
    except (ValueError, RecursionError) as exc:
        raise ShardError(f"{path}: malformed shard manifest ({json_error_reason(exc)}); {REENCODE}") from None
    if manifest.stamp.split != split:
        raise ShardError(f"{path}: the manifest of split {split!r} says split {manifest.stamp.split!r}; {REENCODE}")
    return manifest


def write_manifest(directory: str | os.PathLike[str], manifest: Manifest) -> None:
    storage.write_bytes(manifest_path(directory, manifest.stamp.split),
                        (atomic.dumps_json(manifest.to_dict()) + "\n").encode("utf-8"))


def join_manifests(stamp: ShardStamp, parts: Iterable[Manifest]) -> Manifest:
    """One manifest listing the shards of ``parts`` in order (each part written by one task)."""
    parts = list(parts)
    return Manifest(stamp=stamp, shards=tuple(entry for part in parts for entry in part.shards),
                    max_id=max((part.max_id for part in parts), default=-1))
