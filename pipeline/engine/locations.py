"""Locations as names: local paths, ``file://`` URLs and fsspec URLs, joined, split, compared and made
absolute without touching a file system. :mod:`pipeline.engine.storage` is the one module that reads and
writes what they name.
"""

from __future__ import annotations

import os
import re
from pathlib import Path, PurePosixPath

URL = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")

Location = str | os.PathLike[str]
"""What every function that names a file or directory takes: a local path (``str`` or :class:`~pathlib.Path`,
a ``file://`` URL included) or an fsspec URL such as ``s3://bucket/key``."""


def is_url(location: Location) -> bool:
    """Whether ``location`` is a remote URL (``file://`` is local)."""
    match = URL.match(os.fspath(location))
    return match is not None and match.group(1).lower() != "file"


def local(location: Location) -> str | os.PathLike[str]:
    """``location`` with a ``file://`` prefix removed; other locations as they are."""
    text = os.fspath(location)
    return text[len("file://"):] if text.lower().startswith("file://") else location


def normalize_url(location: str) -> str:
    """A ``file://`` URL as the local path it names; any other URL with its scheme in lower case."""
    match = URL.match(location)
    if match is None:
        return location
    if match.group(1).lower() == "file":
        return os.fspath(local(location))
    return match.group(1).lower() + location[len(match.group(1)):]


def is_container(location: str) -> bool:
    """Whether a URL names a whole bucket (``s3://bucket`` or ``s3://bucket/``), not a key or prefix in one."""
    return "/" not in os.fspath(location).partition("://")[2].strip("/")


def absolute(location: Location) -> Path | str:
    """The location as every task names it, independent of the task's working directory."""
    if is_url(location):
        return os.fspath(location)
    return Path(os.path.abspath(local(location)))


def openable(location: Location) -> str:
    """A path (from the current directory, or absolute) as the user opens it from there: relative while it
    stays below the current directory, else absolute; a URL as it is."""
    if is_url(location):
        return os.fspath(location)
    absolute_path = os.path.abspath(local(location))
    return os.path.relpath(absolute_path) if inside(absolute_path, os.curdir) else absolute_path


def inside(location: Location, directory: Location) -> bool:
    """Whether ``location`` is ``directory`` or lies under it, by name (neither need exist; links are not
    followed): local paths compared made absolute, URLs by their ``/``-separated parts."""
    if is_url(location) or is_url(directory):
        inner, outer = os.fspath(location).rstrip("/"), os.fspath(directory).rstrip("/")
        return inner == outer or inner.startswith(outer + "/")
    inner, outer = os.path.abspath(local(location)), os.path.abspath(local(directory))
    return inner == outer or inner.startswith(outer.rstrip(os.sep) + os.sep)


def join(location: Location, *names: str) -> Path | str:
    """``location`` joined with relative ``names`` (``/`` in a URL, the OS's separator locally)."""
    if is_url(location):
        return "/".join([os.fspath(location).rstrip("/"), *names])
    return Path(local(location)).joinpath(*names)


def parent(location: Location) -> Path | str:
    """The directory holding ``location``: ``s3://bucket/a`` of ``s3://bucket/a/b.json``."""
    if is_url(location):
        return os.fspath(location).rstrip("/").rsplit("/", 1)[0]
    return Path(local(location)).parent


def name_of(location: Location) -> str:
    """The last component of ``location``: ``b.jsonl.gz`` of ``s3://bucket/a/b.jsonl.gz``."""
    return PurePosixPath(os.fspath(location)).name if is_url(location) else Path(local(location)).name


def path_text(path: str) -> str:
    """``str(Path(path))`` without building the :class:`~pathlib.Path` (which interns every component of the
    path, for good): empty and ``.`` components left out, ``..`` kept, a leading ``//`` kept as POSIX does."""
    root = "//" if path.startswith("//") and not path.startswith("///") else "/" if path.startswith("/") else ""
    return root + "/".join(part for part in path.split("/") if part not in ("", ".")) or "."


def path_order(path: str) -> str:
    """A sort key of :func:`path_text` strings that orders them as their :class:`~pathlib.Path` s sort,
    component by component (``a/x`` before ``a-b/x``, which a plain string sort puts first): the components
    joined by NUL, which sorts before any character a name can hold (``.`` has none). Paths are compared with
    paths of the same root (all relative, or all absolute)."""
    return "" if path == "." else path.replace("/", "\0")
