"""Where the data lives: the one module that finds, sizes and opens input files.

Stages reach raw and prepared files through these functions only, so that
another file system (object storage through fsspec URLs) is a change here
alone. Today a location is a local path. Tasks may run on other machines, so
a path handed to a task is made absolute first (:func:`absolute`): on a
cluster every worker must see the same files at the same path, as a shared
file system mounted in the same place gives.
"""

from __future__ import annotations

import glob
import os
from pathlib import Path
from typing import BinaryIO

SHARED_STORAGE_HINT = ("every worker must see the input and output paths (a shared file system "
                       "mounted at the same path on every machine)")


def absolute(path: str | os.PathLike[str]) -> Path:
    """The location as every task names it, independent of the task's working directory."""
    return Path(os.path.abspath(path))


def glob_files(pattern: str, root: str | os.PathLike[str]) -> list[Path]:
    """Files matching ``pattern`` under ``root``, sorted, as ``root`` joined with each match; symbolic
    links whose target is missing are kept (the caller refuses them: they stand for files).

    ``glob.glob``, unlike ``Path.glob``, skips hidden files such as temporaries of interrupted writers.
    """
    base = Path(root)
    return sorted(p for p in map(base.joinpath, glob.glob(pattern, root_dir=base, recursive=True))
                  if p.is_file() or (p.is_symlink() and not p.exists()))


def size(path: str | os.PathLike[str]) -> int:
    return os.stat(path).st_size


def open_input(path: str | os.PathLike[str]) -> BinaryIO:
    """An unbuffered binary stream of the file's bytes (the caller buffers and decompresses)."""
    return open(path, "rb", buffering=0)
