"""Completion records: what lets a stage that was killed or failed redo only the tasks it had not finished.

As datatrove's completion markers do, a task writes its files into the stage's scratch location beside its
output, ``<output>.partial`` (a directory, or a prefix of the same object store), and then, once they are
complete, a record ``<name>.done.json``: the identity of its job (a hash of everything that shapes the files:
the inputs with their content stamps or checksums, the settings, the code version), the checksum of each
file it wrote and what it returned to the driver, and last a checksum of the record itself (``check``, the
sha256 of the rest of it), so that a record with one digit changed (a flipped bit, an edit) is not taken:
what it returned would go into the output unchecked. The next run takes a task's record only when its
checksum holds, it names the very job that run would start and every file still has its checksum, and
runs the task otherwise; it
removes the scratch once its output is in place, but for the records a stage keeps for its next run
(:meth:`Scratch.keep_only`: prepare's first round, which an edit of one raw file leaves valid for the
other partitions), listed in ``kept.json``. A record of other inputs or settings is never reused,
and a damaged or missing file makes its task run again. A task that runs again overwrites its files (each
is replaced atomically); what an unfinished task left and no record names is never read, and goes with the
scratch.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.engine import hashing, locations, storage
from pipeline.engine.locations import Location
from pipeline.errors import StorageError

SUFFIX = ".partial"
KEPT_FILE = "kept.json"  # the files a finished run kept for the next (Scratch.keep_only), not a leftover
RECORD_VERSION = 2  # 2: records carry their own checksum
MAX_RECORD_BYTES = 16 << 20  # a record lists its task's files, a few hundred bytes each; a larger one is not ours
_CHECKS = 16  # records checked at a time


def scratch_location(output: Location) -> Path | str:
    """Where a stage keeps its finished tasks' files: ``<output>.partial``, beside the output."""
    if locations.is_url(output):
        return os.fspath(output).rstrip("/") + SUFFIX
    path = Path(os.path.abspath(locations.local(output)))
    return path.with_name(path.name + SUFFIX)


def job_identity(*fields: Any) -> str:
    """What makes a task's files what they are, as one hash."""
    return hashing.canonical_hash([RECORD_VERSION, *fields])


@dataclass(frozen=True)
class Scratch:
    """The scratch location of one output (picklable: tasks write their files and records into it)."""

    location: Location
    shown: str = ""  # as messages name it: the output as the user gave it, with the suffix

    @classmethod
    def of(cls, output: Location) -> Scratch:
        return cls(scratch_location(output), os.fspath(output).rstrip("/") + SUFFIX)

    def check_place(self) -> None:
        """Refuse a local scratch location that something other than a directory holds (a file left there by
        hand): every task would fail to write into it."""
        location = self.location
        if isinstance(location, Path) and (location.is_symlink() or location.exists()) and not location.is_dir():
            raise StorageError(f"{self.shown or location} is not a directory, so it cannot keep the work of the "
                               "tasks that finish; remove it and run again")

    def path(self, *names: str) -> Path | str:
        return locations.join(self.location, *names)

    def relative(self, location: Location) -> str:
        """A location under the scratch as its records name it: relative, with ``/`` separators."""
        inner = os.fspath(location)[len(os.fspath(self.location)):]
        return inner.replace(os.sep, "/").strip("/")

    def save(self, name: str, identity: str, files: Mapping[str, str], result: Any = None) -> None:
        """Record that the job ``identity`` finished and wrote ``files`` (path relative to the scratch →
        sha256) and returned ``result`` (JSON); called last, in the task or, for a driver's step, the driver."""
        record = {"version": RECORD_VERSION, "job": identity, "files": dict(files), "result": result}
        # not fsynced: a record that a crash of the machine loses or tears is not taken (its check fails), and its
        # task runs again, as does one whose files lost bytes (their checksums fail); on one line, as json's C
        # encoder writes it (an encode task writes one per part)
        storage.write_json(self._record(name), {**record, "check": hashing.canonical_hash(record)}, durable=False,
                           indent=None)

    def finished_many(self, jobs: Sequence[tuple[str, str]]) -> list[tuple[Any] | None]:
        """:meth:`finished` for each ``(name, identity)``, several at a time: a remote store answers each
        request after a round trip, and reading and hashing the files is most of the time of a check. A
        remote scratch is listed first, once: a missing record or file then costs no request, and the
        others are read without asking for their sizes."""
        if not jobs:
            return []
        listed = self._listing()
        with ThreadPoolExecutor(max_workers=min(_CHECKS, len(jobs))) as pool:
            return list(pool.map(lambda job: self.finished(*job, listed=listed), jobs))

    def finished(self, name: str, identity: str, *,
                 listed: Mapping[str, Mapping[str, Any]] | None = None) -> tuple[Any] | None:
        """``(result,)`` of the job ``identity`` when a record says it finished and its files still have their
        checksums; None otherwise (no record, another job's, or a file missing or changed). ``listed``: the
        remote scratch's files with their stamps, as :func:`~pipeline.engine.storage.list_files` gives them."""
        try:
            if listed is None:
                record = json.loads(storage.read_bounded(self._record(name), MAX_RECORD_BYTES, what="record"))
            elif listed.get(f"{name}.done.json", {}).get("size", MAX_RECORD_BYTES + 1) <= MAX_RECORD_BYTES:
                record = json.loads(storage.read_range(os.fspath(self._record(name)), 0,
                                                       listed[f"{name}.done.json"]["size"]))
            else:
                return None
            if not _intact(record) or record["version"] != RECORD_VERSION or record["job"] != identity:
                return None
            if listed is not None and not all(file in listed for file in record["files"]):
                return None
            if not all(hashing.sha256_location(self.path(*file.split("/")),
                                               size=None if listed is None else listed[file]["size"]) == digest
                       for file, digest in record["files"].items()):
                return None
            return (record["result"],)
        except (OSError, ValueError, KeyError, TypeError, AttributeError, StorageError):  # none, or not one of ours
            return None

    def _listing(self) -> dict[str, dict[str, Any]] | None:
        """A remote scratch's files (none yet: empty); None for a local one."""
        if not locations.is_url(self.location):
            return None
        try:
            return storage.list_files(self.location)
        except StorageError:
            return {}

    def keep_only(self, names: Sequence[str]) -> None:
        """Remove everything but the records ``names`` and the files they list, and list those in
        :data:`KEPT_FILE`: what a finished run keeps for the next, which ``status`` does not count as left over
        by an interrupted run. A record that is missing or not intact keeps nothing."""
        kept = {KEPT_FILE}
        for name in names:
            with contextlib.suppress(OSError, ValueError, StorageError):
                record = json.loads(storage.read_bounded(self._record(name), MAX_RECORD_BYTES, what="record"))
                if _intact(record):
                    kept |= {f"{name}.done.json", *record["files"]}
        storage.remove_files([self.path(*file.split("/")) for file in self._files() if file not in kept])
        storage.write_json(self.path(KEPT_FILE), sorted(kept - {KEPT_FILE}))

    def _files(self) -> list[str]:
        """Every file under the scratch, relative to it with ``/`` separators."""
        if locations.is_url(self.location):
            return list(storage.list_files(self.location))
        return [os.path.relpath(os.path.join(where, file), self.location).replace(os.sep, "/")
                for where, _, files in os.walk(self.location) for file in files]

    def remove(self) -> None:
        if locations.is_url(self.location):
            storage.remove(self.location)
            return
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(self.location)

    def _record(self, name: str) -> Path | str:
        return self.path(f"{name}.done.json")


def _intact(record: Any) -> bool:
    """Whether a record read back is the one a task wrote: its ``check`` is the checksum of the rest of it."""
    if not isinstance(record, dict) or not isinstance(record.get("check"), str):
        return False
    rest = {key: value for key, value in record.items() if key != "check"}
    return set(rest) == {"version", "job", "files", "result"} and hashing.canonical_hash(rest) == record["check"]
