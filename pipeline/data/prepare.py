"""The prepare step: raw files → cleaned, de-duplicated train/val part files plus stats.

Three rounds of partition tasks; each task reads its own files and writes its
own, and the driver sees only counts and checksums:

1. **scan** (one task per input partition): read, clean and filter the
   documents; write the survivors to ``candidates-<p>`` and their 16-byte
   BLAKE2b digests, grouped by bucket (digest modulo ``dedup_buckets``), to
   ``digests-<p>``.
2. **deduplicate** (one task per bucket): read the bucket's digests of every
   partition in corpus order and mark each copy after the first, writing
   ``duplicates-<b>`` (partition, position) pairs. A digest lives in one bucket,
   so exact duplicates anywhere in the corpus meet in one task, and the first
   copy in input order wins as in a single pass. Its memory is about 80 bytes
   per document of its bucket: 10 million documents in 16 buckets cost ~50 MB
   per task, and no process holds every digest.
3. **write** (one task per input partition): drop the marked copies, send each
   document to train or val by a seeded hash of its text, and write
   ``train/part-<p>.arrow`` and ``val/part-<p>.arrow``.

Part names come from the partition index, so the output is byte-identical for
any number of workers. Everything is built in a staging directory swapped in
whole: an error (bad UTF-8, a bad JSON line, no document left for the train
split) or an interrupt leaves the previous output untouched. The intermediate
files of ``.work`` are not fsynced: a crash discards the staging directory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.config import PrepareConfig
from pipeline.data import documents
from pipeline.data.cleaning import PrepareStats, clean_text, drop_reason, split_of
from pipeline.data.documents import SPLITS, DocumentWriter, PreparedPart
from pipeline.data.sources import Partition, SourceFile, TextDecoder, plan_partitions, read_partition
from pipeline.engine import atomic, hashing, storage
from pipeline.engine.executor import Tasks
from pipeline.errors import DataError

STATS_FILE = "stats.json"
WORK_DIR = ".work"


@dataclass(frozen=True)
class ScanResult:
    documents_read: int
    characters_read: int
    dropped: dict[str, int]
    unsplit: tuple[tuple[str, str], ...] = ()  # (separator, file) of the files a literal separator never split


@dataclass(frozen=True)
class WrittenPart:
    part: PreparedPart
    characters: int


def prepare_corpus(files: Sequence[SourceFile], settings: PrepareConfig, out_dir: str | os.PathLike[str], *,
                   tasks: Tasks, progress: bool = False) -> PrepareStats:
    """Write ``out_dir``'s part files, ``parts.json`` and ``stats.json`` from ``files``; return the stats."""
    partitions = [dataclasses.replace(partition, pieces=tuple(dataclasses.replace(piece, file=_absolute(piece.file))
                                                              for piece in partition.pieces))
                  for partition in plan_partitions(files, settings.partition_bytes)]
    labels, sizes = [f"{p.index} ({p.describe()})" for p in partitions], [p.size for p in partitions]
    with storage.output_dir(out_dir) as staging:
        work = storage.join(staging, WORK_DIR)
        storage.make_dir(work)
        scans = tasks.map(functools.partial(scan_partition, settings, work), partitions, labels=labels, sizes=sizes,
                          desc="prepare: read and clean", progress=progress)
        buckets = range(settings.dedup_buckets)
        duplicates = tasks.map(functools.partial(find_duplicates, work, len(partitions)), buckets,
                               labels=[f"dedup bucket {b}" for b in buckets], desc="prepare: deduplicate",
                               progress=progress)
        written = tasks.map(functools.partial(write_partition, settings, work, staging), partitions, labels=labels,
                            sizes=sizes, desc="prepare: write", progress=progress)
        storage.remove(work)
        if not storage.is_url(staging):  # uploads leave no temporaries
            for split in SPLITS:
                atomic.remove_temporaries_in(documents.split_dir(staging, split))
        documents.write_parts(staging, {split: [parts[split].part for parts in written] for split in SPLITS})
        stats = _stats(files, scans, sum(duplicates), written)
        _refuse_empty_train_split(stats, files, settings.val_fraction)
        storage.write_bytes(storage.join(staging, STATS_FILE), (atomic.dumps_json(stats.to_dict()) + "\n").encode())
    return stats


def _refuse_empty_train_split(stats: PrepareStats, files: Sequence[SourceFile], val_fraction: float) -> None:
    """An empty train split is an error here, where its cause is known, not later in the tokenizer or train."""
    if stats.documents["train"]:
        return
    if stats.documents_kept:
        raise DataError(f"0 of the {stats.documents_kept:,} documents kept fell in the train split "
                        f"(prepare.val_fraction={val_fraction}); add data or lower prepare.val_fraction; "
                        "the previous prepared data is left as it was")
    raise DataError(f"0 documents kept from {_name_files(files)} (read {stats.documents_read:,}, dropped: "
                    f"{stats.describe_drops()}); check data.sources and the prepare filters; "
                    "the previous prepared data is left as it was")


def _name_files(files: Sequence[SourceFile], shown: int = 3) -> str:
    names = ", ".join(str(file.path) for file in files[:shown])
    return names + (f" and {len(files) - shown} more files" if len(files) > shown else "")


def scan_partition(settings: PrepareConfig, work: Path | str, partition: Partition) -> ScanResult:
    """Task: read, clean and filter one partition; write its candidates and their digests by bucket."""
    decoder = TextDecoder(settings.on_decode_error)
    read = characters = 0
    dropped: dict[str, int] = {}
    digests: list[bytes] = []
    candidates = storage.join(work, f"candidates-{partition.index:05d}.arrow")
    with storage.output_file(candidates, durable=False) as tmp, DocumentWriter(tmp) as writer:
        for raw in read_partition(partition, decoder):
            read += 1
            characters += len(raw)
            text = clean_text(raw, normalize=settings.normalize)
            reason = drop_reason(text, min_chars=settings.min_chars, max_chars=settings.max_chars)
            if reason is None:
                writer.write(text)
                digests.append(hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest())
            else:
                dropped[reason] = dropped.get(reason, 0) + 1
    if decoder.skipped:
        dropped["decode_error"] = decoder.skipped
    _save_digests(storage.join(work, f"digests-{partition.index:05d}.npz"), digests, settings.dedup_buckets)
    return ScanResult(read + decoder.skipped, characters, dropped, tuple(decoder.unsplit))


def find_duplicates(work: Path | str, partitions: int, bucket: int) -> int:
    """Task: mark every copy after the first among one bucket's digests; return how many were marked."""
    digests, where = [], []
    for index in range(partitions):
        with storage.local_copy(storage.join(work, f"digests-{index:05d}.npz")) as path, np.load(path) as saved:
            start, end = saved["bounds"][bucket : bucket + 2]
            digests.append(saved["digests"][start:end])
            where.append(np.stack([np.full(end - start, index, dtype=np.int64), saved["positions"][start:end]], 1))
    digests_all = np.concatenate(digests) if digests else np.zeros((0, 2), np.uint64)
    where_all = np.concatenate(where) if where else np.zeros((0, 2), np.int64)
    _, first = np.unique(digests_all.view(np.dtype((np.void, 16))).ravel(), return_index=True)
    later = np.ones(len(digests_all), dtype=bool)
    later[first] = False  # np.unique's index is the first occurrence, and the rows are in corpus order
    duplicates = storage.join(work, f"duplicates-{bucket:05d}.npy")
    with storage.output_file(duplicates, durable=False) as tmp, open(tmp, "wb") as handle:
        np.save(handle, where_all[later])
    return int(later.sum())


def write_partition(settings: PrepareConfig, work: Path | str, staging: Path | str,
                    partition: Partition) -> dict[str, WrittenPart]:
    """Task: write one partition's surviving documents to its train and val part files."""
    index = partition.index
    dropped = _duplicates_of(work, index, settings.dedup_buckets)
    names = {split: documents.part_name(split, index) for split in SPLITS}
    counts = {split: [0, 0, 0] for split in SPLITS}  # documents, UTF-8 bytes, characters
    with contextlib.ExitStack() as outputs:
        for split in SPLITS:
            storage.make_dir(documents.split_dir(staging, split))
        temporaries = {split: outputs.enter_context(storage.output_file(storage.join(staging, name)))
                       for split, name in names.items()}
        with contextlib.ExitStack() as writing:
            writers = {split: writing.enter_context(DocumentWriter(tmp)) for split, tmp in temporaries.items()}
            source = writing.enter_context(storage.local_copy(storage.join(work, f"candidates-{index:05d}.arrow")))
            for position, text in enumerate(documents.iter_documents(source)):
                if position in dropped:
                    continue
                split = split_of(text, seed=settings.seed, val_fraction=settings.val_fraction)
                writers[split].write(text)
                counts[split][0] += 1
                counts[split][1] += len(text.encode("utf-8", "surrogatepass"))
                counts[split][2] += len(text)
        sha256 = {split: hashing.sha256_file(tmp) for split, tmp in temporaries.items()}
    return {split: WrittenPart(PreparedPart(index=index, file=name, documents=counts[split][0],
                                            bytes=counts[split][1], sha256=sha256[split]), counts[split][2])
            for split, name in names.items()}


def _save_digests(path: Path | str, digests: list[bytes], buckets: int) -> None:
    """The digests as (n, 2) uint64, stably grouped by bucket, their positions and the bucket bounds."""
    array = np.frombuffer(b"".join(digests), dtype=np.uint64).reshape(-1, 2)
    bucket_of = array[:, 0] % np.uint64(buckets)
    order = np.argsort(bucket_of, kind="stable")
    bounds = np.searchsorted(bucket_of[order], np.arange(buckets + 1, dtype=np.uint64))
    with storage.output_file(path, durable=False) as tmp, open(tmp, "wb") as handle:
        np.savez(handle, digests=array[order], positions=order.astype(np.int64), bounds=bounds)


def _duplicates_of(work: Path | str, index: int, buckets: int) -> set[int]:
    """Positions of partition ``index``'s candidates that an earlier copy makes duplicates."""
    found: set[int] = set()
    for bucket in range(buckets):
        with storage.local_copy(storage.join(work, f"duplicates-{bucket:05d}.npy")) as path:
            marked = np.load(path, mmap_mode="r")
            lo, hi = np.searchsorted(marked[:, 0], [index, index + 1])
            found.update(marked[lo:hi, 1].tolist())
    return found


def _stats(files: Sequence[SourceFile], scans: list[ScanResult], duplicates: int,
           written: list[dict[str, WrittenPart]]) -> PrepareStats:
    stats = PrepareStats(files=len(files))
    as_given = {str(_absolute(file).path): str(file.path) for file in files}  # tasks read absolute paths
    for scan in scans:
        stats.documents_read += scan.documents_read
        stats.characters_read += scan.characters_read
        for reason, count in scan.dropped.items():
            stats.count_drop(reason, count)
        for separator, path in scan.unsplit:
            stats.unsplit.setdefault(separator, []).append(as_given.get(path, path))
    stats.count_drop("duplicate", duplicates)
    for parts in written:
        for split, written_part in parts.items():
            stats.documents[split] += written_part.part.documents
            stats.characters[split] += written_part.characters
    return stats


def _absolute(file: SourceFile) -> SourceFile:
    return SourceFile(storage.absolute(file.path), file.format, file.separator, file.field)
