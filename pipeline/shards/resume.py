"""What an encode that was killed or failed had finished, so that the next one redoes only the rest.

Each task writes its part's shards into ``<output_dir>.partial/<part>/`` (a prefix beside the output in
the same store for a remote output) and then its completion record (:mod:`pipeline.engine.completion`):
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
from pathlib import Path

from pipeline.engine import completion
from pipeline.engine.completion import Scratch
from pipeline.shards.format import Manifest, ShardEntry, ShardStamp

SUFFIX = completion.SUFFIX


class PartialParts:
    """The ``<output_dir>.partial`` location of an encode output, local or remote."""

    def __init__(self, output_dir: str | os.PathLike[str]):
        self.scratch = Scratch.of(output_dir)
        self.directory = self.scratch.location

    def place(self, prefix: str) -> None:
        """Empty a part's place before its task runs (what an unfinished task left there goes)."""
        self.scratch.place(prefix)

    def finished(self, prefix: str, identity: str, stamp: ShardStamp) -> Manifest | None:
        """The shards a finished task of this very job left, checked against their checksums; None otherwise."""
        found = self.scratch.finished(prefix, identity)
        if found is None:
            return None
        try:
            entries = tuple(ShardEntry(**entry) for entry in found[0]["shards"])
            return Manifest(stamp=stamp, shards=entries, max_id=int(found[0]["max_id"]))
        except (KeyError, TypeError, ValueError):
            return None

    def shard(self, prefix: str, file: str) -> Path | str:
        """Where a part's task wrote one of its shards."""
        return self.scratch.path(prefix, file)

    def remove(self) -> None:
        self.scratch.remove()


def save_record(scratch: Scratch, prefix: str, identity: str, manifest: Manifest) -> None:
    """Record, once a part's shards are complete, that the job ``identity`` wrote them (runs in the task)."""
    scratch.save(prefix, identity, {f"{prefix}/{entry.file}": entry.sha256 for entry in manifest.shards},
                 {"shards": [vars(entry) for entry in manifest.shards], "max_id": manifest.max_id})

