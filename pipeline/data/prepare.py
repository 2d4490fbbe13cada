"""The prepare step: raw files → cleaned, filtered, de-duplicated train/val part files, what was
rejected and why, and stats per source and step.

The chain of steps (:mod:`pipeline.data.steps`) is cut into segments, each some filters then at most
one de-duplication step; prepare runs one round of partition tasks per segment, and each de-duplication
step's own tasks between two rounds. Each task reads its own files and writes its own, and the driver
sees only counts and checksums:

1. the first round (one task per input partition) reads, cleans and filters the documents and writes
   every one of them to ``candidates-<p>``, a rejected one with its step and rule, while the first
   de-duplication step records a key per live document (:mod:`pipeline.data.dedup`);
2. the de-duplication step's tasks mark each duplicate with the document it duplicates;
3. the next round drops the marked documents, applies the next segment's filters, and so on; the last
   round sends each live document to train or val by a seeded hash of its text and writes
   ``train/part-<p>.arrow``, ``val/part-<p>.arrow`` and ``rejected/part-<p>.arrow``.

A rejected part holds every document a step removed, with ``text`` first as in the kept parts and then
``source`` (its index in ``data.sources``), ``document`` (its ID: the file, or the file's byte range or
row groups its partition read, then ``#`` and its number there), ``step``, ``rule`` and
``duplicate_of`` (the ID of the document a duplicate repeats, else empty). Documents that could not be
decoded (``on_decode_error: skip``) have no text: they are counted, not kept.

Part names come from the partition index, so the output is byte-identical for any number of workers.
Everything is built in a staging directory swapped in whole: an error (bad UTF-8, a bad JSON line, no
document left for the train split) or an interrupt leaves the previous output untouched. The
intermediate files of ``.work`` are not fsynced: a crash discards the staging directory.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from pipeline.config.schema import PrepareConfig
from pipeline.data import documents
from pipeline.data.accounting import PrepareStats, Tally
from pipeline.data.cleaning import clean_text, split_of
from pipeline.data.dedup import Marks
from pipeline.data.documents import SPLITS, DocumentWriter, PreparedPart
from pipeline.data.sources import Partition, Piece, SourceFile, TextDecoder, plan_partitions, read_partition_pieces
from pipeline.data.steps import DECODE_ERROR, READ_STEP, Segment, build_chain
from pipeline.engine import atomic, hashing, storage
from pipeline.engine.executor import Tasks
from pipeline.errors import DataError

STATS_FILE = "stats.json"
WORK_DIR = ".work"
REJECTED = "rejected"
_TEXT = pa.field("text", pa.large_string(), nullable=False)
CANDIDATE_SCHEMA = pa.schema([_TEXT, pa.field("source", pa.int32()), pa.field("document", pa.large_string()),
                              pa.field("position", pa.int64()), pa.field("step", pa.large_string()),
                              pa.field("rule", pa.large_string()), pa.field("duplicate_of", pa.large_string())])
REJECTED_SCHEMA = pa.schema([_TEXT, pa.field("source", pa.int32()), pa.field("document", pa.large_string()),
                             pa.field("step", pa.large_string()), pa.field("rule", pa.large_string()),
                             pa.field("duplicate_of", pa.large_string())])
Row = tuple[str, int, str, int, str, str, str]
"""A candidate as the rounds pass it on: text, source, document ID, position, step, rule, duplicate_of
(step and rule empty while the document is kept)."""


@dataclass(frozen=True)
class Job:
    """One partition task's input: the partition and the names its pieces go by in document IDs."""

    partition: Partition
    piece_names: tuple[str, ...]


@dataclass(frozen=True)
class RoundResult:
    tally: Tally
    piece_starts: tuple[int, ...] = ()  # first round: the position of each piece's first document
    parts: dict[str, PreparedPart] | None = None  # last round: the train, val and rejected parts
    characters: dict[str, int] | None = None


@dataclass(frozen=True)
class DocumentIds:
    """Document IDs from (partition, position): the partition's piece holding the position, and the
    document's number in it."""

    piece_names: tuple[tuple[str, ...], ...]
    piece_starts: tuple[tuple[int, ...], ...]

    def of(self, partition: int, position: int) -> str:
        starts = self.piece_starts[partition]
        piece = bisect.bisect_right(starts, position) - 1
        return f"{self.piece_names[partition][piece]}#{position - starts[piece]}"


def prepare_corpus(files: Sequence[SourceFile], settings: PrepareConfig, out_dir: str | os.PathLike[str], *,
                   tasks: Tasks, progress: bool = False, source_names: Sequence[str] = (),
                   names_root: str | os.PathLike[str] | None = None) -> PrepareStats:
    """Write ``out_dir``'s part files, ``parts.json`` and ``stats.json`` from ``files``; return the stats.

    ``source_names`` name the entries of ``data.sources`` in the stats (``source <i>`` by default);
    document IDs give local paths relative to ``names_root`` when set.
    """
    partitions = plan_partitions(files, settings.partition_bytes)
    jobs = [Job(_absolute(partition), tuple(_piece_name(piece, names_root) for piece in partition.pieces))
            for partition in partitions]
    labels, sizes = [f"{p.index} ({p.describe()})" for p in partitions], [p.size for p in partitions]
    chain = build_chain(settings)
    with storage.output_dir(out_dir) as staging:
        work = storage.join(staging, WORK_DIR)
        storage.make_dir(work)
        for split in (*SPLITS, REJECTED):
            storage.make_dir(documents.split_dir(staging, split))
        results: list[list[RoundResult]] = []
        ids = None
        for index, segment in enumerate(chain):
            last = index == len(chain) - 1
            step = Round(settings, chain, index, work, staging, ids)
            results.append(tasks.map(step, jobs, labels=labels, sizes=sizes, progress=progress,
                                     desc="prepare: write" if last else f"prepare: round {index + 1}"))
            if segment.dedup is not None:
                segment.dedup.resolve(tasks, work, index, len(jobs), progress=progress)
            if index == 0:
                ids = DocumentIds(tuple(job.piece_names for job in jobs), tuple(r.piece_starts for r in results[0]))
        storage.remove(work)
        if not storage.is_url(staging):  # uploads leave no temporaries
            for split in (*SPLITS, REJECTED):
                atomic.remove_temporaries_in(documents.split_dir(staging, split))
        written = results[-1]
        documents.write_parts(staging, {split: [r.parts[split] for r in written] for split in SPLITS})
        stats = _stats(files, source_names, results, written)
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


@dataclass(frozen=True)
class Round:
    """Task: one round of the chain over one partition (see the module's docstring)."""

    settings: PrepareConfig
    chain: tuple[Segment, ...]
    index: int
    work: Path | str
    staging: Path | str
    ids: DocumentIds | None  # from the first round on

    def __call__(self, job: Job) -> RoundResult:
        tally = Tally()
        starts: list[int] = []
        if self.index == 0:
            rows = _read_rows(job, TextDecoder(self.settings.on_decode_error), self.settings.normalize, tally, starts)
        else:
            rows = self._marked(job.partition.index, tally)
        rows = _filtered(rows, self.chain[self.index], tally)
        if self.chain[self.index].dedup is None:
            return self._write_final(job.partition.index, rows, tally)
        self._write_candidates(job.partition.index, rows)
        return RoundResult(tally, tuple(starts))

    def _candidates(self, round_: int, index: int) -> Path | str:
        return storage.join(self.work, f"r{round_}-candidates-{index:05d}.arrow")

    def _marked(self, index: int, tally: Tally) -> Iterator[Row]:
        """The previous round's candidates, the documents its de-duplication step marked now rejected."""
        dedup = self.chain[self.index - 1].dedup
        assert dedup is not None and self.ids is not None
        marks: Marks = dedup.marks(self.work, self.index - 1, index)
        with storage.local_copy(self._candidates(self.index - 1, index)) as path:
            for row in documents.iter_records(path):
                text, source, document, position, step, _, _ = row
                if not step and position in marks:
                    tally.drop(source, dedup.name, dedup.rule)
                    yield text, source, document, position, dedup.name, dedup.rule, self.ids.of(*marks[position])
                else:
                    yield row

    def _write_candidates(self, index: int, rows: Iterator[Row]) -> None:
        dedup = self.chain[self.index].dedup
        assert dedup is not None
        keys = dedup.keys(self.work, self.index, index)
        with storage.output_file(self._candidates(self.index, index), durable=False) as tmp, \
                DocumentWriter(tmp, schema=CANDIDATE_SCHEMA) as writer:
            for row in rows:
                writer.write(*row)
                if not row[4]:
                    keys.add(row[3], row[0])
        keys.close()

    def _write_final(self, index: int, rows: Iterator[Row], tally: Tally) -> RoundResult:
        """Live documents to their split, rejected ones to the rejected part; the parts' counts and checksums."""
        names = {split: documents.part_name(split, index) for split in (*SPLITS, REJECTED)}
        counts = {split: [0, 0, 0] for split in names}  # documents, UTF-8 bytes, characters
        with contextlib.ExitStack() as outputs:
            temporaries = {split: outputs.enter_context(storage.output_file(storage.join(self.staging, name)))
                           for split, name in names.items()}
            with contextlib.ExitStack() as writing:
                writers = {split: writing.enter_context(DocumentWriter(tmp, schema=REJECTED_SCHEMA if split == REJECTED
                                                                       else documents.SCHEMA))
                           for split, tmp in temporaries.items()}
                for text, source, document, _, step, rule, duplicate_of in rows:
                    if step:
                        split = REJECTED
                        writers[split].write(text, source, document, step, rule, duplicate_of)
                    else:
                        split = split_of(text, seed=self.settings.seed, val_fraction=self.settings.val_fraction)
                        writers[split].write(text)
                        tally.keep(source, text)
                    counts[split][0] += 1
                    counts[split][1] += len(text.encode("utf-8", "surrogatepass"))
                    counts[split][2] += len(text)
            sha256 = {split: hashing.sha256_file(tmp) for split, tmp in temporaries.items()}
        parts = {split: PreparedPart(index=index, file=name, documents=counts[split][0], bytes=counts[split][1],
                                     sha256=sha256[split]) for split, name in names.items()}
        return RoundResult(tally, parts=parts, characters={split: counts[split][2] for split in names})


def _read_rows(job: Job, decoder: TextDecoder, normalize: str, tally: Tally, starts: list[int]) -> Iterator[Row]:
    """The partition's documents, cleaned and numbered; ``starts`` gets each piece's first position."""
    position = 0
    for (piece, texts), name in zip(read_partition_pieces(job.partition, decoder), job.piece_names):
        starts.append(position)
        source, skipped = piece.file.source, decoder.skipped
        for number, raw in enumerate(texts):
            text = clean_text(raw, normalize=normalize)
            tally.read(source, raw, text)
            yield text, source, f"{name}#{number}", position, "", "", ""
            position += 1
        tally.of(source).read += decoder.skipped - skipped
        tally.drop(source, READ_STEP, DECODE_ERROR, decoder.skipped - skipped)


def _filtered(rows: Iterator[Row], segment: Segment, tally: Tally) -> Iterator[Row]:
    """``rows`` with the segment's filters applied in order to the documents still kept."""
    for row in rows:
        text, source, document, position, step = row[:5]
        if not step:
            for check in segment.filters:
                rule = check.reject(text)
                if rule is not None:
                    tally.drop(source, check.name, rule)
                    row = (text, source, document, position, check.name, rule, "")
                    break
        yield row


def _stats(files: Sequence[SourceFile], source_names: Sequence[str], results: list[list[RoundResult]],
           written: list[RoundResult]) -> PrepareStats:
    tally = Tally()
    for round_results in results:
        for result in round_results:
            tally.add(result.tally)
    count = max([len(source_names), *(file.source + 1 for file in files)])
    names = [source_names[i] if i < len(source_names) else f"source {i}" for i in range(count)]
    stats = PrepareStats(files=len(files))
    stats.account(names, tally)
    stats.documents_read = sum(source.read for _, source in stats.sources)
    stats.characters_read = sum(source.characters_read for _, source in stats.sources)
    for result in written:
        assert result.parts is not None and result.characters is not None
        for split in SPLITS:
            stats.documents[split] += result.parts[split].documents
            stats.characters[split] += result.characters[split]
    stats.rejected = [dataclasses.asdict(result.parts[REJECTED]) for result in written if result.parts]
    return stats


def _absolute(partition: Partition) -> Partition:
    """The partition with absolute paths, so that a task reads the same files from any directory."""
    return dataclasses.replace(partition, pieces=tuple(
        dataclasses.replace(piece, file=dataclasses.replace(piece.file, path=storage.absolute(piece.file.path)))
        for piece in partition.pieces))


def _piece_name(piece: Piece, root: str | os.PathLike[str] | None) -> str:
    """A piece as document IDs name it: as :meth:`Piece.describe` does, a local path relative to ``root``."""
    path = str(piece.file.path)
    if root is None or storage.is_url(path):
        return piece.describe()
    return os.path.relpath(os.path.abspath(path), os.path.abspath(root)) + piece.describe()[len(path):]
