"""What an encode that was killed or failed had finished, so that the next one redoes only the rest.

Each task writes its part's shards into ``<output_dir>.partial/`` (a prefix beside the output in the same
store for a remote output), named after the part (``train-00003-00000.arrow``: no directory per part, which
would cost a file system entry more per task), and then its completion record (:mod:`pipeline.engine.completion`):
its job's identity (the part file's checksum, the stamp, every setting that shapes the shards, the code
version), the shards' checksums and their manifest entries. The driver then gives every shard its name in
the set in the staging output: a hard link locally, a copy made by the store remotely, in place of the
rename it did before. A run that dies leaves the partial location; the next one takes every part whose
record is its own job's and whose shards still have their checksums, encodes the others, and removes the
partial location once the new output is in place. The output is byte-identical to that of a run never
interrupted.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from pipeline.engine import completion
from pipeline.engine.completion import Scratch
from pipeline.shards.format import Manifest, ShardEntry, ShardStamp

SUFFIX = completion.SUFFIX
LAYOUT = 2  # in each job's identity: 2, the shards beside the records (1 kept them in a directory per part)


class PartialParts:
    """The ``<output_dir>.partial`` location of an encode output, local or remote."""

    def __init__(self, output_dir: str | os.PathLike[str]):
        self.scratch = Scratch.of(output_dir)
        self.scratch.check_place()

    def finished(self, jobs: Sequence[tuple[str, str, ShardStamp]]) -> list[Manifest | None]:
        """For each ``(prefix, identity, stamp)``, the shards a finished task of this very job left, checked
        against their checksums; None where there are none."""
        found = self.scratch.finished_many([(prefix, identity) for prefix, identity, _ in jobs])
        return [None if record is None else _manifest(record[0], stamp) for record, (_, _, stamp) in zip(found, jobs)]

    def shard(self, file: str) -> Path | str:
        """Where a part's task wrote one of its shards (whose name starts with the part's)."""
        return self.scratch.path(file)

    def remove(self) -> None:
        self.scratch.remove()


def _manifest(result: dict, stamp: ShardStamp) -> Manifest | None:
    try:
        return Manifest(stamp=stamp, shards=tuple(ShardEntry(**entry) for entry in result["shards"]),
                        max_id=int(result["max_id"]))
    except (KeyError, TypeError, ValueError):  # not a record this code wrote
        return None


def save_record(scratch: Scratch, prefix: str, identity: str, manifest: Manifest) -> None:
    """Record, once a part's shards are complete, that the job ``identity`` wrote them (runs in the task)."""
    scratch.save(prefix, identity, {entry.file: entry.sha256 for entry in manifest.shards},
                 {"shards": [vars(entry) for entry in manifest.shards], "max_id": manifest.max_id})

