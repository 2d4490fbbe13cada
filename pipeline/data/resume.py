"""What a prepare that was killed or failed had finished, or what a finished one kept, so that the next one
redoes only the rest.

Prepare keeps its work in ``<prepare.output_dir>.partial`` (beside the output, in the same store for a
remote one): the rounds' work files under ``work/``, the last round's part files under ``train/``,
``val/`` and ``rejected/``, and a completion record (:mod:`pipeline.engine.completion`) per finished task:
``r<round>-<partition>.done.json`` for a partition's round, ``r<round>-<step>.done.json`` for a
de-duplication step. The driver links the parts into the staging output at the end and, once the new
output is in place, removes the scratch but for the first round's records and the files they name
(:meth:`PrepareRecords.keep_first_round`): the next run, after an edit of one raw file, reads only that
file's partitions again.

Which tasks can be taken from a record is decided by its identity, a chain that follows the data:

- a partition's first round reads only its own files: its identity is the prepare settings, the code
  version and the partition's pieces, each with its file's stamp (size, mtime, ctime and inode, or the
  store's size and ETag), so an edited raw file redoes its partitions and no other;
- a de-duplication step reads the keys of every partition: its identity is that of the whole round
  before it (every partition's), and it is taken or redone as a whole;
- a later round reads its partition's candidates *and the step's marks*, which depend on every
  partition: its identity is that of the step before it. Once any partition of an earlier round is
  other than before (an edited file, another setting), the step and every later round are redone
  for every partition; a run killed during a later round redoes only that round's unfinished
  partitions.

Every task is deterministic, so what a record names is exactly what the task would write again, and the
output is byte-identical to that of a run never interrupted.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from pipeline.config import PrepareConfig
from pipeline.data.sources import Partition
from pipeline.engine import completion, hashing
from pipeline.engine.completion import Scratch
from pipeline.errors import ConfigError


def round_record(round_: int, index: int) -> str:
    return f"r{round_}-{index:05d}"


def partition_inputs(partition: Partition, piece_names: Sequence[str]) -> list[Any]:
    """What a partition's first round reads: its pieces, how they are read, and their files' stamps."""
    return [[os.fspath(piece.file.path), piece.start, piece.end, piece.file.format, piece.file.separator,
             piece.file.field, piece.file.source, hashing.content_stamp(piece.file.path), name]
            for piece, name in zip(partition.pieces, piece_names)]


# What the records of this code's tasks hold, beside the code version (which follows the outputs): a record kept
# by other code is not taken. 2: a first round writes its pieces' names for the later rounds' document IDs.
RECORDS_VERSION = 2
MAX_SMALL_PARTITIONS = 1000
SMALL_PARTITION_BYTES = 1 << 16


def refuse_tiny_partitions(partitions: int, partition_bytes: int) -> None:
    """Refuse a ``prepare.partition_bytes`` so small that the tasks would take longer than the data: each
    partition is a task with its own files and record, a fraction of a second each whatever its size
    (``partition_bytes=1`` on 137 KB was 19 minutes). No real corpus needs more than ``MAX_SMALL_PARTITIONS``
    partitions below ``SMALL_PARTITION_BYTES``: one that small keeps every core busy with larger ones."""
    if partitions > MAX_SMALL_PARTITIONS and partition_bytes < SMALL_PARTITION_BYTES:
        raise ConfigError(f"prepare.partition_bytes={partition_bytes:,} cuts the raw data into {partitions:,} "
                          f"partitions, each a task with files of its own: more than {MAX_SMALL_PARTITIONS:,} "
                          f"partitions below {SMALL_PARTITION_BYTES:,} bytes would take longer to run as tasks "
                          "than the data takes to read; raise it (the default is 64,000,000)")


class PrepareRecords:
    """The identities of one prepare's tasks, round after round, and which of them a record says are done."""

    def __init__(self, output_dir: str | os.PathLike[str], settings: PrepareConfig, code_version: int,
                 inputs: Iterable[list[Any]], notify: Callable[[str], None], rounds: int,
                 files: Sequence[str] = ()):
        """``inputs``: each partition's (:func:`partition_inputs`), hashed into its first round's identity as they
        come, so that what names every piece and stamp of the corpus is never held whole."""
        self.scratch = Scratch.of(output_dir)
        self.scratch.check_place()
        self._base = completion.job_identity("prepare", RECORDS_VERSION, code_version, dataclasses.asdict(settings),
                                             [hashing.sha256_file(path) for path in files])
        self._first = [completion.job_identity(self._base, 0, index, partition)
                       for index, partition in enumerate(inputs)]
        self._notify, self._rounds = notify, rounds
        self._before: str | None = None  # the identity of the step the current round reads the marks of

    def identities(self, round_: int) -> list[str]:
        """The identity of each partition's task of ``round_`` (rounds are asked for in order)."""
        if round_ == 0:
            return list(self._first)
        return [completion.job_identity(self._base, round_, index, self._before) for index in range(len(self._first))]

    def finished_round(self, round_: int, identities: Sequence[str]) -> dict[int, Any]:
        """Partition → the result its record kept, for the tasks of ``round_`` an earlier run finished."""
        found = self.scratch.finished_many([(round_record(round_, index), identity)
                                            for index, identity in enumerate(identities)])
        done = {index: record[0] for index, record in enumerate(found) if record is not None}
        if done:
            where = f" of round {round_ + 1} of {self._rounds}" if self._rounds > 1 else ""
            self._notify(f"reusing {len(done)} of {len(identities)} partitions{where} that an earlier run "
                         f"finished ({self.scratch.shown})")
        return done

    def keep_first_round(self) -> None:
        """Once the output is in place, remove the scratch but for the first round's records and their files: a
        partition's first round reads only its own files, so its record stays valid until one of them (or a
        setting) changes. Later rounds read the de-duplication step's marks of every partition: not kept."""
        self.scratch.keep_only([round_record(0, index) for index in range(len(self._first))])

    def step_identity(self, round_: int, identities: Sequence[str]) -> str:
        """The de-duplication step after ``round_``: what every partition's task of that round was. Later
        rounds read its marks, so their identities follow from it."""
        self._before = completion.job_identity(self._base, "step", round_, list(identities))
        return self._before

    def step_finished(self, round_: int, name: str, identity: str) -> bool:
        if self.scratch.finished(f"r{round_}-{name}", identity) is None:
            return False
        self._notify(f"reusing the marks of {name} that an interrupted run finished")
        return True

    def save_step(self, round_: int, name: str, identity: str, files: Sequence[Any]) -> None:
        self.scratch.save(f"r{round_}-{name}", identity,
                          {self.scratch.relative(file): hashing.sha256_location(file) for file in files})
