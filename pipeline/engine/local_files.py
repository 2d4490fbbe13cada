"""Local files that are not what they seem: what a glob or a read must refuse rather than block on or skip."""

from __future__ import annotations

import stat

_FILE_KINDS = {stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device",
               stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket"}


def file_kind(mode: int) -> str:
    """What a file that is not a regular one is, for messages (``a FIFO``)."""
    return _FILE_KINDS.get(stat.S_IFMT(mode), "not a file")
