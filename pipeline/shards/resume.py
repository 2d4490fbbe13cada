"""What an encode that was killed or failed had finished, so that the next one redoes only the rest.

While an encode of a local output runs, each task writes its part's shards into
``<output_dir>.partial/<part>/`` and then, once they are complete, a completion record
``<part>.done.json``: what the task encoded (its job's identity: the part file's checksum, the stamp,
every setting that shapes the shards, the code version) and the shards' entries. A run that dies
leaves that directory; the next one takes the shards of every part whose record is its own job's
and whose files still have their checksums (hard links: nothing is copied), encodes the others, and
removes the directory once the new output is in place. The output is byte-identical to that of a run
never interrupted. A remote output's tasks write into its attempt as before and are not reused.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

from pipeline.engine import atomic, hashing, storage
from pipeline.errors import StorageError
from pipeline.shards.format import Manifest, ShardEntry, ShardStamp

SUFFIX = ".partial"
RECORD_VERSION = 1
MAX_RECORD_BYTES = 16 << 20  # a part's completion record lists its shards, a few hundred bytes each


class PartialParts:
    """The ``<output_dir>.partial`` directory of a local encode output."""

    def __init__(self, output_dir: str | os.PathLike[str]):
        output = Path(output_dir)
        self.directory = output.with_name(output.name + SUFFIX)

    def place(self, prefix: str) -> Path:
        """The empty directory a part's task writes its shards into (what an unfinished task left is removed)."""
        place = self.directory / prefix
        shutil.rmtree(place, ignore_errors=True)
        place.mkdir(parents=True)
        return place

    def record_path(self, prefix: str) -> Path:
        return self.directory / f"{prefix}.done.json"

    def finished(self, prefix: str, identity: str, stamp: ShardStamp) -> Manifest | None:
        """The shards a finished task of this very job left, checked against their checksums; None otherwise."""
        try:
            record = json.loads(storage.read_bounded(self.record_path(prefix), MAX_RECORD_BYTES, what="record"))
            if record["version"] != RECORD_VERSION or record["job"] != identity:
                return None
            entries = tuple(ShardEntry(**entry) for entry in record["shards"])
            if not all(hashing.sha256_file(self.directory / prefix / entry.file) == entry.sha256
                       for entry in entries):
                return None
            return Manifest(stamp=stamp, shards=entries, max_id=int(record["max_id"]))
        except (OSError, ValueError, KeyError, TypeError, StorageError):  # none, or not a record this code wrote
            return None

    def link_into(self, prefix: str, manifest: Manifest, staging: Path) -> None:
        """Put a part's shards into the staging output: hard links where the file system has them."""
        for entry in manifest.shards:
            source, target = self.directory / prefix / entry.file, staging / entry.file
            try:
                os.link(source, target)
            except OSError:
                shutil.copyfile(source, target)

    def remove(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(self.directory)


def save_record(path: str | os.PathLike[str], identity: str, manifest: Manifest) -> None:
    """Record, once a part's shards are complete, that the job ``identity`` wrote them (runs in the task)."""
    atomic.write_json(path, {"version": RECORD_VERSION, "job": identity,
                             "shards": [vars(entry) for entry in manifest.shards], "max_id": manifest.max_id})


def job_identity(*fields: Any) -> str:
    """What makes a part's shards what they are, as one hash."""
    return hashing.canonical_hash([RECORD_VERSION, *fields])
