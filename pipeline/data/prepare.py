"""The prepare step: raw files → cleaned, filtered, de-duplicated train/val part files, what was
rejected and why, and stats per source and step.

The chain of steps (:mod:`pipeline.data.steps`) is cut into segments, each some filters then at most
one de-duplication step; prepare runs one round of partition tasks per segment, and each de-duplication
step's own tasks between two rounds. Each task reads its own files and writes its own, and the driver
sees only counts and checksums:

1. the first round (one task per input partition) reads, cleans and filters the documents and writes
   the live ones to ``candidates-<p>`` and the others, with their step and rule, to ``rejected-<p>``,
   while the first de-duplication step records a key per live document (:mod:`pipeline.data.dedup`), and
   the names and first positions of the partition's pieces, from which later rounds make document IDs;
2. the de-duplication step's tasks mark each duplicate with the document it duplicates;
3. the next round drops the marked documents, applies the next segment's filters, and so on; the last
   round sends each live document to train or val by a seeded hash of its text and writes
   ``train/part-<p>.arrow``, ``val/part-<p>.arrow`` and ``rejected/part-<p>.arrow``.

A rejected part holds every document a step removed from its partition, round by round and in corpus
order within a round, with ``text`` first as in the kept parts and then
``source`` (its index in ``data.sources``), ``document`` (its ID: the file, or the file's byte range or
row groups its partition read, then ``#`` and its number there), ``step``, ``rule`` and
``duplicate_of`` (the ID of the document a duplicate repeats, else empty). Documents that could not be
decoded (``on_decode_error: skip``) have no text: they are counted, not kept.

Part names come from the partition index, so the output is byte-identical for any number of workers.
The tasks write into the scratch location ``<output_dir>.partial``, each finishing with a completion
record, and the parts are then linked into a staging directory swapped in whole: an error (bad UTF-8, a
bad JSON line, no document left for the train split) or an interrupt leaves the previous output untouched,
and the next run redoes only the tasks without a record (:mod:`pipeline.data.resume`). A finished run keeps
the first round's records, so that the next one reads again only the partitions of the raw files that
changed. The work files are
not fsynced: a record holds their checksums, so a file a crash damaged is written again.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import functools
import json
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from pipeline.config import PrepareConfig
from pipeline.data import documents
from pipeline.data.accounting import PrepareStats, SourceTally, Tally, looks_like_a_name
from pipeline.data.cleaning import clean_text, split_dir, split_of
from pipeline.data.documents import SPLITS, DocumentWriter, PreparedPart
from pipeline.data.file_table import per_source, reader_code_files
from pipeline.data.record import DedupStep, Document, Drop, MetadataField, Rewrite
from pipeline.data.resume import PrepareRecords, partition_inputs, refuse_tiny_partitions, round_record
from pipeline.data.sources import Partition, Piece, SourceFile, TextDecoder, plan_partitions, read_partition_pieces
from pipeline.data.steps import DECODE_ERROR, READ_STEP, Chain, Segment, build_chain
from pipeline.engine import atomic, hashing, locations, storage
from pipeline.engine.completion import Scratch
from pipeline.engine.executor import Tasks
from pipeline.errors import DataError

STATS_FILE = "stats.json"
WORK_DIR = "work"
REJECTED = "rejected"
_TEXT = pa.field("text", pa.large_string(), nullable=False)
_SOURCE, _POSITION = pa.field("source", pa.int32()), pa.field("position", pa.int64())
_REASON = [pa.field("step", pa.large_string()), pa.field("rule", pa.large_string()),
           pa.field("duplicate_of", pa.large_string())]
_READ = pa.field("read", pa.large_string(), nullable=False)  # a candidate's text as read, once rewritten
_REWRITTEN = pa.field("rewritten", pa.large_string(), nullable=False)


@dataclass(frozen=True)
class Schemas:
    """The columns of the work files and parts, from the chain: the metadata fields after the fixed columns,
    and, when a step may rewrite, the text as read beside what the rewrites left."""

    fields: tuple[MetadataField, ...]
    rewrites: bool

    @classmethod
    def of(cls, chain: Chain) -> Schemas:
        return cls(chain.fields, chain.rewrites)

    @property
    def _metadata(self) -> list[pa.Field]:
        return [field.arrow for field in self.fields]

    @property
    def candidates(self) -> pa.Schema:
        return pa.schema([_TEXT, _SOURCE, _POSITION, *([_READ] if self.rewrites else []), *self._metadata])

    @property
    def rejection(self) -> pa.Schema:
        return pa.schema([_TEXT, _SOURCE, _POSITION, *_REASON, *([_REWRITTEN] if self.rewrites else []),
                          *self._metadata])

    @property
    def rejected(self) -> pa.Schema:
        return pa.schema([_TEXT, _SOURCE, pa.field("document", pa.large_string()), *_REASON,
                          *([_REWRITTEN] if self.rewrites else []), *self._metadata])

    @property
    def kept(self) -> pa.Schema:
        return pa.schema([*documents.KEPT_SCHEMA, *self._metadata])

    def values(self, document: Document) -> list[Any]:
        """The document's metadata in column order, the field's zero where it has none."""
        if not self.fields:
            return []
        metadata = document.metadata
        return [metadata.get(field.name, field.zero) for field in self.fields]


@dataclass(frozen=True)
class Job:
    """One partition task's input: the partition (its files as the globs gave them) and the identity its completion
    record gives the task of the current round. The names its pieces go by in document IDs are made by the task
    (:func:`_piece_names`): the driver would hold one per raw file."""

    partition: Partition
    identity: str = ""


@dataclass(frozen=True)
class RoundResult:
    tally: Tally
    parts: dict[str, PreparedPart] | None = None  # last round: the train, val and rejected parts
    characters: dict[str, int] | None = None
    unsplit: tuple[tuple[str, str], ...] = ()  # first round: (separator, file) of files a literal never split

    def to_json(self) -> dict:
        """The result as a completion record keeps it."""
        return {"tally": {str(source): dataclasses.asdict(counts) for source, counts in self.tally.sources.items()},
                "characters": self.characters,
                "parts": None if self.parts is None else {split: dataclasses.asdict(part)
                                                          for split, part in self.parts.items()},
                "unsplit": [list(pair) for pair in self.unsplit]}

    def task_summary(self) -> str:
        """For the stage's log: the partition's documents read and, in the last round, kept."""
        sources = self.tally.sources.values()
        read = f"read {sum(t.read for t in sources):,} documents"
        return read if self.parts is None else f"{read}, kept {sum(t.kept for t in sources):,}"

    @classmethod
    def from_json(cls, data: dict) -> RoundResult:
        tally = Tally({int(source): SourceTally(**counts) for source, counts in data["tally"].items()})
        parts = data["parts"] and {split: PreparedPart(**part) for split, part in data["parts"].items()}
        return cls(tally, parts, data["characters"],
                   tuple(tuple(pair) for pair in data["unsplit"]))


class DocumentIds:
    """Document IDs from (partition, position): the partition's piece holding the position, and the
    document's number in it. ``pieces`` gives a partition's piece names and the position of each piece's first
    document, asked once per partition: a later round reads them from the first round's work files
    (:func:`stored_ids`) for its own partition and those its duplicates' originals are in, never the whole
    corpus's (every piece's name, 3.8 MB pickled into each task at 100,000 files)."""

    def __init__(self, pieces: Callable[[int], tuple[Sequence[str], Sequence[int]]]):
        self._pieces = functools.cache(pieces)

    def of(self, partition: int, position: int) -> str:
        names, starts = self._pieces(partition)
        piece = bisect.bisect_right(starts, position) - 1
        return f"{names[piece]}#{position - starts[piece]}"


NAMES_FILE = "r0-names-{:05d}.json"  # a partition's piece names and first positions, from its first round
MAX_NAMES_BYTES = 1 << 30  # a partition of 64 MB of files of 100 bytes: some 50 MB of names


def stored_ids(work: Path | str) -> DocumentIds:
    """Document IDs from the first round's names files under ``work``."""
    return DocumentIds(functools.partial(_stored_pieces, work))


def _stored_pieces(work: Path | str, partition: int) -> tuple[list[str], list[int]]:
    names = json.loads(storage.read_bounded(locations.join(work, NAMES_FILE.format(partition)), MAX_NAMES_BYTES,
                                            what="piece names"))
    return names["names"], names["starts"]


def prepare_corpus(files: Sequence[SourceFile], settings: PrepareConfig, out_dir: str | os.PathLike[str], *,
                   tasks: Tasks, progress: bool = False, source_names: Sequence[str] = (),
                   names_root: str | os.PathLike[str] | None = None, code_version: int = 0,
                   notify: Callable[[str], None] = lambda message: None, chain: Chain | None = None) -> PrepareStats:
    """Write ``out_dir``'s part files, ``parts.json`` and ``stats.json`` from ``files``; return the stats.

    ``source_names`` name the entries of ``data.sources`` in the stats (``source <i>`` by default);
    document IDs give local paths relative to ``names_root`` when set. ``chain`` is the chain of steps
    (:func:`~pipeline.data.steps.build_chain`; by default that of ``settings`` alone, without per-source
    scopes or metadata). The tasks an interrupted call with the same files, settings and ``code_version``
    finished are taken, not run again, and ``notify`` says so.
    """
    partitions = plan_partitions(files, settings.partition_bytes)
    refuse_tiny_partitions(len(partitions), settings.partition_bytes)  # before each is named and recorded
    jobs = [Job(partition) for partition in partitions]
    labels, sizes = [f"{p.index} ({p.describe()})" for p in partitions], [p.size for p in partitions]
    working_dir, names_from = os.getcwd(), None if names_root is None else os.path.abspath(names_root)
    chain = chain or build_chain(settings)
    chain.load()
    records = PrepareRecords(out_dir, settings, code_version,
                             (partition_inputs(_absolute(p, working_dir), _piece_names(p, names_from, working_dir))
                              for p in partitions),
                             notify, rounds=len(chain.segments), files=_steps_and_readers_files(chain, files))
    work = records.scratch.path(WORK_DIR)
    for directory in (work, *(split_dir(records.scratch.location, split) for split in (*SPLITS, REJECTED))):
        storage.make_dir(directory)
    with storage.output_dir(out_dir) as staging:
        results: list[list[RoundResult]] = []
        for index, segment in enumerate(chain.segments):
            step = Round(settings, chain.segments, Schemas.of(chain), index, work, records.scratch, working_dir,
                         names_from)
            desc = "prepare: write" if index == len(chain.segments) - 1 else f"prepare: round {index + 1}"
            identities = records.identities(index)
            results.append(_run_round(step, jobs, identities, records.finished_round(index, identities), tasks=tasks,
                                      labels=labels, sizes=sizes, desc=desc, progress=progress))
            if segment.dedup is not None:
                _resolve(segment.dedup.step, records, records.step_identity(index, identities), tasks=tasks, work=work,
                         round_=index, partitions=len(jobs), progress=progress)
        written = results[-1]
        parts = {split: [result.parts[split] for result in written] for split in (*SPLITS, REJECTED)}
        storage.copy_files([(records.scratch.path(*part.file.split("/")), locations.join(staging, part.file))
                            for split_parts in parts.values() for part in split_parts])
        documents.write_parts(staging, {split: parts[split] for split in SPLITS})
        stats = _stats(files, source_names, results, written)
        _refuse_empty_train_split(stats, files, settings.val_fraction)
        storage.write_bytes(locations.join(staging, STATS_FILE), (atomic.dumps_json(stats.to_dict()) + "\n").encode())
    records.keep_first_round()
    return stats


def _run_round(step: Round, jobs: Sequence[Job], identities: Sequence[str], done: dict[int, dict], *, tasks: Tasks,
               labels: Sequence[str], sizes: Sequence[int], desc: str, progress: bool) -> list[RoundResult]:
    """Every partition's result of one round: from its record where an earlier run finished it, else run."""
    todo = [index for index in range(len(jobs)) if index not in done]
    ran = tasks.map(step, [dataclasses.replace(jobs[i], identity=identities[i]) for i in todo],
                    labels=[labels[i] for i in todo], sizes=[sizes[i] for i in todo], progress=progress, desc=desc)
    results = {**{index: RoundResult.from_json(result) for index, result in done.items()}, **dict(zip(todo, ran))}
    return [results[index] for index in range(len(jobs))]


def _resolve(dedup: DedupStep, records: PrepareRecords, identity: str, *, tasks: Tasks, work: Path | str, round_: int,
             partitions: int, progress: bool) -> None:
    """Run a de-duplication step, unless an earlier run finished this very one; record it."""
    if not records.step_finished(round_, dedup.name, identity):
        dedup.resolve(tasks, work, round_, partitions, progress=progress)
        records.save_step(round_, dedup.name, identity, dedup.mark_files(work, round_))


def _steps_and_readers_files(chain: Chain, files: Sequence[SourceFile]) -> list[str]:
    """The files of the user's code and the steps' own inputs (blocklists, evaluation sets): a record made while
    any of them was other than now is never taken."""
    return [*chain.code_files, *reader_code_files(files)]


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
    """Task: one round of the chain over one partition (see the module's docstring).

    Only the live documents flow from round to round (``candidates``: text, source, position, the text as read
    when a step may rewrite, metadata); each round writes the documents it rejects to its own ``rejected`` work
    file, and the last round gathers those of every round, in round order, into the partition's rejected part.
    Last, it writes its completion record, naming every file it wrote with its checksum.
    """

    settings: PrepareConfig
    chain: tuple[Segment, ...]
    schemas: Schemas
    index: int
    work: Path | str
    scratch: Scratch  # the last round's parts go there too
    directory: str  # the driver's working directory, which the raw files' relative paths start from
    names_root: str | None  # the absolute directory document IDs name local raw files from, if any

    def __call__(self, job: Job) -> RoundResult:
        result, written = self._run(job)
        files = {self.scratch.relative(path): hashing.sha256_location(path) for path in written}
        files.update({part.file: part.sha256 for part in (result.parts or {}).values()})
        self.scratch.save(round_record(self.index, job.partition.index), job.identity, files, result.to_json())
        return result

    def _run(self, job: Job) -> tuple[RoundResult, list[Path | str]]:
        """The round's result and the work files it wrote."""
        index, tally, starts = job.partition.index, Tally(), []
        decoder = TextDecoder(self.settings.on_decode_error, max_chars=self.settings.max_chars,
                              normalize=self.settings.normalize)
        written = [self._work_file("rejected", self.index, index)]
        with contextlib.ExitStack() as stack:
            rejected = stack.enter_context(self._rejected_writer(index))
            if self.index == 0:
                names = _piece_names(job.partition, self.names_root, self.directory)
                docs = _read_documents(_absolute(job.partition, self.directory), names, decoder,
                                       self.settings.normalize, tally, starts)
                ids = DocumentIds(lambda _: (names, starts))
            else:
                ids = stored_ids(self.work)
                docs = self._unmarked(index, tally, rejected, ids)
            docs = _filtered(docs, self.chain[self.index], tally, rejected)
            if self.chain[self.index].dedup is not None:
                written += self._write_candidates(index, docs)
                if self.index == 0:
                    written.append(self._write_names(index, names, starts))
                return RoundResult(tally, unsplit=tuple(decoder.unsplit)), written
            parts, characters = self._write_splits(index, docs, tally)
        parts[REJECTED], characters[REJECTED] = self._write_rejected(index, ids)
        return RoundResult(tally, parts=parts, characters=characters, unsplit=tuple(decoder.unsplit)), written

    def _work_file(self, kind: str, round_: int, index: int) -> Path | str:
        return locations.join(self.work, f"r{round_}-{kind}-{index:05d}.arrow")

    @contextlib.contextmanager
    def _rejected_writer(self, index: int) -> Iterator[Rejections]:
        with storage.output_file(self._work_file("rejected", self.index, index), durable=False) as tmp, \
                DocumentWriter(tmp, schema=self.schemas.rejection) as writer:
            yield Rejections(writer, self.schemas)

    def _write_names(self, index: int, names: Sequence[str], starts: Sequence[int]) -> Path | str:
        """The partition's piece names and the position of each piece's first document, for the later rounds'
        document IDs (:func:`stored_ids`)."""
        path = locations.join(self.work, NAMES_FILE.format(index))
        pieces = {"names": list(names), "starts": list(starts)}
        storage.write_bytes(path, atomic.dumps_json(pieces, indent=None).encode())
        return path

    def _unmarked(self, index: int, tally: Tally, rejected: Rejections, ids: DocumentIds) -> Iterator[Document]:
        """The previous round's candidates that its de-duplication step did not mark."""
        dedup = self.chain[self.index - 1].dedup
        assert dedup is not None
        marks = dedup.step.marks(self.work, self.index - 1, index)
        with storage.local_copy(self._work_file("candidates", self.index - 1, index)) as path:
            for document in _candidates(path, self.schemas, index, ids):
                if document.position in marks:
                    tally.drop(document.source, dedup.step.name, dedup.step.rule)
                    rejected.write(document, dedup.step.name, dedup.step.rule, ids.of(*marks[document.position]))
                else:
                    yield document

    def _write_candidates(self, index: int, docs: Iterator[Document]) -> list[Path | str]:
        """Write the live documents and the de-duplication step's keys; return the files written."""
        dedup = self.chain[self.index].dedup
        assert dedup is not None
        keys = dedup.step.keys(self.work, self.index, index)
        candidates = self._work_file("candidates", self.index, index)
        rewrites = self.schemas.rewrites
        with storage.output_file(candidates, durable=False) as tmp, \
                DocumentWriter(tmp, schema=self.schemas.candidates) as writer:
            for document in docs:
                read = (document.read or "",) if rewrites else ()  # "": not rewritten (cheaper than its copy)
                writer.write(document.text, document.source, document.position, *read, *self.schemas.values(document))
                if dedup.applies(document):
                    keys.add(document.position, document.text)
        keys.close()
        return [candidates, *keys.paths]

    def _write_splits(self, index: int, docs: Iterator[Document],
                      tally: Tally) -> tuple[dict[str, PreparedPart], dict[str, int]]:
        """The live documents to their split, with their source, ID and metadata; each part's entry and characters."""
        settings = self.settings
        kept: dict[int, list[int]] = {}  # source: documents, characters
        with _Parts(self.scratch.location, index, SPLITS, self.schemas.kept) as parts:
            for document in docs:
                text = document.text
                split = split_of(text, seed=settings.seed, val_fraction=settings.val_fraction)
                parts.write(split, text, document.source, document.id, *self.schemas.values(document))
                counts = kept.setdefault(document.source, [0, 0])
                counts[0] += 1
                counts[1] += len(text)
        for source, (count, characters) in kept.items():
            tally.keep(source, count, characters)
        return parts.entries, parts.characters

    def _write_rejected(self, index: int, ids: DocumentIds) -> tuple[PreparedPart, int]:
        """Every round's rejections of the partition, with document IDs, as its rejected part."""
        with _Parts(self.scratch.location, index, (REJECTED,), self.schemas.rejected) as parts:
            for round_ in range(self.index + 1):
                with storage.local_copy(self._work_file("rejected", round_, index)) as path:
                    for text, source, position, *rest in documents.iter_records(path):
                        parts.write(REJECTED, text, source, ids.of(index, position), *rest)
        return parts.entries[REJECTED], parts.characters[REJECTED]


class Rejections:
    """A round's rejected work file: each document as read, why it went, what the rewrites left, its metadata."""

    def __init__(self, writer: DocumentWriter, schemas: Schemas):
        self._writer, self._schemas = writer, schemas

    def write(self, document: Document, step: str, rule: str, duplicate_of: str = "", *,
              rewritten: str | None = None) -> None:
        """``rewritten``: what the step that dropped the document left of it, when it rewrote it first."""
        read = document.read if document.read is not None else document.text
        left = _left(document, rewritten) if self._schemas.rewrites else ()
        self._writer.write(read, document.source, document.position, step, rule, duplicate_of, *left,
                           *self._schemas.values(document))


def _left(document: Document, rewritten: str | None) -> tuple[str]:
    """The ``rewritten`` column: what the rewrites left of the document, ``""`` when none changed it."""
    left = document.text if rewritten is None else rewritten
    read = document.read if document.read is not None else document.text
    return (left if left != read else "",)


def _candidates(path: Path | str, schemas: Schemas, index: int, ids: DocumentIds) -> Iterator[Document]:
    """The documents of a candidates work file."""
    names = [field.name for field in schemas.fields]
    for text, source, position, *rest in documents.iter_records(path):
        read = (rest.pop(0) or None) if schemas.rewrites else None
        yield Document(text, source, ids.of(index, position), dict(zip(names, rest)), position, read)


class _Parts:
    """One partition's part files of some splits, written atomically: their entries and characters on exit."""

    def __init__(self, directory: Path | str, index: int, splits: Sequence[str], schema: pa.Schema):
        self._directory, self._index, self._schema = directory, index, schema
        self._names = {split: documents.part_name(split, index) for split in splits}
        self._counts = {split: [0, 0, 0] for split in splits}  # documents, UTF-8 bytes, characters
        self._stack = contextlib.ExitStack()
        self.entries: dict[str, PreparedPart] = {}
        self.characters: dict[str, int] = {}

    def __enter__(self) -> _Parts:
        self._temporaries = {
            split: self._stack.enter_context(storage.output_file(locations.join(self._directory, name)))
            for split, name in self._names.items()}
        self._writing = contextlib.ExitStack()
        self._writers = {split: self._writing.enter_context(DocumentWriter(tmp, schema=self._schema))
                         for split, tmp in self._temporaries.items()}
        return self

    def write(self, split: str, text: str, *fields: str | int | float) -> None:
        self._writers[split].write(text, *fields)
        counts = self._counts[split]
        counts[0] += 1
        counts[1] += len(text.encode("utf-8", "surrogatepass"))
        counts[2] += len(text)

    def __exit__(self, *exc_info: object) -> None:
        with self._stack:
            self._writing.__exit__(*exc_info)
            if exc_info[0] is None:
                for split, name in self._names.items():
                    documents_, size, characters = self._counts[split]
                    self.entries[split] = PreparedPart(index=self._index, file=name, documents=documents_, bytes=size,
                                                       sha256=hashing.sha256_file(self._temporaries[split]))
                    self.characters[split] = characters
            self._stack.__exit__(*exc_info)


def _read_documents(partition: Partition, names: Sequence[str], decoder: TextDecoder, normalize: str, tally: Tally,
                    starts: list[int]) -> Iterator[Document]:
    """The partition's documents, cleaned and numbered (their pieces go by ``names``); ``starts`` gets each piece's
    first position."""
    position = 0
    for (piece, records), name in zip(read_partition_pieces(partition, decoder), names):
        starts.append(position)
        source, skipped, first, characters, name_like = piece.file.source, decoder.skipped, position, 0, 0
        passed = dict(decoder.passed)
        for raw, metadata in records:
            text = clean_text(raw, normalize=normalize)
            characters += len(raw)
            name_like += looks_like_a_name(text)
            yield Document(text, source, f"{name}#{position - first}", metadata or {}, position)
            position += 1
        passed = {rule: count - passed.get(rule, 0) for rule, count in decoder.passed.items()}
        tally.read(source, position - first + decoder.skipped - skipped + sum(passed.values()), characters, name_like)
        tally.drop(source, READ_STEP, DECODE_ERROR, decoder.skipped - skipped)
        for rule, count in passed.items():
            tally.drop(source, READ_STEP, rule, count)


def _filtered(docs: Iterator[Document], segment: Segment, tally: Tally, rejected: Rejections) -> Iterator[Document]:
    """The documents the segment's filters keep, as they rewrite them; the others go to ``rejected`` with the
    rule that dropped them."""
    if not segment.filters:
        yield from docs
        return
    for document in docs:
        for scoped in segment.filters:
            if scoped.sources is not None and document.source not in scoped.sources:
                continue
            step = scoped.step
            answer = step.apply(document)
            if isinstance(answer, (Rewrite, Drop)):
                if answer.removed:
                    tally.remove_lines(document.source, step.name, answer.removed)
                if isinstance(answer, Drop):
                    tally.drop(document.source, step.name, answer.rule)
                    rejected.write(document, step.name, answer.rule, rewritten=answer.text)
                    break
                if document.read is None and answer.text != document.text:
                    document.read = document.text
                document.text = answer.text
        else:
            yield document


def _stats(files: Sequence[SourceFile], source_names: Sequence[str], results: list[list[RoundResult]],
           written: list[RoundResult]) -> PrepareStats:
    tally = Tally()
    for round_results in results:
        for result in round_results:
            tally.add(result.tally)
    count = max([len(source_names), *(file.source + 1 for file in per_source(files))])
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
    unsplit = {path for result in results[0] for _, path in result.unsplit}  # tasks read absolute paths
    as_given = {found: str(file.path) for file in (files if unsplit else ())
                if (found := str(locations.absolute(file.path))) in unsplit}
    for result in results[0]:
        for separator, path in result.unsplit:
            stats.unsplit.setdefault(separator, []).append(as_given.get(path, path))
    return stats


def _absolute(partition: Partition, directory: str) -> Partition:
    """The partition with its local paths made absolute from the driver's working ``directory``, so that a task
    reads the same files from any directory. The task does it, not the driver: the plan holds each raw file as the
    glob gave it, not a second time."""
    return dataclasses.replace(partition, runs=tuple(
        dataclasses.replace(piece, file=dataclasses.replace(piece.file, path=_absolute_path(piece.file.path,
                                                                                            directory)))
        for piece in partition.pieces))


def _absolute_path(path: Path | str, directory: str) -> str:
    """``os.path.abspath`` of a local path, from ``directory`` rather than this process's working directory."""
    return os.fspath(path) if locations.is_url(path) else os.path.normpath(os.path.join(directory,
                                                                                        locations.local(path)))


def _piece_names(partition: Partition, root: str | None, directory: str) -> tuple[str, ...]:
    """The names document IDs give the partition's pieces, its local paths taken from the driver's working
    ``directory`` and named from the absolute ``root``: the same in the driver and in any task."""
    return tuple(_piece_name(piece, root, directory) for piece in partition.pieces)


def _piece_name(piece: Piece, root: str | None, directory: str) -> str:
    """A piece as document IDs name it: as :meth:`Piece.describe` does, a local path relative to ``root``; a byte
    of a file name that is not UTF-8 as a ``\\udcXX`` escape (the IDs are UTF-8 text, in Arrow)."""
    path = str(piece.file.path)
    if root is None or locations.is_url(path):
        name = piece.describe()
    else:
        name = os.path.relpath(_absolute_path(path, directory), root) + piece.describe()[len(path):]
    return name.encode("utf-8", "backslashreplace").decode("utf-8")
