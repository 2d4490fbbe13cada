"""Token shards: Arrow IPC stream files of token IDs, one row per document.

A shard set for one split is ``{split}-00000.arrow``, ``{split}-00001.arrow``, …
plus ``{split}.manifest.json``. Each shard holds one record batch whose column
``input_ids`` is ``list<uint16>`` (``list<uint32>`` when the vocabulary
exceeds 65,536 IDs), uncompressed, so that it memory-maps: the list's values
buffer *is* the flat token stream and its offsets are the document boundaries,
and both are exposed as numpy views without a copy. Beside it, ``source``,
``file`` and ``document`` say where each row comes from
(:mod:`pipeline.shards.origins`). The same files open with
``pyarrow.ipc.open_stream``, ``polars.read_ipc_stream`` and
``datasets.Dataset.from_file``.

Every shard carries its provenance in the schema metadata (tokenizer
fingerprint, vocab size, dtype, special IDs, split, rows, tokens, prepared-data
fingerprint, format version); the manifest repeats it, because HF ``datasets``
drops custom schema metadata, and adds the sha256 of each shard
(:mod:`pipeline.shards.manifest`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from pipeline.data.documents import arrow_view, numpy_view
from pipeline.engine import atomic, hashing, locations, storage
from pipeline.errors import ShardError, TokenizerMismatchError, json_error_reason, shorten
from pipeline.shards.manifest import (
    REENCODE,
    Manifest,
    ShardEntry,
    ShardStamp,
    manifest_path,
    read_manifest,
    shard_name,
    write_manifest,
)
from pipeline.shards.origins import DOCUMENT, FIELDS, FILE, SOURCE, Origins, SourceCounts, document_id, source_counts

if TYPE_CHECKING:
    from pipeline.tokenizer import Tokenizer

COLUMN = "input_ids"
METADATA_PREFIX = "lmprep."
MAX_METADATA_BYTES = 1 << 20  # a stamp value is a fingerprint, a number or a small mapping: bytes, not megabytes
_MAX_SHARD_TOKENS = (1 << 31) - 1  # Arrow ``list`` offsets are int32


def shard_schema(dtype: np.dtype, metadata: Mapping[str, str] | None = None) -> pa.Schema:
    """The explicit shard schema: a non-null ``input_ids`` list column of ``dtype``, then the rows' origins."""
    column = pa.field(COLUMN, pa.list_(pa.from_numpy_dtype(dtype)), nullable=False)
    return pa.schema([column, *FIELDS], metadata=metadata)



# --------------------------------------------------------------------------- writing


class ShardWriter:
    """Cuts a stream of document batches into shards of about ``shard_tokens`` tokens.

    A document never straddles two shards: a shard is closed after the first
    document that brings it to ``shard_tokens`` or more. A pending shard is
    buffered (it is small) because its row and token counts go into the schema
    metadata, which an Arrow stream writes first. Each shard file is written
    atomically; the manifest is written last, by :meth:`close`.
    """

    def __init__(self, directory: str | os.PathLike[str], stamp: ShardStamp, *, shard_tokens: int,
                 prefix: str | None = None):
        if not 0 < shard_tokens <= _MAX_SHARD_TOKENS:
            raise ShardError(f"shard_tokens must be between 1 and {_MAX_SHARD_TOKENS}, got {shard_tokens}")
        self.directory = directory
        self.stamp = stamp
        self._prefix = stamp.split if prefix is None else prefix
        self._shard_tokens = shard_tokens
        self._pending: list[tuple[np.ndarray, np.ndarray, Origins]] = []
        self._pending_tokens = 0
        self._entries: list[ShardEntry] = []
        self._max_id = -1

    def write(self, ids: np.ndarray, offsets: np.ndarray, origins: Origins) -> None:
        """Append documents: ``ids`` flat, ``offsets`` of length documents + 1, ``origins`` one per document.

        Document ``i`` is ``ids[offsets[i]:offsets[i + 1]]``; ``offsets[0]`` may be non-zero.
        """
        ids, offsets = self._checked(ids, offsets)
        if len(origins) != len(offsets) - 1:
            raise ShardError(f"{len(origins)} document origins for {len(offsets) - 1} documents")
        while len(offsets) > 1:
            need = self._shard_tokens - self._pending_tokens
            cut = int(np.searchsorted(offsets, offsets[0] + need, side="left"))
            if cut >= len(offsets):
                self._append(ids, offsets, origins)
                return
            cut = int(np.searchsorted(offsets, offsets[cut], side="right")) - 1  # keep empty documents here
            self._append(ids, offsets[: cut + 1], origins[:cut])
            self._flush()
            offsets, origins = offsets[cut:], origins[cut:]

    def finish(self) -> Manifest:
        """Write the last partial shard; return the manifest of the shards written, without saving it."""
        self._flush()
        return Manifest(stamp=self.stamp, shards=tuple(self._entries), max_id=self._max_id)

    def close(self) -> Manifest:
        """Write the last partial shard and the manifest; return the manifest."""
        manifest = self.finish()
        write_manifest(self.directory, manifest)
        return manifest

    def _checked(self, ids: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        offsets = np.asarray(offsets, dtype=np.int64)
        if len(offsets) == 0 or np.any(np.diff(offsets) < 0) or offsets[-1] > len(ids) or offsets[0] < 0:
            raise ShardError("document offsets must be non-decreasing and within the ID array")
        chunk = ids[offsets[0] : offsets[-1]]
        if len(chunk):
            batch_max = int(chunk.max())
            if batch_max >= self.stamp.vocab_size:
                raise ShardError(
                    f"token ID {batch_max} is outside the vocabulary of {self.stamp.vocab_size:,} "
                    f"(split {self.stamp.split!r}); the IDs were not made by this tokenizer"
                )
            self._max_id = max(self._max_id, batch_max)
        return ids, offsets

    def _append(self, ids: np.ndarray, offsets: np.ndarray, origins: Origins) -> None:
        if len(offsets) > 1:
            self._pending.append((ids[offsets[0] : offsets[-1]], offsets - offsets[0], origins))
            self._pending_tokens += int(offsets[-1] - offsets[0])

    def _flush(self) -> None:
        if not self._pending:
            return
        values, offsets = _concatenate(self._pending, self.stamp.dtype)
        origins = Origins.join([chunk[2] for chunk in self._pending])
        name = shard_name(self._prefix, len(self._entries))
        metadata = _shard_metadata(self.stamp, rows=len(offsets) - 1, tokens=len(values))
        digest = _write_shard(locations.join(self.directory, name), values, offsets, origins, metadata)
        self._entries.append(ShardEntry(file=name, rows=len(offsets) - 1, tokens=len(values), sha256=digest,
                                        sources=source_counts(origins.sources, np.diff(offsets))))
        self._pending, self._pending_tokens = [], 0


def _concatenate(chunks: list[tuple[np.ndarray, np.ndarray, Origins]],
                 dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """Join the chunks' IDs and zero-based offsets into one values array (one chunk's own, not a copy) and int32
    offsets."""
    values = chunks[0][0] if len(chunks) == 1 else np.concatenate([chunk[0] for chunk in chunks])
    values = values.astype(dtype, copy=False)
    if len(values) > _MAX_SHARD_TOKENS:
        raise ShardError(f"a shard would hold {len(values)} tokens, over Arrow's list limit of {_MAX_SHARD_TOKENS}")
    shifts = np.cumsum([0] + [len(chunk[0]) for chunk in chunks[:-1]])
    parts = [chunk[1][:-1] + shift for chunk, shift in zip(chunks, shifts)]
    offsets = np.concatenate([*parts, [len(values)]]).astype(np.int32)
    return values, offsets


def _shard_metadata(stamp: ShardStamp, *, rows: int, tokens: int) -> dict[str, str]:
    fields = {**stamp.to_dict(), "rows": rows, "tokens": tokens}
    return {METADATA_PREFIX + key: atomic.dumps_json(value, indent=None) for key, value in fields.items()}


def _write_shard(path: Path | str, values: np.ndarray, offsets: np.ndarray, origins: Origins,
                 metadata: dict[str, str]) -> str:
    """Write one shard atomically and return its sha256."""
    schema = shard_schema(values.dtype, metadata)
    column = pa.ListArray.from_arrays(arrow_view(offsets), arrow_view(values), type=schema.field(COLUMN).type)
    with storage.output_file(path) as tmp, open(tmp, "wb") as handle:
        hashed = hashing.HashingWriter(handle)
        with pa.PythonFile(hashed, mode="w") as sink, pa.ipc.new_stream(sink, schema) as writer:
            writer.write_batch(pa.record_batch([column, *origins.columns()], schema=schema))
    return hashed.hexdigest()


# --------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class Shard:
    """One memory-mapped shard: ``tokens``, ``offsets``, ``sources`` (per row) are views into the mapping;
    ``batch`` is the record batch, for writers that copy the rows elsewhere."""

    path: Path | str
    tokens: np.ndarray
    offsets: np.ndarray
    metadata: Mapping[str, Any] = field(repr=False)
    sources: np.ndarray = field(repr=False)
    batch: pa.RecordBatch = field(repr=False)

    @property
    def num_documents(self) -> int:
        return len(self.offsets) - 1

    @property
    def num_tokens(self) -> int:
        return len(self.tokens)

    def document(self, index: int) -> np.ndarray:
        return self.tokens[self.offsets[index] : self.offsets[index + 1]]

    def document_id(self, index: int) -> str:
        """The ID of row ``index``'s document: its raw file (or the part of it one task read), ``#``, its number."""
        files = self.batch.column(FILE)
        return document_id(files.dictionary[files.indices[index].as_py()].as_py(),
                           self.batch.column(DOCUMENT)[index].as_py())

    def source_counts(self) -> SourceCounts:
        return source_counts(self.sources, np.diff(self.offsets))


def open_shard(path: str | os.PathLike[str], *, name: str | os.PathLike[str] | None = None) -> Shard:
    """Memory-map one shard file; ShardError if it is not a well-formed shard. ``name`` is where the file came
    from, when ``path`` is a local copy of it (a remote shard's download): errors and ``Shard.path`` say it.

    Arrow's full validation runs before any buffer is touched: a damaged
    length or offset would otherwise make a numpy view reach past the mapping,
    and reading it kills the process with a segfault.
    """
    path = Path(path)
    named = path if name is None else name
    try:
        reader = pa.ipc.open_stream(pa.memory_map(str(path)))
        batches = list(reader)
        for batch in batches:
            batch.validate(full=True)
    except (OSError, pa.ArrowException) as exc:
        raise ShardError(f"{named}: cannot read shard ({shorten(str(exc), 300)}); {REENCODE}") from None
    batch = _single_batch(named, reader.schema, batches)
    column = batch.column(0)
    offsets = numpy_view(column.offsets)
    tokens = numpy_view(column.values)[offsets[0] : offsets[-1]]
    return Shard(path=named, tokens=tokens, offsets=offsets, metadata=_parse_metadata(named, reader.schema),
                 sources=numpy_view(batch.column(SOURCE)), batch=batch)


def _single_batch(path: Path, schema: pa.Schema, batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    """The shard's one record batch, of the shard schema, without nulls or negative origins."""
    expected = {shard_schema(np.dtype(dtype)) for dtype in (np.uint16, np.uint32)}
    if schema.remove_metadata() not in expected:
        raise ShardError(f"{path}: schema {shorten(str(schema.remove_metadata()), 300)} is not a token shard schema "
                         f"(input_ids, then {', '.join(f'{f.name}: {f.type}' for f in FIELDS)}); {REENCODE}")
    if len(batches) != 1 or batches[0].column(0).offset != 0:
        raise ShardError(f"{path}: expected exactly one record batch, found {len(batches)}")
    batch = batches[0]
    column = batch.column(0)
    if column.null_count or column.values.null_count:
        raise ShardError(f"{path}: the input_ids column contains nulls")
    for origin in FIELDS:
        values = batch.column(origin.name)
        negative = origin.name != FILE and len(values) and numpy_view(values).min() < 0
        if values.null_count or negative:
            raise ShardError(f"{path}: the {origin.name} column holds nulls or negative values; {REENCODE}")
    return batch


def _parse_metadata(path: Path, schema: pa.Schema) -> dict[str, Any]:
    """The shard's stamp from its schema metadata, each value at most ``MAX_METADATA_BYTES`` of JSON."""
    raw = schema.metadata or {}
    prefix = METADATA_PREFIX.encode()
    large = next((key for key, value in raw.items()
                  if key.startswith(prefix) and len(value) > MAX_METADATA_BYTES), None)
    if large is not None:
        raise ShardError(f"{path}: shard metadata {large.decode(errors='backslashreplace')!r} is larger than "
                         f"{MAX_METADATA_BYTES:,} bytes, so it is not lmprep's; {REENCODE}")
    try:
        return {key[len(prefix) :].decode(): json.loads(value) for key, value in raw.items() if key.startswith(prefix)}
    except (ValueError, RecursionError) as exc:
        raise ShardError(f"{path}: malformed shard metadata ({json_error_reason(exc)}); {REENCODE}") from None


class ShardSet:
    """A memory-mapped, verified shard set for one split."""

    def __init__(self, directory: Path, manifest: Manifest, shards: list[Shard]):
        self.directory = directory
        self.manifest = manifest
        self.shards = shards
        self._shard_sizes = np.array([shard.num_tokens for shard in shards], dtype=np.int64)

    @classmethod
    def open(
        cls,
        directory: str | os.PathLike[str],
        split: str,
        *,
        tokenizer: Tokenizer | None = None,
        verify: bool = True,
    ) -> ShardSet:
        """Open ``directory``'s shard set for ``split``.

        Always checks each shard's metadata against the manifest and, given a
        ``tokenizer``, its fingerprint and vocab size (TokenizerMismatchError),
        and each shard's Arrow value type against the manifest's dtype.
        ``verify`` also checks every shard's sha256 and that its largest ID is
        below the vocab size and the largest of all is the manifest's ``max_id``:
        one read of the files.
        Shards of a URL (its committed output) are memory-mapped too, from local copies (:func:`_open_entry`).
        """
        manifest = read_manifest(directory, split)
        directory = storage.committed(directory) if locations.is_url(directory) else Path(directory)
        if tokenizer is not None:
            _check_tokenizer(manifest, tokenizer, manifest_path(directory, split))
        shards = []
        for entry in manifest.shards:
            shard = _open_entry(locations.join(directory, entry.file), entry, verify=verify)
            _check_shard_metadata(shard, entry, manifest)
            shards.append(shard)
        if verify:
            _verify_max_id(shards, manifest, manifest_path(directory, split))
        return cls(directory, manifest, shards)

    @property
    def split(self) -> str:
        return self.manifest.stamp.split

    @property
    def tokenizer_fingerprint(self) -> str:
        return self.manifest.stamp.tokenizer_fingerprint

    @property
    def vocab_size(self) -> int:
        return self.manifest.stamp.vocab_size

    @property
    def special_ids(self) -> Mapping[str, int | None]:
        return self.manifest.stamp.special_ids

    @property
    def dtype(self) -> np.dtype:
        return self.manifest.stamp.dtype

    @property
    def fingerprint(self) -> str:
        """Content hash of the set: the canonical hash of its manifest (which lists each shard's sha256)."""
        return hashing.canonical_hash(self.manifest.to_dict())

    @property
    def num_tokens(self) -> int:
        return self.manifest.tokens

    @property
    def num_documents(self) -> int:
        return self.manifest.rows

    @property
    def max_id(self) -> int:
        return self.manifest.max_id

    def locate(self, position: int) -> tuple[Shard, int]:
        """The shard holding token ``position`` of the split's stream (as ``train.bin`` lays it out) and the
        row of the document it belongs to; IndexError beyond the last token."""
        if not 0 <= position < self.num_tokens:
            raise IndexError(f"token {position:,} is not in split {self.split!r} ({self.num_tokens:,} tokens)")
        starts = np.cumsum(self._shard_sizes) - self._shard_sizes
        index = int(np.searchsorted(starts, position, side="right")) - 1
        while self._shard_sizes[index] == 0:  # an empty shard starts where the next one does
            index += 1
        shard = self.shards[index]
        return shard, int(np.searchsorted(shard.offsets, position - starts[index], side="right")) - 1

    def locate_row(self, row: int) -> tuple[Shard, int]:
        """The shard holding row ``row`` of the split and its row there; IndexError beyond the last row."""
        if not 0 <= row < self.num_documents:
            raise IndexError(f"row {row:,} is not in split {self.split!r} ({self.num_documents:,} rows)")
        for shard in self.shards:
            if row < shard.num_documents:
                return shard, row
            row -= shard.num_documents
        raise AssertionError("unreachable: the rows add up to num_documents")

    def documents(self) -> Iterator[np.ndarray]:
        """Yield each document's IDs, in order, as views into the mapped shards."""
        for shard in self.shards:
            for index in range(shard.num_documents):
                yield shard.document(index)

    def sample_batch(self, rng: np.random.Generator, batch_size: int, context: int) -> np.ndarray:
        """``batch_size`` random windows of ``context + 1`` tokens, as int64 ``[batch, context + 1]``.

        Windows are uniform over every position of the token stream where a
        whole window fits inside one shard (they may span documents, as in
        nanoGPT). Slicing the mapped views per window and joining them once is
        faster than building a ``batch × context`` index array for a fancy
        gather (docs/performance.md).
        """
        return self.gather_windows(*self.window_starts(rng, batch_size, context), context)

    def window_starts(self, rng: np.random.Generator, batch_size: int, context: int) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`sample_batch`'s windows: the shard and the first token of each."""
        if batch_size < 1 or context < 1:
            raise ValueError(f"batch_size and context must be positive, got {batch_size} and {context}")
        windows = np.maximum(self._shard_sizes - context, 0)
        ends = np.cumsum(windows)
        if len(ends) == 0 or ends[-1] == 0:
            raise ShardError(
                f"{self.directory}: no shard of split {self.split!r} holds a window of {context + 1} tokens; "
                f"lower train.context or raise encode.shard_tokens"
            )
        picks = rng.integers(0, ends[-1], size=batch_size)
        which = np.searchsorted(ends, picks, side="right")
        return which, picks - (ends[which] - windows[which])

    def gather_windows(self, shards: np.ndarray, starts: np.ndarray, context: int) -> np.ndarray:
        """The windows of ``context + 1`` tokens at ``starts`` of ``shards``, as int64 ``[windows, context + 1]``."""
        width = context + 1
        views = [self.shards[k].tokens[s : s + width] for k, s in zip(shards.tolist(), starts.tolist())]
        return np.concatenate(views).reshape(len(views), width).astype(np.int64)


def _check_tokenizer(manifest: Manifest, tokenizer: Tokenizer, path: Path) -> None:
    stamp = manifest.stamp
    if stamp.tokenizer_fingerprint != tokenizer.fingerprint:
        raise TokenizerMismatchError(
            f"{path}: shards were encoded with tokenizer {stamp.tokenizer_fingerprint}, but the given "
            f"tokenizer is {tokenizer.fingerprint}; re-encode with 'lmprep run encode' or use the tokenizer "
            f"that made them"
        )
    if stamp.vocab_size != tokenizer.vocab_size:
        raise TokenizerMismatchError(
            f"{path}: shards record vocab size {stamp.vocab_size:,}, the tokenizer has {tokenizer.vocab_size:,}"
        )


def _check_shard_metadata(shard: Shard, entry: ShardEntry, manifest: Manifest) -> None:
    """Each shard must carry the same stamp as its manifest, and its own row/token counts."""
    expected = {**manifest.stamp.to_dict(), "rows": entry.rows, "tokens": entry.tokens}
    missing = sorted(set(expected) - set(shard.metadata))
    if missing:
        raise TokenizerMismatchError(
            f"{shard.path}: shard metadata lacks {', '.join(missing)}, so the tokenizer that made it is "
            f"unknown; {REENCODE}"
        )
    if shard.metadata["tokenizer_fingerprint"] != manifest.stamp.tokenizer_fingerprint:
        raise TokenizerMismatchError(
            f"{shard.path}: shard was encoded with tokenizer {shard.metadata['tokenizer_fingerprint']}, "
            f"but its manifest says {manifest.stamp.tokenizer_fingerprint}; {REENCODE}"
        )
    wrong = [key for key in expected if shard.metadata[key] != expected[key]]
    if wrong or (shard.num_documents, shard.num_tokens) != (entry.rows, entry.tokens):
        raise ShardError(
            f"{shard.path}: shard does not match its manifest ({', '.join(wrong) or 'rows/tokens'}); {REENCODE}"
        )
    if shard.source_counts() != entry.sources:
        raise ShardError(f"{shard.path}: its rows per source {list(shard.source_counts())} differ from the manifest's "
                         f"{list(entry.sources)}; {REENCODE}")
    if shard.tokens.dtype != manifest.stamp.dtype:
        raise ShardError(
            f"{shard.path}: the token IDs are stored as {shard.tokens.dtype}, but the manifest's dtype is "
            f"{manifest.stamp.dtype}; {REENCODE}"
        )


def _open_entry(location: Path | str, entry: ShardEntry, *, verify: bool) -> Shard:
    """Memory-map the manifest entry's shard at ``location``, its sha256 checked first when ``verify``.

    A remote shard is downloaded to a temporary file (streamed to disk, never whole in memory), mapped, and
    the file unlinked at once: the mapping keeps it, its pages are the file's (the kernel writes them back and
    drops them under pressure, as for a local shard), and its disk space is freed with the shard's last view.
    So a remote shard set costs the heap nothing per shard, and the temporary directory its size on disk.
    """
    with storage.local_copy(location) as path:
        if verify:
            _verify_checksum(path, entry, name=location)
        return open_shard(path, name=location)


def _verify_checksum(path: Path, entry: ShardEntry, *, name: Path | str) -> None:
    """Compare the file's sha256 with the manifest's, before the file is opened as a shard."""
    try:
        digest = hashing.sha256_file(path)
    except OSError as exc:
        raise ShardError(f"{name}: cannot read shard ({exc.strerror}); {REENCODE}") from None
    if digest != entry.sha256:
        raise ShardError(
            f"{name}: checksum {digest} differs from the manifest's {entry.sha256}; "
            f"the file is corrupt or was changed, {REENCODE}"
        )


def _verify_max_id(shards: list[Shard], manifest: Manifest, path: Path | str) -> None:
    """No ID reaches the vocab size, and the largest ID is exactly the manifest's ``max_id``."""
    vocab_size, largest = manifest.stamp.vocab_size, -1
    for shard in shards:
        top = int(shard.tokens.max()) if shard.num_tokens else -1
        if top >= vocab_size:
            raise ShardError(f"{shard.path}: token ID {top} is outside the vocabulary of {vocab_size}")
        if top > manifest.max_id:
            raise ShardError(f"{shard.path}: token ID {top} is above the manifest's max_id {manifest.max_id}; "
                             f"{REENCODE}")
        largest = max(largest, top)
    if largest != manifest.max_id:
        raise ShardError(f"{path}: max_id {manifest.max_id}, but the largest token ID in the shards is {largest}; "
                         f"{REENCODE}")
