"""Encode prepared documents into token shards: one task per prepared part file.

A task (:func:`encode_part`) reads its part file from storage, cuts it into
runs of about 1 MB of UTF-8 (slices of its text column), encodes each run with the
tokenizer loaded once per process (a forked worker inherits the driver's), adds the BOS/EOS
IDs and writes its own shards, named after the part (``train-00003-00000.arrow``,
…). It returns only their manifest entries; the driver joins them in part
order, renames the shards to ``train-00000.arrow``, … in that order and writes
``{split}.manifest.json`` last, so the output is byte-identical for any number
of workers and a manifest never lists a shard a task did not finish. Each task
holds one shard and one run in memory.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401  # loaded once, before the pool forks the workers that parse IDs with it

from pipeline.data import documents
from pipeline.engine import completion, hashing, locations, storage
from pipeline.engine.completion import Scratch
from pipeline.engine.executor import Tasks
from pipeline.errors import DataError, TokenizerError, TokenizerMismatchError
from pipeline.shards import resume
from pipeline.shards.format import ShardWriter
from pipeline.shards.manifest import Manifest, ShardStamp, join_manifests, shard_name, write_manifest
from pipeline.shards.origins import Origins
from pipeline.tokenizer import Tokenizer, shared
from pipeline.tokenizer.encoder import DEFAULT_CACHE_BYTES

TASK_BYTES = 1 << 20


@dataclass(frozen=True)
class EncodeTask:
    """A run of documents: a slice of a part's text column (a view, not a copy) and the documents' origins."""

    tokenizer_path: str
    tokenizer_fingerprint: str
    texts: pa.LargeStringArray
    origins: Origins  # each document's source and ID, which the shards keep beside its IDs
    bos_id: int | None
    eos_id: int | None
    cache_bytes: int = DEFAULT_CACHE_BYTES


@dataclass(frozen=True)
class EncodedBatch:
    ids: np.ndarray
    offsets: np.ndarray
    origins: Origins


def add_special_ids(ids: np.ndarray, offsets: np.ndarray, *, bos_id: int | None, eos_id: int | None,
                    dtype: np.dtype | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Put ``bos_id`` before and ``eos_id`` after every document, by ID, without a loop per document; the IDs
    as ``dtype`` (default: theirs), converted in the same pass. The documents' IDs go where a mask leaves room
    for the special ones (a scatter by index took 20 times as long).

    >>> ids, offsets = add_special_ids(np.array([5, 6, 7]), np.array([0, 2, 2, 3]), bos_id=None, eos_id=9)
    >>> ids.tolist(), offsets.tolist()
    ([5, 6, 9, 9, 7, 9], [0, 3, 4, 6])
    """
    ids, offsets = ids[offsets[0] : offsets[-1]], offsets - offsets[0]
    dtype = dtype or ids.dtype
    extra = (bos_id is not None) + (eos_id is not None)
    if extra == 0:
        return ids.astype(dtype, copy=False), offsets
    new_offsets = offsets + np.arange(len(offsets)) * extra
    specials = [(role_id, places) for role_id, places in ((bos_id, new_offsets[:-1]), (eos_id, new_offsets[1:] - 1))
                if role_id is not None]
    in_documents = np.ones(new_offsets[-1], dtype=bool)
    for _, places in specials:
        in_documents[places] = False
    out = np.empty(new_offsets[-1], dtype=dtype)
    out[in_documents] = ids
    for role_id, places in specials:
        out[places] = role_id
    return out, new_offsets


_TOKENIZERS: dict[str, Tokenizer] = {}  # by absolute path, as the tasks name the file


def load_tokenizer_cached(path: str, fingerprint: str) -> Tokenizer:
    """The worker's tokenizer: loaded once per process, reloaded if the file changed since."""
    tokenizer = _TOKENIZERS.get(path)
    if tokenizer is None or tokenizer.fingerprint != fingerprint:
        tokenizer = _TOKENIZERS[path] = Tokenizer.load(path)
    if tokenizer.fingerprint != fingerprint:
        raise TokenizerMismatchError(
            f"{path}: tokenizer changed during encoding (fingerprint {tokenizer.fingerprint}, "
            f"expected {fingerprint}); re-run 'lmprep run encode'"
        )
    return tokenizer


def share_tokenizer(path: str) -> Tokenizer:
    """Load the tokenizer, its encoder built, into this process's cache before the pool starts its workers.

    Forked workers inherit both and skip their own load, a sizeable share of a
    worker's time on a small corpus (docs/performance.md); spawned ones load it
    once. A file whose content was loaded before in this process (by the config's frozen tokenizer, the
    stage, another split: :mod:`pipeline.tokenizer.shared`) is not parsed again, however each names it (the
    tasks name it by its absolute path).
    """
    tokenizer = _TOKENIZERS[str(locations.absolute(path))] = shared.load(path)
    tokenizer.build_encoder()
    return tokenizer


def encode_task(task: EncodeTask) -> EncodedBatch:
    """Decode the task's documents, encode them and add the special IDs."""
    tokenizer = load_tokenizer_cached(task.tokenizer_path, task.tokenizer_fingerprint)
    tokenizer.bound_cache(task.cache_bytes)
    ids, offsets = tokenizer.encode_batch_flat(task.texts.to_pylist())
    ids, offsets = add_special_ids(ids, offsets, bos_id=task.bos_id, eos_id=task.eos_id,
                                   dtype=tokenizer.id_dtype)
    return EncodedBatch(ids, offsets, task.origins)


def iter_tasks(source: Path, tokenizer: Tokenizer, tokenizer_path: str, *, bos_id: int | None,
               eos_id: int | None, task_bytes: int = TASK_BYTES, cache_bytes: int = DEFAULT_CACHE_BYTES,
               content: bytes | None = None) -> Iterator[EncodeTask]:
    """Cut a prepared file into tasks of about ``task_bytes`` of text (at least one document each); ``content``:
    the file's bytes, if the caller read them already."""
    for column, origins in _text_columns(source, content):
        for start, end in _task_bounds(documents.text_offsets(column), task_bytes):
            yield EncodeTask(tokenizer_path, tokenizer.fingerprint, column.slice(start, end - start),
                             origins[start:end], bos_id, eos_id, cache_bytes)


def _text_columns(source: Path, content: bytes | None) -> Iterator[tuple[pa.LargeStringArray, Origins]]:
    """The ``text`` column of each record batch, undecoded, and its documents' origins; the file is read (or
    ``content`` parsed), not memory-mapped (:func:`pipeline.data.documents.record_batches`)."""
    for batch in documents.record_batches(source, mapped=False, content=content):
        sources, ids = documents.document_origins(source, batch)
        try:
            yield batch.column(0), Origins.from_ids(sources, ids)
        except ValueError as exc:
            raise DataError(f"{source}: {exc}; re-run 'lmprep run prepare'") from None


def _task_bounds(offsets: np.ndarray, task_bytes: int) -> Iterator[tuple[int, int]]:
    start, count = 0, len(offsets) - 1
    while start < count:
        end = int(np.searchsorted(offsets, offsets[start] + task_bytes, side="right")) - 1
        end = min(max(end, start + 1), count)
        yield start, end
        start = end


@dataclass(frozen=True)
class PartJob:
    """What one encode task needs: small and picklable."""

    source: Path | str
    scratch: Scratch  # its shards go to its place there, then its completion record
    stamp: ShardStamp
    prefix: str
    sha256: str
    tokenizer_path: str
    shard_tokens: int
    bos_id: int | None
    eos_id: int | None
    task_bytes: int
    cache_bytes: int
    code_version: int
    vouched: list[int] | None = None  # the stamp under which the driver's hash cache knows the part has sha256

    @property
    def identity(self) -> str:
        """What the completion record says was encoded: everything that shapes the part's shards."""
        return completion.job_identity(self.code_version, resume.LAYOUT, os.fspath(self.source), self.sha256,
                                       self.stamp.to_dict(), self.shard_tokens, self.bos_id, self.eos_id,
                                       self.task_bytes)


def encode_part(job: PartJob) -> Manifest:
    """Task: encode one prepared part file into its own shards; return their (unsaved) manifest."""
    with storage.local_copy(job.source) as source:
        # one read: checked (hashed unless the file keeps the stamp the driver vouched for), then parsed from memory
        content, digest = hashing.read_with_sha256(source, known=(job.vouched, job.sha256) if job.vouched else None)
        if digest != job.sha256:
            raise DataError(f"{job.source}: changed since it was prepared (checksum differs from "
                            f"{documents.PARTS_FILE}); re-run 'lmprep run prepare'")
        tokenizer = load_tokenizer_cached(job.tokenizer_path, job.stamp.tokenizer_fingerprint)
        writer = ShardWriter(job.scratch.location, job.stamp, shard_tokens=job.shard_tokens, prefix=job.prefix)
        for task in iter_tasks(source, tokenizer, job.tokenizer_path, bos_id=job.bos_id, eos_id=job.eos_id,
                               task_bytes=job.task_bytes, cache_bytes=job.cache_bytes, content=content):
            batch = encode_task(task)
            writer.write(batch.ids, batch.offsets, batch.origins)
    manifest = writer.finish()
    resume.save_record(job.scratch, job.prefix, job.identity, manifest)
    return manifest


def encode_corpus(prepared_dir: str | os.PathLike[str], output_dir: str | os.PathLike[str], *,
                  tokenizer_path: str | os.PathLike[str], tasks: Tasks, shard_tokens: int,
                  bos_id: int | None = None, eos_id: int | None = None, splits: Iterable[str] = documents.SPLITS,
                  task_bytes: int = TASK_BYTES, cache_bytes: int = DEFAULT_CACHE_BYTES,
                  progress: bool = False, code_version: int = 0,
                  notify: Callable[[str], None] = lambda message: None) -> list[Manifest]:
    """Encode every split into a fresh shard directory swapped in atomically; return the manifests.

    An exception or a kill mid-way leaves the previous ``output_dir`` intact, and the parts its tasks
    finished (:mod:`pipeline.shards.resume`): the next call with the same inputs, settings and
    ``code_version`` encodes only the others, and says so through ``notify``. ``cache_bytes`` bounds
    each task's chunk cache (see :mod:`pipeline.tokenizer.encoder`).
    """
    path = str(locations.absolute(tokenizer_path))
    tokenizer = share_tokenizer(path)
    _check_special_ids(tokenizer, path, bos_id=bos_id, eos_id=eos_id)
    prepared = storage.committed(prepared_dir)
    partial = resume.PartialParts(output_dir)
    with storage.output_dir(output_dir) as staging:
        jobs: list[PartJob] = []
        sizes: list[int] = []
        stamps = {}
        for split in splits:
            parts = documents.read_parts(prepared, split)
            stamps[split] = ShardStamp(split=split, tokenizer_fingerprint=tokenizer.fingerprint,
                                       vocab_size=tokenizer.vocab_size, special_ids={"bos": bos_id, "eos": eos_id},
                                       prepared_fingerprint=documents.split_fingerprint(parts))
            for part in parts:
                if not part.documents:
                    continue
                source = locations.join(prepared, part.file)
                jobs.append(PartJob(source, partial.scratch, stamps[split], f"{split}-{part.index:05d}", part.sha256,
                                    path, shard_tokens, bos_id, eos_id, task_bytes, cache_bytes, code_version,
                                    hashing.vouched_stamp(source, part.sha256)))
                sizes.append(part.bytes)
        results = _encode_parts(jobs, sizes, partial, tasks=tasks, progress=progress, notify=notify)
        manifests = []
        for split, stamp in stamps.items():
            parts = [result for job, result in zip(jobs, results) if job.stamp.split == split]
            manifest = _gather_shards(partial, staging, stamp, parts)
            write_manifest(staging, manifest)
            manifests.append(manifest)
    partial.remove()
    _remember_digests(output_dir, manifests)
    return manifests


def _remember_digests(output_dir: str | os.PathLike[str], manifests: list[Manifest]) -> None:
    """Tell this process's hash caches the shards' checksums, which their tasks took as they wrote them, so that
    the runner does not read every shard back to record the output (after the scratch's links went: removing
    one changes a shard's ctime)."""
    if locations.is_url(output_dir):
        return
    for manifest in manifests:
        for entry in manifest.shards:
            hashing.remember(locations.join(output_dir, entry.file), entry.sha256)


def _encode_parts(jobs: list[PartJob], sizes: list[int], partial: resume.PartialParts, *, tasks: Tasks,
                  progress: bool, notify: Callable[[str], None]) -> list[Manifest]:
    """Each job's manifest, in order: the parts an earlier run finished are taken, the others encoded."""
    found = partial.finished([(job.prefix, job.identity, job.stamp) for job in jobs])
    done = {index: manifest for index, manifest in enumerate(found) if manifest is not None}
    if done:
        notify(f"reusing {len(done)} of {len(jobs)} parts that an interrupted run finished ({partial.scratch.shown})")
    todo = [index for index in range(len(jobs)) if index not in done]
    encoded = tasks.map(encode_part, [jobs[i] for i in todo], sizes=[sizes[i] for i in todo], desc="encode",
                        labels=[f"{jobs[i].prefix} ({jobs[i].source})" for i in todo], progress=progress)
    results = {**done, **dict(zip(todo, encoded))}
    return [results[index] for index in range(len(jobs))]


def _gather_shards(partial: resume.PartialParts, staging: Path | str, stamp: ShardStamp,
                   parts: list[Manifest]) -> Manifest:
    """The split's shards in the staging output under the set's names, ``{split}-00000.arrow``, … in part
    order (a hard link, or the store's copy, of each part's shard); their manifest."""
    entries, copies = [], []
    for manifest in parts:
        for entry in manifest.shards:
            name = shard_name(stamp.split, len(entries))
            copies.append((partial.shard(entry.file), locations.join(staging, name)))
            entries.append(dataclasses.replace(entry, file=name))
    storage.copy_files(copies)
    return dataclasses.replace(join_manifests(stamp, parts), shards=tuple(entries))


def _check_special_ids(tokenizer: Tokenizer, path: str, *, bos_id: int | None, eos_id: int | None) -> None:
    for role, token_id in (("bos", bos_id), ("eos", eos_id)):
        if token_id is not None and not 0 <= token_id < tokenizer.vocab_size:
            raise TokenizerError(f"{role} ID {token_id} is outside the vocabulary of {path} ({tokenizer.vocab_size:,})")
