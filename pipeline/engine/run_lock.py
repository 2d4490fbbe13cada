"""The run lock, ``{state_dir}/run.lock``: two runs of a project never interleave.

The lock is an ``flock`` of the file, so it ends with the process that holds it; the file's text (the holder's
PID and start time) is only for a waiting run to show. A state dir where no file can be made because it is
read-only (permission, a read-only mount) is no error here: a run there can still find every stage up to date,
so it holds the existing file's lock to read, or none, and says that it cannot write.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from pipeline.engine import storage
from pipeline.engine.pool import keep_from_workers
from pipeline.errors import RunnerError, StorageError

_READ_ONLY = (errno.EACCES, errno.EPERM, errno.EROFS)  # why a file cannot be made where one may be read


@dataclass(frozen=True)
class Held:
    """What holding the lock found: whether the state dir takes files, and why not (a clause of a message)."""

    writable: bool = True
    why: str = ""


@contextlib.contextmanager
def held(state_dir: Path, *, wait: bool, log: Callable[[str], None]) -> Iterator[Held]:
    """Hold ``state_dir/run.lock`` (made, with the state dir, when missing); while another process holds it,
    wait for it (``log`` says so), or with ``wait=False`` raise :class:`RunnerError` naming it."""
    path = state_dir / "run.lock"
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as exc:  # a directory where no file can be made (/proc/self), or one that is read-only
        if exc.errno not in _READ_ONLY:
            raise RunnerError(f"the state dir cannot hold the run lock {path}: {_reason(exc)}") from None
        unwritable = Held(False, f"the state dir {state_dir} cannot be written ({_reason(exc)})")
    else:
        unwritable = None
    if unwritable is not None:
        with _read_only(path, wait=wait, log=log):
            yield unwritable
        return
    try:
        _lock(fd, fcntl.LOCK_EX, path, wait=wait, log=log)
        _write_holder(fd)
        with keep_from_workers(fd):
            yield Held()
    finally:
        os.close(fd)  # releases the lock


@contextlib.contextmanager
def _read_only(path: Path, *, wait: bool, log: Callable[[str], None]) -> Iterator[None]:
    """The lock of an existing file that cannot be written, shared; none when there is no such file (no run can
    be writing a state dir where no file can be made)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        yield
        return
    try:
        _lock(fd, fcntl.LOCK_SH, path, wait=wait, log=log)
        yield
    finally:
        os.close(fd)


def _lock(fd: int, kind: int, path: Path, *, wait: bool, log: Callable[[str], None]) -> None:
    try:
        fcntl.flock(fd, kind | fcntl.LOCK_NB)
        return
    except OSError as exc:
        if exc.errno not in (errno.EAGAIN, errno.EACCES):
            raise
    if not wait:
        raise RunnerError(_busy_message(path))
    log(f"waiting for the run of {_lock_holder(path)} to finish")
    fcntl.flock(fd, kind)


def _reason(exc: OSError) -> str:
    return os.strerror(exc.errno).lower() if exc.errno else str(exc)


def _write_holder(fd: int) -> None:
    """Put this process's PID and start time in the held lock file, for a waiting run to show.

    Best effort: the lock is the flock, not the text, and a full disk must not stop a run.
    """
    text = f"{os.getpid()} {time.strftime('%Y-%m-%d %H:%M:%S')}\n"
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
        os.pwrite(fd, text.encode("utf-8"), 0)


def _lock_holder(path: Path) -> str:
    """``PID 123 (started 2025-05-01 12:00:03)``, as far as the lock file says."""
    try:
        pid, _, started = storage.read_bounded(path, 4096, what="lock file").decode().strip().partition(" ")
    except (OSError, StorageError, ValueError):
        pid = started = ""
    if not pid:
        return "another process"
    return f"PID {pid} (started {started})" if started else f"PID {pid}"


def _busy_message(path: Path) -> str:
    return (f"another lmprep run ({_lock_holder(path)}) is running in this directory; wait for it to finish "
            f"(the lock {path} is released when that process exits)")
