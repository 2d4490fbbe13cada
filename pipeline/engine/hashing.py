"""Content hashes: the one place the project hashes files, trees and values.

Remote files (fsspec URLs) are not read: their hash stands for the store's own
size and content identity (see :meth:`HashCache.remote_stamp`).

File hashes are cached by ``(size, mtime_ns, ctime_ns, inode)`` so that a no-op
run over gigabytes of data costs one ``stat`` per file, as DVC and git do. The
change time is what catches an edit that keeps the size and puts the old mtime
back (``cp -p``, ``rsync -t --inplace``): no user tool can set it. A writer that
hashed a file as it wrote it says so (:func:`remember`), and the caches of its
process take that digest, under the same stamp, instead of reading the file back.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import stat
import struct
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from pipeline.engine import atomic, locations, storage
from pipeline.engine.locations import Location
from pipeline.errors import StorageError

_CHUNK = 1 << 20
MAX_CACHE_BYTES = 1 << 30  # about 5 million files at some 200 bytes each
_STAMP = struct.Struct("<qqqQ")  # size, mtime_ns, ctime_ns, inode
_ENTRY = struct.Struct("<qqqQ32s")  # a cached file in memory: its stamp and sha256, 64 bytes


_WRITTEN: dict[str, bytes] = {}  # absolute path -> the stamp and sha256 (as _ENTRY) its writer gave


def remember(path: Location, digest: str) -> None:
    """Note that the local file ``path``, as it is now, has the sha256 ``digest``, which its writer took of the
    bytes it wrote: a :class:`HashCache` of this process then takes it while the file keeps its stamp."""
    key = os.path.abspath(path)
    _WRITTEN[key] = _ENTRY.pack(*_stat_stamp(key), bytes.fromhex(digest))


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class HashingWriter(io.RawIOBase):
    """Writes to a binary file and hashes what goes through: a file's sha256 as it is written, without reading
    it back (``pyarrow.PythonFile`` takes it as a sink)."""

    def __init__(self, handle: io.BufferedIOBase):
        super().__init__()
        self._handle = handle
        self._digest = hashlib.sha256()

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        self._digest.update(data)
        return self._handle.write(data)

    def hexdigest(self) -> str:
        return self._digest.hexdigest()


def canonical_hash(obj: Any) -> str:
    """sha256 of the canonical JSON form of ``obj`` (sorted keys, no spaces)."""
    return sha256_bytes(atomic.dumps_json(obj, indent=None).encode("utf-8"))


def sha256_file(path: Location) -> str:
    """sha256 of a regular file's bytes, read up to the size it had when opened; StorageError for anything else.

    A FIFO would block ``open`` until a writer came and ``/dev/zero`` (a link to it, a device) never ends: the
    path is opened without blocking and checked before a byte is read, and a file that grows meanwhile is
    hashed as it was (a file that grows while it is hashed is being written, and its stamp changes too)."""
    digest = hashlib.sha256()
    with _regular_file(path) as (handle, left):
        while left > 0 and (block := handle.read(min(_CHUNK, left))):
            digest.update(block)
            left -= len(block)
    return digest.hexdigest()


def read_with_sha256(path: Location, *, known: tuple[Sequence[int], str] | None = None) -> tuple[bytes, str]:
    """A regular file's bytes, as :func:`sha256_file` reads them, and their sha256: for a reader that checks a
    file against its checksum before it parses it, one read of the file instead of two (its memory is the
    file's size). ``known``: a stamp and the sha256 a hash cache holds for the file under it
    (:func:`vouched_stamp`); while the open file keeps that stamp, before and after the read, its bytes are not
    hashed again, as the runner judges an input unchanged."""
    with _regular_file(path) as (handle, size):
        stamp = _stamp_of(os.fstat(handle.fileno()))
        data = handle.read(size)
        if known is not None and list(known[0]) == stamp == _stamp_of(os.fstat(handle.fileno())):
            return data, known[1]
    return data, sha256_bytes(data)


@contextlib.contextmanager
def _regular_file(path: Location) -> Iterator[tuple[io.BufferedReader, int]]:
    """The open file and the size it had when opened, opened without blocking; StorageError unless it is a
    regular file (see :func:`sha256_file`)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with open(fd, "rb") as handle:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode):
            raise StorageError(f"{os.fspath(path)} is {storage.file_kind(found.st_mode)}, not a regular file")
        yield handle, found.st_size


def sha256_location(location: Location, *, size: int | None = None) -> str:
    """sha256 of a file's bytes, local or remote: a remote one is read as a stream or, its ``size`` known
    (from a listing), in ranges of a GET each, without the request that asks for its size."""
    if not locations.is_url(location):
        return sha256_file(locations.local(location))
    digest = hashlib.sha256()
    if size is not None:
        for start in range(0, size, _CHUNK):
            digest.update(storage.read_range(os.fspath(location), start, min(start + _CHUNK, size)))
        return digest.hexdigest()
    with storage.open_input(location) as handle:
        while block := handle.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def content_stamp(location: Location) -> Any:
    """What stands for a file's content without reading it: locally the stat fields the hash cache trusts
    (size, mtime, ctime, inode), remotely the store's size and content identity."""
    if locations.is_url(location):
        return storage.stamp(location)
    return _stat_stamp(locations.local(location))


def _stat_stamp(path: Location) -> list[int]:
    return _stamp_of(os.stat(path))


def _stamp_of(found: os.stat_result) -> list[int]:
    return [found.st_size, found.st_mtime_ns, found.st_ctime_ns, found.st_ino]


def _content_hash(path: Location, found: os.stat_result) -> str:
    """The sha256 of the file ``found`` stats, or for anything but a regular file what it is (see
    :meth:`HashCache.file_hash`)."""
    if not stat.S_ISREG(found.st_mode):
        return f"not a regular file: {storage.file_kind(found.st_mode)}"
    return sha256_file(path)


_VOUCHING: list[HashCache] = []  # the hash caches of the stages running in this process


@contextlib.contextmanager
def vouching(cache: HashCache) -> Iterator[None]:
    """While a stage runs, let its code ask what ``cache`` (the runner's, which has just hashed the stage's inputs)
    knows of a file: :func:`vouched_stamp`."""
    _VOUCHING.append(cache)
    try:
        yield
    finally:
        _VOUCHING.remove(cache)


def vouched_stamp(path: Location, digest: str) -> list[int] | None:
    """The stamp (size, mtime, ctime, inode) under which the hash cache of a stage running in this process, or the
    file's writer (:func:`remember`), knows that the local file ``path`` has the sha256 ``digest``; None where
    none does, and for a remote file. A task that finds the file with that stamp has those bytes
    (:func:`read_with_sha256`)."""
    if locations.is_url(path):
        return None
    key = os.path.abspath(path)
    for entry in (*(cache._entries.get(key) for cache in _VOUCHING), _WRITTEN.get(key)):
        if entry is not None and entry[_STAMP.size:].hex() == digest:
            return list(_STAMP.unpack(entry[:_STAMP.size]))
    return None


class HashCache:
    """Memoises file hashes on disk, keyed by path and validated by stat; a saved cache that is not one it
    wrote (``[]``, a torn entry) is ignored, entry by entry.

    It also keeps the commit records of remote outputs, keyed by the commit file's URL and validated by
    its stamp (:func:`pipeline.engine.storage.tree_stamp`), so an unchanged remote output costs a HEAD request.
    """

    def __init__(self, path: Location, *, listed: Mapping[str, Mapping[str, Any]] | None = None):
        self.path = Path(path)
        self._listed = dict(listed or {})  # remote files' stamps as a listing just gave them
        found = self._read()
        self._commits = {key: found.pop(key) for key in [key for key in found if locations.is_url(key)]}
        # path → its stamp and digest packed (:data:`_ENTRY`): a run over a million raw files holds an entry per
        # file, and 64 bytes are a fifth of the same as a list of four ints and a hex string
        self._entries: dict[str, bytes] = {key: packed for key, entry in found.items()
                                           if (packed := _packed(entry)) is not None}
        self._dirty = False

    def file_hash(self, path: Location) -> str:
        """A file's sha256; for anything but a regular file (a FIFO, a device, a link to one), which no stage
        writes, what it is: never read, so it never blocks, and never equal to the hash a file had, so an
        output replaced by one is modified (and written again by ``run``)."""
        key = os.path.abspath(path)
        found = os.stat(path)
        packed_stamp = _STAMP.pack(*_stamp_of(found))
        known = self._known(key, packed_stamp)
        if known is not None:
            self._entries[key], self._dirty = known, self._dirty or self._entries.get(key) != known
            return known[_STAMP.size:].hex()
        digest = _content_hash(path, found)
        packed = _packed([*_stamp_of(found), digest]) if stat.S_ISREG(found.st_mode) else None
        if packed is not None:
            self._entries[key], self._dirty = packed, True
        return digest

    def file_record(self, path: Location, recorded: tuple[list[int], str] | None = None) -> tuple[list[int], str]:
        """A file's stamp (its four stat fields) and hash as :meth:`file_hash` gives it: ``recorded`` (a stamp
        and hash a listing kept, :mod:`pipeline.engine.file_sets`) while the file keeps that stamp, else this
        cache's or its writer's, else read. Nothing is added to the cache: the listing keeps it, on disk."""
        found = os.stat(path)
        stamp = _stamp_of(found)
        if recorded is not None and recorded[0] == stamp:
            return recorded
        known = self._known(os.path.abspath(path), _STAMP.pack(*stamp))
        return stamp, known[_STAMP.size:].hex() if known is not None else _content_hash(path, found)

    def _known(self, key: str, packed_stamp: bytes) -> bytes | None:
        """The packed entry (:data:`_ENTRY`) this cache or the file's writer holds for the file at ``key`` while
        it has ``packed_stamp``, or None."""
        for entry in (self._entries.get(key), _WRITTEN.get(key)):
            if entry is not None and entry[:_STAMP.size] == packed_stamp:
                return entry
        return None

    def tree_hash(self, path: Location) -> str:
        """Hash of a file, or of a directory as its sorted (relative path, file hash) list.

        Hidden entries (names starting with a dot, such as staging dirs) are skipped.
        """
        if locations.is_url(path):
            found = self.remote_stamp(path)
            if found is None:
                raise StorageError(f"{path}: not found")
            return "stamp:" + canonical_hash(found)
        root = Path(path)
        if root.is_file():
            return self.file_hash(root)
        listing = [[rel, self.file_hash(root / rel)] for rel in visible_files(root)]
        return canonical_hash(listing)

    def exists(self, path: Location) -> bool:
        """Whether a file or directory exists; a remote one as :meth:`remote_stamp` finds it."""
        return self.remote_stamp(path) is not None if locations.is_url(path) else os.path.exists(path)

    def remote_stamp(self, location: str) -> dict[str, Any] | None:
        """A remote file's or output's identity without reading a file (:func:`pipeline.engine.storage.tree_stamp`):
        the store's sizes and content identities, which it changes whenever it stores other bytes."""
        if location in self._listed:
            return dict(self._listed[location])
        kept = dict(self._commits)
        found = storage.tree_stamp(location, commits=self._commits)
        self._dirty |= self._commits != kept
        return found

    def save(self) -> None:
        if self._dirty:
            atomic.write_json_entries(self.path, ((key, self._commits[key] if key in self._commits else
                                                   _unpacked(self._entries[key]))
                                                  for key in sorted({*self._entries, *self._commits})))
            self._dirty = False

    def _read(self) -> dict[str, list]:
        """The saved entries; none when the cache is missing, torn, over ``MAX_CACHE_BYTES`` or not a regular file
        (it only saves time: every file is hashed again, and the next save replaces it)."""
        try:
            found = json.loads(storage.read_bounded(self.path, MAX_CACHE_BYTES, what="hash cache"))
        except (FileNotFoundError, ValueError, StorageError, RecursionError):
            return {}
        if not isinstance(found, dict):  # ``[]``, a number: not a cache this code wrote
            return {}
        return {key: entry for key, entry in found.items() if _is_entry(key, entry)}


def _is_entry(key: str, entry: Any) -> bool:
    """Whether a saved entry is one :class:`HashCache` writes: a file's four stat fields and its hash, or a
    remote commit's record (a list or mapping kept as it was)."""
    if locations.is_url(key):
        return isinstance(entry, (list, dict))
    return (isinstance(entry, list) and len(entry) == 5 and all(type(field) is int for field in entry[:4])
            and isinstance(entry[4], str))


def _packed(entry: list) -> bytes | None:
    """A saved entry of a local file in memory's form; None for one that cannot be packed (a stamp out of range, a
    digest that is not lowercase sha256 hex): the file is hashed again."""
    try:
        packed = _ENTRY.pack(*entry[:4], bytes.fromhex(entry[4]))
    except (struct.error, ValueError):
        return None
    return packed if packed[_STAMP.size:].hex() == entry[4] else None


def _unpacked(packed: bytes) -> list:
    """A packed entry as it is saved: the four stat fields and the hex digest."""
    *stamp, digest = _ENTRY.unpack(packed)
    return [*stamp, digest.hex()]


def visible_files(root: Path) -> list[str]:
    """The files under ``root`` that make its tree hash, as sorted relative paths (no hidden entry)."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in filenames:
            if not name.startswith("."):
                found.append(os.path.relpath(os.path.join(dirpath, name), root))
    return sorted(found)
