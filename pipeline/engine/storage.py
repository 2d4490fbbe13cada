"""Where the data lives: the one module that finds, sizes, stamps and opens files, local or remote.

A location is a local path or an fsspec URL (``s3://bucket/key``, ``gs://…``,
``memory://…``); ``file://`` URLs are local paths. Remote locations go through
fsspec and its backend (``s3fs`` for ``s3://``), which find credentials where
they always do (environment variables, ``~/.aws``, instance roles): lmprep
never reads, stores or logs them.

Tasks may run on other machines, so a path handed to a task is made absolute
first (:func:`absolute`): on a cluster every worker must see the same local
files at the same path, as a shared file system mounted in the same place
gives, or use URLs.

A remote file is identified without reading it by :func:`stamp`: its size and
the store's own content identity (S3's ETag and version ID, GCS's md5/crc32c
and generation), as the listing already returns them.

Object stores have no atomic rename, so a remote output directory is written
by attempts (:func:`output_dir`): a run writes every file under a new hidden
prefix ``.attempt-{time}-{random}/`` and then publishes it with one PUT of
``_lmprep_commit.json``, which names the attempt and lists its files with their
stamps. Readers go through the commit (:func:`committed`), so a file of an
interrupted or superseded attempt is never read; the run that commits removes
the other attempts, which under the runner's lock are all ended.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import re
import shutil
import stat
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO

from pipeline.engine import atomic, local_files, retries, store_fork  # noqa: F401  (store_fork: at-fork handlers)
from pipeline.engine.locations import URL as _URL
from pipeline.engine.locations import Location, absolute, is_url, join, local, name_of, path_order, path_text
from pipeline.errors import FileTooLargeError, StorageError, shorten

SHARED_STORAGE_HINT = ("every worker must see the input and output paths (a shared file system "
                       "mounted at the same path on every machine, or fsspec URLs)")
# what identifies a remote object's content, as fsspec backends name it in ``info()``
_IDENTITY_KEYS = ("ETag", "VersionId", "md5Hash", "crc32c", "generation", "checksum")
_TIME_KEYS = ("LastModified", "mtime", "created", "updated")  # only for stores that give no identity


UPLOAD_PART_BYTES = 8 << 20  # a multipart upload's parts (S3 takes 5 MiB to 5 GiB, at most 10,000 of them) ...
UPLOAD_PARTS_AT_ONCE = 4  # ... sent this many at a time: an upload holds about 32 MiB of its file
_S3_MAX_PARTS = 10_000
COMMIT_FILE = "_lmprep_commit.json"
COMMIT_VERSION = 1
_ATTEMPT_PREFIX = ".attempt-"
file_kind = local_files.file_kind


def glob_files(pattern: str, root: Location) -> list[str]:
    """Files matching ``pattern``, sorted: a URL pattern as URLs, a local one as ``root`` joined with each match,
    as the text of its ``Path`` and in the order of ``Path`` s (:func:`~pipeline.engine.locations.path_order`),
    building none: a ``Path`` per match left some 90 bytes per file in the driver for the whole run (its
    components, interned). Local symbolic links whose target is missing are kept (the caller refuses them: they
    stand for files).

    Hidden names (temporaries of interrupted writers, attempts of remote outputs) are skipped, as
    ``glob.glob``, unlike ``Path.glob``, skips them.
    """
    if is_url(pattern):
        return sorted(glob_stamps(pattern))
    base = os.fspath(local(root))
    pattern = os.fspath(local(pattern))
    matches = glob.glob(pattern, root_dir=base, recursive=True)
    files = [path for path in (path_text(os.path.join(base, match)) for match in matches) if not os.path.isdir(path)]
    files.sort(key=path_order)
    local_files.refuse_odd_matches(files, bool(matches) and "**" in pattern)  # first: a link loop's own message
    _check_listable(Path(base), os.path.dirname(pattern))  # (listing a loop forty deep can fail on its own)
    return files


def glob_stamps(pattern: str) -> dict[str, dict[str, Any]]:
    """The remote files matching a URL pattern, each with its :func:`stamp` as the listing gives it: a caller
    that keeps them (a source file, a stage's dependencies) needs no request per file to size or identify it.
    Each call lists afresh."""
    fs, protocol = _filesystem(pattern)
    with _named_errors(pattern):
        fs.invalidate_cache()
        found = retries.call(pattern, fs.glob, pattern, detail=True)
        if not found:
            _check_container(fs, pattern)
    fixed = _fixed_parts(fs._strip_protocol(pattern))
    return {_url(protocol, key): _identity(entry) for key, entry in sorted(found.items())
            if entry.get("type") == "file" and not _hidden(key.split("/")[fixed:])}


def _check_listable(base: Path, directories: str) -> None:
    """Raise naming the first directory matched by the pattern ``directories`` that cannot be listed:
    ``glob`` skips it without a word, and the files in it would be silently missing."""
    for directory in sorted(glob.glob(directories or os.curdir, root_dir=base, recursive=True)):
        path = base / directory
        if not path.is_dir():
            continue
        try:
            with os.scandir(path):
                pass
        except OSError as exc:
            raise StorageError(f"{path}: cannot list this directory ({os.strerror(exc.errno).lower()}), so the "
                               "files in it would be missing from the data; fix its permissions or narrow the "
                               "glob") from None


def exists(location: Location) -> bool:
    """Whether the file or directory exists; remotely, a file, or a committed output or a directory in one."""
    if not is_url(location):
        return os.path.exists(local(location))
    return tree_stamp(location) is not None


def holds_anything(location: str) -> bool:
    """Whether any object lies at or under a remote location, committed or not."""
    fs, _ = _filesystem(location)
    with _named_errors(location):
        return retries.call(location, fs.exists, location)


def check_container(location: str) -> None:
    """Raise, naming the URL, when its bucket does not exist or cannot be seen: checked before a stage runs,
    not after it has worked for hours to write there."""
    fs, _ = _filesystem(location)
    with _named_errors(location):
        _check_container(fs, location)


def tree_stamp(location: str, commits: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """A remote location's identity without reading a file of it: a file's :func:`stamp`, or for a committed
    output or a directory within one the commit's stamps of the files under it; None when it is neither.
    The attempt is left out: a commit of the same files (names, sizes, ETags) is the same output, so the
    stages after one that re-ran and wrote the same bytes stay up to date (early cutoff, as on disk).

    ``commits`` keeps the commit records read, each with the stamp of the commit file it was read from
    (see :func:`_read_commit`), so that a caller that keeps them reads an unchanged commit's body only once.
    """
    fs, _ = _filesystem(location)
    with _named_errors(location):
        try:
            info = retries.call(location, fs.info, location)
        except FileNotFoundError:
            info = {}
    if info.get("type") == "file":
        return _identity(info)
    text = location.rstrip("/")
    for root in _ancestors(text):
        record = _read_commit(root, commits)
        if record is None:
            continue
        inner = text[len(root):].strip("/")
        files = {name: entry for name, entry in record["files"].items()
                 if not inner or name == inner or name.startswith(inner + "/")}
        return {"files": files} if files else None
    return None


def size(location: Location) -> int:
    if not is_url(location):
        return os.stat(local(location)).st_size
    return stamp(location)["size"]


def stamp(location: Location) -> dict[str, Any]:
    """What the store says identifies a remote file: its size and content identity, from ``info()`` (one
    request; :func:`glob_stamps` gives those of many files from one listing)."""
    fs, _ = _filesystem(location)
    with _named_errors(location):
        info = retries.call(location, fs.info, location)
    if info.get("type") != "file":
        raise StorageError(f"{location}: not a file")
    return _identity(info)


def _identity(info: dict[str, Any]) -> dict[str, Any]:
    identity = {key: str(info[key]) for key in _IDENTITY_KEYS if info.get(key) not in (None, "")}
    if not identity:
        identity = {key: str(info[key]) for key in _TIME_KEYS if info.get(key) not in (None, "")}
    return {"size": int(info["size"]), **identity}


def open_input(location: Location) -> BinaryIO:
    """A binary stream of the file's bytes (the caller buffers and decompresses); remote files
    are read in ranges as the stream is read, so a Parquet footer costs a range, not the file."""
    if not is_url(location):
        return open(local(location), "rb", buffering=0)
    fs, _ = _filesystem(location)
    with _named_errors(location):
        return retries.RetryingReader(os.fspath(location), retries.call(location, fs.open, location, "rb",
                                                                         cache_type="none"))


def read_range(location: str, start: int, end: int) -> bytes:
    """Bytes ``[start, end)`` of a remote file, in one GET (opening the file would first ask for its size)."""
    fs, _ = _filesystem(location)
    with _named_errors(location):
        return retries.call(location, fs.cat_file, location, start=start, end=end)


def read_bytes(location: Location) -> bytes:
    if not is_url(location):
        return Path(local(location)).read_bytes()
    fs, _ = _filesystem(location)
    with _named_errors(location):
        return retries.call(location, fs.cat_file, location)


def _read_at_most(file: BinaryIO, size: int, most: int) -> bytes:
    """Up to ``most`` bytes of a file that ``fstat`` found ``size`` bytes long: read for its size first, since a read
    asks for a buffer of the length it is given (a read of ``most`` would take the whole bound for a small file),
    then on to ``most`` if the file grew meanwhile."""
    data = file.read(min(size, most))
    while len(data) < most and (more := file.read(min(max(len(data), 1 << 16), most - len(data)))):
        data += more
    return data


def read_bounded(location: Location, limit: int, *, what: str) -> bytes:
    """The bytes of ``what`` (``tokenizer file``), a file of at most ``limit`` bytes; FileTooLargeError naming it and
    the bound for a larger file, and StorageError for anything but a regular file, both before reading.

    A FIFO with no writer would block ``open`` for ever and ``/dev/zero`` never ends: a local file is opened
    without blocking and refused unless it is a regular file, and at most ``limit + 1`` bytes are read (a file
    may grow meanwhile). A remote object is sized by the store, then read in one request.
    """
    if is_url(location):
        fs, _ = _filesystem(location)
        with _named_errors(location):
            data = retries.call(location, _read_remote_bounded, fs, location, limit, what)
    else:
        fd = os.open(local(location), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            found = os.fstat(fd)
            if not stat.S_ISREG(found.st_mode):
                kind = file_kind(found.st_mode)
                raise StorageError(f"{what} {os.fspath(location)} is {kind}, not a regular file; give a file")
            _check_size(location, found.st_size, limit, what)
            with open(fd, "rb", closefd=False) as file:
                data = _read_at_most(file, found.st_size, limit + 1)
        finally:
            os.close(fd)
    _check_size(location, len(data), limit, what)
    return data


def _read_remote_bounded(fs: Any, location: str, limit: int, what: str) -> bytes:
    with fs.open(location, "rb", cache_type="none") as remote:
        _check_size(location, remote.size, limit, what)
        return remote.read(limit + 1)


def _check_size(location: Location, size: int | None, limit: int, what: str) -> None:
    if size is not None and size > limit:
        mebibytes = f" ({limit >> 20:,} MiB)" if limit >= 1 << 20 else ""
        raise FileTooLargeError(f"{what} {os.fspath(location)} is larger than {limit:,} bytes{mebibytes}, "
                                "the most lmprep reads of such a file")


def read_many(locations: Sequence[str], *, requests: int = 16) -> Iterator[bytes]:
    """The bytes of several remote files, in order, fetched ``requests`` at a time: per-request latency,
    not bandwidth, bounds reading many small objects one by one."""
    fs, _ = _filesystem(locations[0])

    def fetch(location: str) -> bytes:
        with _named_errors(location):
            # a range from 0 spares s3fs a HEAD request per object
            return retries.call(location, fs.cat_file, location, start=0)

    with ThreadPoolExecutor(max_workers=min(requests, len(locations))) as pool:
        yield from pool.map(fetch, locations)


@contextlib.contextmanager
def local_copy(location: Location) -> Iterator[Path]:
    """A local path holding the file's bytes: the file itself, or a temporary download of a remote one."""
    if not is_url(location):
        yield Path(local(location))
        return
    fs, protocol = _filesystem(location)
    with tempfile.TemporaryDirectory(prefix="lmprep-") as scratch:
        copy = Path(scratch) / name_of(location)
        with _named_errors(location):
            retries.call(location, fs.get_file, location, str(copy), **_download_options(protocol))
        yield copy


@contextlib.contextmanager
def output_dir(location: Location) -> Iterator[Path | str]:
    """Yield an empty directory to write an output into; on success it replaces ``location`` as a whole.

    Locally a staging directory swapped in (:func:`pipeline.engine.atomic.atomic_dir`). Remotely a new attempt
    prefix, published by writing its commit last; an exception leaves the previous commit in place.
    """
    if not is_url(location):
        with atomic.atomic_dir(local(location)) as staging:
            yield absolute(staging)
        return
    url = os.fspath(location).rstrip("/")
    attempt = f"{_ATTEMPT_PREFIX}{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:8]}"
    yield join(url, attempt)
    record = {"version": COMMIT_VERSION, "attempt": attempt, "files": list_files(join(url, attempt))}
    write_json(join(url, COMMIT_FILE), record)
    _remove_attempts(url, keep=attempt)


@contextlib.contextmanager
def local_output_dir(location: Location) -> Iterator[Path]:
    """:func:`output_dir` for writers that need a local directory (plots, pyarrow and torch writers).

    Remotely the files are written to a local scratch directory, uploaded under the new attempt when the
    block ends, and committed after the last upload; an exception commits nothing.
    """
    if not is_url(location):
        with output_dir(location) as staging:
            yield Path(staging)
        return
    with tempfile.TemporaryDirectory(prefix="lmprep-") as scratch, output_dir(location) as attempt:
        yield Path(scratch)
        upload_dir(scratch, attempt)


def upload_dir(directory: Location, location: str) -> None:
    """Upload every file under a local directory to the same relative names under a remote prefix."""
    root = Path(directory)
    for file in sorted(path for path in root.rglob("*") if path.is_file()):
        put_file(file, join(location, file.relative_to(root).as_posix()))


def download_dir(location: Location, directory: Location) -> Path:
    """Copy a remote output's committed files into a new local directory (which must not exist yet)."""
    url = os.fspath(location).rstrip("/")
    source, names = committed(url), _read_commit(url)["files"]  # type: ignore[index]
    fs, protocol = _filesystem(url)
    target = Path(directory)
    target.mkdir(parents=True)
    for name in sorted(names):
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        with _named_errors(join(source, name)):
            retries.call(join(source, name), fs.get_file, os.fspath(join(source, name)), str(target / name),
                         **_download_options(protocol))
    return target


def committed(location: Location) -> Path | str:
    """Where an output's committed files are read: the directory itself locally, its committed attempt remotely."""
    if not is_url(location):
        return absolute(location)
    url = os.fspath(location).rstrip("/")
    record = _read_commit(url)
    if record is None:
        raise StorageError(f"{url}: no committed output there ({COMMIT_FILE} missing); run the stage that writes it")
    return join(url, record["attempt"])


@contextlib.contextmanager
def output_file(location: Location, *, durable: bool = True) -> Iterator[Path]:
    """A local path to write; on success it becomes ``location``: renamed into place locally, uploaded in
    one request remotely (an object appears whole or not at all). ``durable=False``: not fsynced locally
    (see :func:`atomic.atomic_path`)."""
    if not is_url(location):
        with atomic.atomic_path(local(location), durable=durable) as tmp:
            yield tmp
        return
    with tempfile.TemporaryDirectory(prefix="lmprep-") as scratch:
        tmp = Path(scratch) / name_of(location)
        yield tmp
        put_file(tmp, os.fspath(location))


def write_bytes(location: Location, data: bytes, *, durable: bool = True) -> None:
    """Replace the file with ``data``, atomically; ``durable=False``: not fsynced locally (see
    :func:`atomic.atomic_path`)."""
    if not is_url(location):
        atomic.write_bytes(local(location), data, durable=durable)
        return
    fs, _ = _filesystem(location)
    with _named_errors(location):
        retries.call(location, fs.pipe_file, os.fspath(location), data)


def write_json(location: Location, obj: Any, *, durable: bool = True, indent: int | None = 2) -> None:
    """Replace the file with ``obj`` as the project's JSON (:func:`pipeline.engine.atomic.dumps_json`), atomically
    (``durable``: as :func:`write_bytes`; ``indent=None``: on one line, for files no one reads by eye)."""
    write_bytes(location, (atomic.dumps_json(obj, indent=indent) + "\n").encode("utf-8"), durable=durable)


def make_dir(location: Location) -> None:
    """Create a local directory and its parents; object stores need none."""
    if not is_url(location):
        Path(local(location)).mkdir(parents=True, exist_ok=True)


def copy_files(pairs: Sequence[tuple[str | os.PathLike[str], str | os.PathLike[str]]]) -> None:
    """Give files second names (``(source, target)`` pairs) in an output being written: hard links locally
    (copies where the file system has none), copies made by the store itself remotely, many at a time (no
    byte passes through this machine)."""
    remote = [(os.fspath(source), os.fspath(target)) for source, target in pairs if is_url(source)]
    for source, target in pairs:
        if not is_url(source):
            atomic.link_file(local(source), local(target))
    if remote:
        fs, _ = _filesystem(remote[0][0])
        with _named_errors(remote[0][0]):  # a copy made again gives the same object: the batch is retried whole
            retries.call(remote[0][1], fs.copy, [source for source, _ in remote], [target for _, target in remote])


def put_file(source: Location, location: str) -> None:
    """Upload a local file to a remote location: one PUT, or the parts of a multipart upload and the request that
    completes it, so the object appears whole or not at all."""
    fs, protocol = _filesystem(location)
    options = _upload_options(protocol, os.path.getsize(source))
    with _named_errors(location):
        retries.call(location, fs.put_file, os.fspath(source), location, **options)


def _upload_options(protocol: str, size: int) -> dict[str, int]:
    """What bounds an upload's memory: s3fs's own choice sends a file of 100 MiB or more in parts of 50 MiB, 10 at a
    time, and reads a smaller one whole (about 1 GB of heap for a 560 MB ``train.bin``). Here a file below two
    parts is one PUT and a larger one goes up ``UPLOAD_PARTS_AT_ONCE`` parts of ``UPLOAD_PART_BYTES`` at a time
    (larger parts past S3's 10,000)."""
    if protocol not in retries.S3_PROTOCOLS:
        return {}
    return {"chunksize": max(UPLOAD_PART_BYTES, -(-size // _S3_MAX_PARTS)), "max_concurrency": UPLOAD_PARTS_AT_ONCE}


def _download_options(protocol: str) -> dict[str, int]:
    """s3fs fetches a file of 50 MiB or more in ranges of 50 MiB, 10 at a time, held in memory; one range at a
    time, it streams the object to the file instead (64 KiB at a time)."""
    return {"max_concurrency": 1} if protocol in retries.S3_PROTOCOLS else {}


def remove(location: Location) -> None:
    """Delete a file or everything under a prefix; a missing one is no error. A remote output's commit goes
    first, so a removal cut short leaves files that no commit lists, never a commit listing missing files."""
    if not is_url(location):
        path = Path(local(location))
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
        return
    fs, _ = _filesystem(location)
    for target in (join(location, COMMIT_FILE), location):
        with _named_errors(location), contextlib.suppress(FileNotFoundError):
            retries.call(target, fs.rm, os.fspath(target), recursive=True)


def remove_files(files: Sequence[Location]) -> None:
    """Delete files (not prefixes); a missing one is no error. Remotely in batches of the store's bulk delete (a
    request per 1,000 objects), not a listing and a delete per file as :func:`remove` costs."""
    remote = [os.fspath(file) for file in files if is_url(file)]
    for file in files:
        if not is_url(file):
            Path(local(file)).unlink(missing_ok=True)
    if remote:
        fs, _ = _filesystem(remote[0])
        with _named_errors(remote[0]):
            retries.call(remote[0], fs.rm, remote)


def list_files(prefix: str) -> dict[str, dict[str, Any]]:
    """Every file under a remote prefix: its path relative to the prefix → its :func:`stamp` fields."""
    fs, protocol = _filesystem(prefix)
    root = fs._strip_protocol(prefix).rstrip("/")
    with _named_errors(prefix):
        _forget_listings(fs, root)  # other processes (the workers) may have written there since
        found = retries.call(prefix, fs.find, prefix, detail=True)
        _forget_listings(fs, root)  # and none stays cached: a worker forked later would trust it
    return {key[len(root) + 1:]: _identity(entry) for key, entry in sorted(found.items())
            if entry.get("type") == "file"}


def _forget_listings(fs: Any, root: str) -> None:
    """Drop fsspec's cached listings of ``root`` and of every directory under it (``invalidate_cache``
    drops those of a path and its parents only)."""
    fs.invalidate_cache(root)
    for key in [key for key in getattr(fs, "dircache", {}) if key.startswith(root + "/")]:
        fs.dircache.pop(key, None)


def _read_commit(url: str, commits: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The commit record of a remote output, or None if it has none.

    With ``commits`` (commit file URL → [its stamp, its record]) the commit file's stamp is asked first
    (a HEAD request), and a record kept with that stamp is returned without reading the body again: a
    commit is one object, rewritten whole, so its ETag changes whenever its record does.
    """
    fs, _ = _filesystem(url)
    path = os.fspath(join(url, COMMIT_FILE))
    with _named_errors(path):
        try:
            if commits is not None:
                fs.invalidate_cache(path)  # another process may have committed since this one listed
                current = _identity(retries.call(path, fs.info, path))
                kept = commits.get(path)
                if kept is not None and kept[0] == current:
                    return kept[1]
            record = json.loads(retries.call(path, fs.cat_file, path))
        except FileNotFoundError:
            return None
        except ValueError as exc:
            raise StorageError(f"{path}: malformed commit record ({shorten(str(exc))}); "
                               "delete it and re-run the stage") from None
    if not isinstance(record, dict) or record.get("version") != COMMIT_VERSION:
        raise StorageError(f"{path}: not a commit record of this lmprep version; delete it and re-run the stage")
    if commits is not None:
        commits[path] = [current, record]
    return record


def _remove_attempts(url: str, *, keep: str) -> None:
    """Delete the attempts of an output other than ``keep``: interrupted or superseded runs, all ended,
    since runs of one project hold its lock and an output belongs to one project."""
    fs, protocol = _filesystem(url)
    with _named_errors(url):
        entries = retries.call(url, fs.ls, url, detail=False, refresh=True)
    for entry in entries:
        name = entry.rstrip("/").rsplit("/", 1)[-1]
        if name.startswith(_ATTEMPT_PREFIX) and name != keep:
            remove(_url(protocol, entry))


def _ancestors(url: str) -> Iterator[str]:
    """``url`` and its parents up to the bucket."""
    scheme, _, path = url.partition("://")
    parts = path.split("/")
    for end in range(len(parts), 0, -1):
        yield f"{scheme}://{'/'.join(parts[:end])}"


def _filesystem(location: Location) -> tuple[Any, str]:
    """The fsspec file system of a URL and its protocol; StorageError for an unknown or uninstalled one."""
    text = os.fspath(location)
    protocol = _URL.match(text).group(1).lower()  # type: ignore[union-attr]
    try:
        import fsspec

        fs = fsspec.filesystem(protocol, **retries.filesystem_options(protocol))
        return retries.without_own_retries(fs, protocol), protocol
    except ImportError as exc:
        raise StorageError(f"{text}: reading {protocol}:// URLs needs an fsspec backend that is not installed "
                           f"({exc}); for s3:// pip install 'lmprep[s3]'") from None
    except ValueError as exc:
        raise StorageError(f"{text}: unknown URL protocol {protocol!r} ({exc})") from None


@contextlib.contextmanager
def _named_errors(location: Location) -> Iterator[None]:
    """Turn a store's errors (no bucket, no credentials, access denied, bad URL) into one line naming the URL."""
    try:
        yield
    except FileNotFoundError as exc:
        raise StorageError(f"{location}: not found ({shorten(str(exc)) or 'no such file or bucket'})") from None
    except PermissionError as exc:
        raise StorageError(f"{location}: access denied ({shorten(str(exc))}); check the store's credentials "
                           "(for s3:// the usual AWS environment variables or ~/.aws)") from None
    except StorageError:
        raise
    except Exception as exc:
        if type(exc).__name__ in ("NoCredentialsError", "PartialCredentialsError"):
            raise StorageError(f"{location}: no credentials found for the store; set them as its library "
                               "expects (for s3:// AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or ~/.aws)") from None
        if isinstance(exc, (OSError, ValueError)) or type(exc).__module__.split(".")[0] in ("botocore", "aiohttp"):
            raise StorageError(f"{location}: {type(exc).__name__}: {shorten(str(exc))}") from None
        raise


def _url(protocol: str, key: str) -> str:
    return key if _URL.match(key) else f"{protocol}://{key}"


def _check_container(fs: Any, location: str) -> None:
    """Raise if the bucket (a URL's first component) does not exist: a listing of a missing one is empty."""
    container = fs._strip_protocol(location).split("/")[0]
    if container and not retries.call(location, _container_exists, fs, location, container):
        raise StorageError(f"{location}: no bucket {container!r} (or no access to it)")


def _container_exists(fs: Any, location: str, container: str) -> bool:
    """Whether a bucket exists: asked directly of S3, whose ``exists`` of a bucket answers False for any error
    (a frozen store's timeouts included); a bucket that this user may not head is probed as s3fs does."""
    if _URL.match(location).group(1).lower() not in retries.S3_PROTOCOLS:  # type: ignore[union-attr]
        return bool(fs.exists(container))
    try:
        fs.call_s3("head_bucket", Bucket=container)
    except FileNotFoundError:
        return False
    except PermissionError:
        return bool(fs.exists(container))
    return True


def _fixed_parts(pattern: str) -> int:
    """How many leading ``/``-separated parts of a glob hold no wildcard."""
    parts = pattern.split("/")
    return next((index for index, part in enumerate(parts) if re.search(r"[*?[]", part)), len(parts))


def _hidden(parts: list[str]) -> bool:
    return any(part.startswith(".") for part in parts)
