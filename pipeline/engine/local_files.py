"""Local files that are not what they seem: what a glob or a read must refuse rather than block on or skip."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path

from pipeline.engine import locations
from pipeline.errors import StorageError

_FILE_KINDS = {stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device",
               stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket"}


def file_kind(mode: int) -> str:
    """What a file that is not a regular one is, for messages (``a FIFO``)."""
    return _FILE_KINDS.get(stat.S_IFMT(mode), "not a file")


def refuse_odd_matches(files: Sequence[str], recursive: bool) -> None:
    """Raise naming the first match that is not a regular file (a FIFO would block the read, a device never
    end, and skipping them would drop data without a word), and, under ``**``, a match reached through a
    link to a directory that contains the link: ``glob`` follows it round until the path is too long, so
    every file under it would be read some forty times."""
    loops: dict[str, bool] = {}
    for path in files:
        if os.path.exists(path) and not os.path.isfile(path):
            raise StorageError(f"{path} matches a source glob but is {file_kind(os.stat(path).st_mode)}, not a "
                               "regular file, so it cannot be read as data; remove it or narrow the glob")
        for directory in _parents(path) if recursive else ():
            if directory in loops:
                break  # it, and every directory above it, was checked for an earlier match
            loops[directory] = os.path.islink(directory) and _contains(Path(directory).resolve(),
                                                                       Path(directory).parent)
            if loops[directory]:
                raise StorageError(f"{directory} is a symbolic link to {os.readlink(directory)}, a directory "
                                   "that contains it, so a ** glob would read the files under it again and again; "
                                   "remove the link or narrow the glob")


def _parents(path: str) -> Iterator[str]:
    """The directories above ``path``, nearest first, as ``Path(path).parents`` names them."""
    while (parent := os.path.dirname(path) or ".") != path:
        yield parent
        path = parent


def _listed(path: Path) -> list[str]:
    """The names a ``kept.json`` lists; none when it is missing or not a list of names."""
    try:
        names = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return []
    return [name for name in names if isinstance(name, str)] if isinstance(names, list) else []


def _contains(directory: Path, inner: Path) -> bool:
    """Whether ``inner`` lies in ``directory`` (or is it), links resolved."""
    return locations.inside(inner.resolve(), directory)


def leftover_note(root: Path, scratch: tuple[str, ...]) -> str | None:
    """What ``status`` and an up-to-date ``run`` say of the scratch an interrupted run of a stage left (local
    ones only: sizing a remote prefix costs a listing): its size, and what becomes of it. It is kept: a forced
    run of the stage takes the tasks it finished. What a finished run kept for the next one (listed in the
    scratch's ``kept.json``) is no leftover."""
    from pipeline.engine.completion import KEPT_FILE  # completion imports storage, which imports this module

    found = []
    for name in scratch:
        path = root / name
        if "://" not in name and path.is_dir():
            kept = {KEPT_FILE, *_listed(path / KEPT_FILE)}
            files = [os.path.join(where, file) for where, _, names in os.walk(path) for file in names]
            size = sum(os.path.getsize(file) for file in files if os.path.isfile(file)
                       and os.path.relpath(file, path).replace(os.sep, "/") not in kept)
            if size or len(kept) == 1:  # with nothing kept, even an empty scratch is a leftover
                found.append(f"{name} holds {size:,} bytes that an interrupted run left")
    if not found:
        return None
    return "; ".join(found) + " (a run of the stage takes what it can of it; `lmprep clean` removes it)"
