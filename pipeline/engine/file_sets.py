"""Dependencies that are every file a glob matched: one digest per glob in the lock, a listing on disk beside it.

A stage that reads every file its globs match (prepare over a million raw files) would, with a lock entry per
file, hold some hundreds of bytes per file in the driver: the entries, and the hash cache's beside them. Instead
the lock records for each glob (a :class:`FileSet`) one digest, the sha256 running over its files' sorted
``(name, content hash)`` records, each file named from the glob's base directory so that the digest is the same
wherever the project's outputs go (the run cache's key takes it). Beside the lock, ``files/{stage}.jsonl`` lists
every file's stat stamp and content hash as the stage's last run found them. It is read as a stream in step with
the sorted files (:func:`check`), so telling whether they changed costs a ``stat`` per file and no memory per
file: a file whose stamp is the one listed is not read, and one whose hash differs is named as changed (or added,
removed). While checking, the listing of the files as they are now is written to a temporary; the runner puts it
in place once the stage's run is recorded, or at once when the files are as recorded (their stamps refreshed).

The listing only names and saves time: the digests in the lock decide. A listing that is gone or was written by
another run than the lock's entry (the header carries its digests) serves as a cache of stamps, not as names.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from pipeline.engine import atomic, locations
from pipeline.engine.hashing import HashCache

LISTING_VERSION = 1
LISTINGS_DIR = "files"  # under the state dir
NAMED = 3  # the files a stage's reasons name per glob; the others are counted


@dataclass(frozen=True)
class FileSet:
    """The files one glob matched (in any order), as the stage names paths (relative to the project root, or
    URLs); ``name`` is the glob as the config writes it, ``base`` its directory as the stage names paths."""

    name: str
    base: str
    paths: Sequence[str]

    def relative(self, path: str) -> str:
        """``path`` named from the base directory, as the digest records it."""
        prefix = self._prefix()
        return path[len(prefix):] if path.startswith(prefix) else os.path.relpath(path, self.base)

    def under_base(self) -> bool:
        """Whether every file's path names it under the base, by its text (the paths are normalised, as globs
        and ``relpath`` give them): no ``..`` leads out of it."""
        prefix = self._prefix()
        return all(path.startswith(prefix) and not _leaves(path[len(prefix):]) for path in self.paths)

    def _prefix(self) -> str:
        return "" if self.base in ("", ".") else self.base.rstrip("/") + "/"


class Renamed(Sequence[str]):
    """Paths that each begin with ``old``, named with ``new`` in its place, each name made when it is asked for: a
    stage names raw files outside the project from the project root (``../data/a.txt``) while its glob gave them
    from elsewhere (``/srv/data/a.txt``), and a second string per file, held for the whole run, took as much
    memory as the first. Replacing a prefix that every path shares keeps their order: :meth:`sorted` sorts the
    paths it was given and names them one at a time."""

    def __init__(self, paths: Sequence[str], old: str, new: str):
        self._paths, self._old, self._new = paths, old, new

    def __len__(self) -> int:
        return len(self._paths)

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return [self._named(path) for path in self._paths[index]]
        return self._named(self._paths[index])

    def __iter__(self) -> Iterator[str]:
        return map(self._named, self._paths)

    def sorted(self) -> Iterator[str]:
        return map(self._named, sorted(self._paths))

    def _named(self, path: str) -> str:
        return self._new + path[len(self._old):]


def sorted_paths(paths: Sequence[str]) -> Iterator[str]:
    """``paths`` in sorted order, without a name per path held at once where they are :class:`Renamed`."""
    return paths.sorted() if isinstance(paths, Renamed) else iter(sorted(paths))


def _leaves(relative: str) -> bool:
    """Whether a normalised path relative to a directory leads out of it."""
    return relative == ".." or relative.startswith(("../", "/")) or "/../" in relative or relative.endswith("/..")


@dataclass
class Found:
    """One glob's files as they are now beside what the stage's last run recorded: the digest, and the changes
    (``changed``, ``added``, ``removed``, ``is missing``) counted, the first :data:`NAMED` of them named."""

    digest: str
    counts: Counter = field(default_factory=Counter)
    named: list[tuple[str, str]] = field(default_factory=list)  # (path, how)
    missing: str | None = None  # the first file that went between the listing of the glob and now

    def note(self, path: str, how: str) -> None:
        self.counts[how] += 1
        if len(self.named) < NAMED:
            self.named.append((path, how))


def digest_of(fileset: FileSet, records: Iterator[tuple[str, str]]) -> str:
    """The digest the lock records of a glob's ``(path, content hash)`` records, given in sorted path order."""
    digest = hashlib.sha256()
    for path, content in records:
        digest.update(f"{fileset.relative(path)}\0{content}\n".encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def listing_path(state_dir: Path, stage: str) -> Path:
    return state_dir / LISTINGS_DIR / f"{stage}.jsonl"


class Listing:
    """The records of a stage's listing (or of an old lock's entry), read forward one glob after another."""

    def __init__(self, digests: Sequence[str], records: Iterator[tuple[int, str, tuple[list[int], str]] | None]):
        """``records`` are ``(glob index, path, (stamp, hash))`` in order; a None ends them early (a torn line)."""
        self.digests = list(digests)  # each glob's digest when the listing was written
        self.whole = True  # False once a torn or odd line ended it: what it lacks would be named as added
        self._records = records
        self._advance()

    def take(self, index: int, path: str, gone: Callable[[str], None]) -> tuple[list[int], str] | None:
        """The record of ``path`` in glob ``index``; records of that glob sorted before it go to ``gone``."""
        while self._next is not None and (self._next[0], self._next[1]) < (index, path):
            if self._next[0] == index:
                gone(self._next[1])
            self._advance()
        if self._next is not None and self._next[:2] == (index, path):
            found = self._next[2]
            self._advance()
            return found
        return None

    def rest(self, index: int, gone: Callable[[str], None]) -> None:
        """Send the records of glob ``index`` not taken to ``gone``."""
        self.take(index + 1, "", gone)

    def _advance(self) -> None:
        found = next(self._records, _END)
        self.whole = self.whole and found is not None
        self._next = None if found is _END else found


_END = object()


@contextlib.contextmanager
def read_listing(path: Path) -> Iterator[Listing]:
    """The listing at ``path`` as a :class:`Listing` (the file open while the caller reads it); an empty one when
    it is missing or not one this code wrote (it only names and saves time)."""
    with contextlib.ExitStack() as stack:
        try:
            handle = stack.enter_context(open(path, encoding="utf-8"))
            header = json.loads(handle.readline())
        except (OSError, ValueError):
            header = None
        if not isinstance(header, dict) or header.get("version") != LISTING_VERSION:
            yield Listing((), iter(()))
            return
        yield Listing(header.get("digests", []), _records(handle))



def _records(handle: IO[str]) -> Iterator[tuple[int, str, tuple[list[int], str] | None]]:
    """The listing's lines after its header; a torn or odd line ends it."""
    for line in handle:
        try:
            record = json.loads(line)
        except ValueError:
            yield None
            return
        if not (isinstance(record, list) and len(record) >= 3 and type(record[0]) is int
                and all(isinstance(part, str) for part in (record[1], record[-1]))):
            yield None
            return
        index, path, *stamp, content = record
        yield index, path, (stamp, content)


def check(filesets: Sequence[FileSet], listing: Listing, named: Sequence[bool], cache: HashCache, root: str,
          out: PendingListing | None) -> list[Found]:
    """Each glob's files now, beside ``listing``: their digests, the files missing, and where ``named[i]`` says
    that the listing is what the lock's entry recorded, the changes. Paths are opened under ``root`` (the project
    root), as strings: a ``Path`` per file would leave its name in the table of interned strings. The records of
    the files now are written to ``out``, after a header whose digests :meth:`PendingListing.finish` fills in."""
    if out is not None:
        out.write(_header(["0" * 64] * len(filesets)))
    found = []
    for index, fileset in enumerate(filesets):
        result = Found("")
        changed = result.note if named[index] else _ignore

        def records(index=index, fileset=fileset, result=result, changed=changed) -> Iterator[tuple[str, str]]:
            for path in sorted_paths(fileset.paths):
                recorded = listing.take(index, path, lambda path: changed(path, "removed"))
                try:
                    stamp, content = _record(cache, path if locations.is_url(path) else os.path.join(root, path),
                                             recorded)
                except FileNotFoundError:
                    result.missing = result.missing or path
                    result.note(path, "is missing")
                    continue
                if recorded is None:
                    changed(path, "added")
                elif recorded[1] != content:
                    changed(path, "changed")
                if out is not None:
                    out.write(json.dumps([index, path, *stamp, content]) + "\n")
                yield path, content
            listing.rest(index, lambda path: changed(path, "removed"))

        result.digest = digest_of(fileset, records())
        found.append(result)
    if not listing.whole:  # names only the missing files: the others it lacks would be named as added
        for result in found:
            result.counts = Counter({"is missing": result.counts["is missing"]} if result.missing else {})
            result.named = [(path, how) for path, how in result.named if how == "is missing"]
    return found


def _header(digests: Sequence[str]) -> str:
    return json.dumps({"version": LISTING_VERSION, "digests": list(digests)}) + "\n"


def _ignore(path: str, how: str) -> None:
    """What a change goes to where the listing is not the lock's entry's."""


def _record(cache: HashCache, location: str, recorded: tuple[list[int], str] | None) -> tuple[list[int], str]:
    """A file's stamp and hash: a remote one's hash stands for the stamp its glob's listing gave (no request)."""
    if locations.is_url(location):
        return [], cache.tree_hash(location)
    return cache.file_record(location, recorded)


class PendingListing:
    """The listing of a stage's files as they are now, written to a temporary beside ``path`` while they are
    checked, and put in place (:meth:`commit`) or not (:meth:`discard`). Any error writing it (a full disk) only
    drops it: the listing names and saves time, and a command must not fail for it."""

    def __init__(self, path: Path):
        self.path = path
        try:
            self._tmp: Path | None = atomic.temporary_beside(path)
            self._handle: IO[str] | None = open(self._tmp, "w", encoding="utf-8")  # noqa: SIM115 (closed by finish)
        except OSError:
            self._tmp = self._handle = None

    def write(self, text: str) -> None:
        if self._handle is not None:
            try:
                self._handle.write(text)
            except OSError:
                self.discard()

    def finish(self, digests: Sequence[str]) -> None:
        """Close it, the glob digests written into its header (in place: :func:`check` wrote one with as many
        digests, of the same length)."""
        try:
            if self._handle is not None:
                self._handle.seek(0)
                self._handle.write(_header(digests))
                self._handle.close()
                self._handle = None
        except OSError:
            self.discard()

    def commit(self) -> None:
        """Put it in place of the listing, if it was written whole."""
        try:
            if self._tmp is not None and self._handle is None:
                atomic.commit(self._tmp, self.path)
                self._tmp = None
        except OSError:
            self.discard()

    def discard(self) -> None:
        if self._handle is not None:
            with contextlib.suppress(OSError):
                self._handle.close()
        self._handle = None
        if self._tmp is not None:
            self._tmp.unlink(missing_ok=True)
        self._tmp = None


def converted(filesets: Sequence[FileSet], deps: dict[str, Any]) -> tuple[list[str], list[list[tuple[str, str]]]]:
    """For a lock entry of version 1, which recorded a hash per file: the glob digests of its files, and each
    glob's ``(path, hash)`` records, sorted, to name the changes by (:func:`listed`). A recorded file no glob
    matches now (removed) goes to the first glob whose base holds it."""
    owner = {path: index for index, fileset in enumerate(filesets) for path in fileset.paths}
    records: list[list[tuple[str, str]]] = [[] for _ in filesets]
    for path, content in deps.items():
        index = owner.get(path)
        if index is None:
            index = next((i for i, fileset in enumerate(filesets) if locations.inside(path, fileset.base)), 0)
        records[index].append((path, content))
    for kept in records:
        kept.sort()
    return [digest_of(fileset, iter(kept)) for fileset, kept in zip(filesets, records)], records


def listed(digests: Sequence[str], records: Sequence[Sequence[tuple[str, str]]]) -> Listing:
    """A :class:`Listing` of records held in memory (:func:`converted`), without stamps."""
    return Listing(digests, ((index, path, ([], content)) for index, kept in enumerate(records)
                             for path, content in kept))
