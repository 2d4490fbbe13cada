"""The raw files of a corpus as the driver holds them for a whole run: in columns, not an object per file.

A list of :class:`~pipeline.data.reading.SourceFile` cost the driver some 220 bytes per raw file (the path's
``str``, about 110 bytes at 60 characters, and its ``SourceFile``, 104): 22 MB for 100,000 files of 1 KB. What is
per source (format, separator, field, metadata, a user's reader) is the same for every file of it, so
:class:`SourceFiles` keeps it once, in a *kind* per source and format: a ``SourceFile`` whose path is the start
its source's files share. A file is then the index of its kind, the rest of its path in one UTF-8 blob with the
offset where it ends, and, for a remote file, the stamp its listing gave: 10 bytes and the rest of its path
(``000/000123.txt``) for a local one. Each ``SourceFile`` is made when it is asked for, so a reader (a user's
among them) gets one as before.
"""

from __future__ import annotations

import os
from array import array
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import fields
from typing import Any

from pipeline.data.reading import SourceFile

_CODEC = "surrogatepass"  # every str round-trips, a file name's undecodable bytes (surrogate escapes) among them
Stamp = Mapping[str, Any]


class SourceFiles(Sequence[SourceFile]):
    """Raw files in corpus order, each given as a :class:`SourceFile` when asked for; :meth:`add` appends them.

    A slice is a view sharing the table's columns, so a partition's files cost the driver no more; a view is
    pickled with its own rows alone, so a task receives its files, not the corpus's.
    """

    def __init__(self, kinds: Sequence[SourceFile] = (), kind_of: array | None = None, paths: bytes | None = None,
                 ends: array | None = None, stamps: list[Stamp | None] | None = None, start: int = 0,
                 stop: int | None = None):
        self._kinds = list(kinds)
        self._shared = [_shared_fields(kind) for kind in self._kinds]  # each kind's fields but path and stamp
        self._kind_of = array("H") if kind_of is None else kind_of  # each file's index in ``_kinds``
        self._paths = bytearray() if paths is None else paths  # the rest of each path after its kind's, in UTF-8
        self._ends = array("q") if ends is None else ends  # where each file's rest ends in ``_paths``
        self._stamps = stamps  # each file's stamp from its listing; None while no file has one
        self._start, self._stop = start, len(self._ends) if stop is None else stop
        self._added: dict[int, int] = {}  # id of a kind given to :meth:`add` → its index

    def add(self, path: str, kind: SourceFile, stamp: Stamp | None = None) -> None:
        """Append a file: ``kind`` is what it shares with the other files of its source and format, its path the
        start of ``path`` that they share (the same object for each of them); ``stamp`` its listing's, if any."""
        assert self._start == 0 and self._stop == len(self._ends), "a view of a table is read-only"
        prefix = os.fspath(kind.path)
        assert path.startswith(prefix) and kind.stamp is None
        if id(kind) not in self._added:
            self._added[id(kind)] = len(self._kinds)
            self._kinds.append(kind)
            self._shared.append(_shared_fields(kind))
            if len(self._kinds) > 1 << 16 and self._kind_of.typecode == "H":
                self._kind_of = array("I", self._kind_of)
        self._kind_of.append(self._added[id(kind)])
        self._paths += path[len(prefix):].encode("utf-8", _CODEC)
        self._ends.append(len(self._paths))
        if stamp is not None and self._stamps is None:
            self._stamps = [None] * (len(self._ends) - 1)
        if self._stamps is not None:
            self._stamps.append(stamp)
        self._stop = len(self._ends)

    @property
    def kinds(self) -> list[SourceFile]:
        """What the files share, once per source and format (their path the start of their files')."""
        return list(self._kinds)

    @property
    def paths(self) -> Sequence[str]:
        """Each file's path, made when it is asked for."""
        return _Paths(self)

    def of_source(self, source: int) -> SourceFiles:
        """The files of entry ``source`` of ``data.sources``: consecutive, as :func:`expand_sources` adds them."""
        rows = range(len(self))
        first = next((row for row in rows if self._kind(row).source == source), len(self))
        stop = next((row for row in rows[first:] if self._kind(row).source != source), len(self))
        return self[first:stop]

    def stamps(self) -> dict[str, Stamp]:
        """Each remote file's stamp from its listing, by its path."""
        if self._stamps is None:
            return {}
        stamps = self._stamps
        return {self._path(row): stamps[row] for row in range(self._start, self._stop) if stamps[row] is not None}

    def __len__(self) -> int:
        return self._stop - self._start

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                return [self[i] for i in range(start, stop, step)]
            return SourceFiles(self._kinds, self._kind_of, self._paths, self._ends, self._stamps,
                               self._start + start, self._start + max(start, stop))
        return self._file(self._row(index))

    def __iter__(self) -> Iterator[SourceFile]:
        return map(self._file, range(self._start, self._stop))

    def _row(self, index: int) -> int:
        """The table row of this view's ``index``, counted from the end when negative, as a list counts."""
        if not -len(self) <= index < len(self):
            raise IndexError("source file index out of range")
        return self._start + index % len(self)

    def _kind(self, index: int) -> SourceFile:
        return self._kinds[self._kind_of[self._start + index]]

    def _path(self, row: int) -> str:
        rest = self._paths[self._ends[row - 1] if row else 0:self._ends[row]].decode("utf-8", _CODEC)
        return os.fspath(self._kinds[self._kind_of[row]].path) + rest

    def _file(self, row: int) -> SourceFile:
        """The file at ``row``, made by the constructor (``dataclasses.replace`` takes 2.3 times as long)."""
        stamp = None if self._stamps is None else self._stamps[row]
        return SourceFile(self._path(row), *self._shared[self._kind_of[row]], stamp)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """A view pickles its own rows alone, their ends counted from its first."""
        first = self._ends[self._start - 1] if self._start else 0
        last = self._ends[self._stop - 1] if self._stop > self._start else first
        ends = array("q", (end - first for end in self._ends[self._start:self._stop]))
        return SourceFiles, (self._kinds, self._kind_of[self._start:self._stop], bytes(self._paths[first:last]), ends,
                             None if self._stamps is None else self._stamps[self._start:self._stop])


def _shared_fields(kind: SourceFile) -> tuple[Any, ...]:
    """The fields of ``kind`` between its path, the first, and its stamp, the last, in order."""
    names = [field.name for field in fields(SourceFile)]
    assert names[0] == "path" and names[-1] == "stamp"
    return tuple(getattr(kind, name) for name in names[1:-1])


class _Paths(Sequence[str]):
    """The paths of a table's files, each made when it is asked for."""

    def __init__(self, files: SourceFiles):
        self._files = files

    def __len__(self) -> int:
        return len(self._files)

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        files = self._files
        return files._path(files._row(index))

    def __iter__(self) -> Iterator[str]:
        files = self._files
        return map(files._path, range(files._start, files._stop))


def per_source(files: Sequence[SourceFile]) -> Sequence[SourceFile]:
    """Files standing for what ``files`` hold per source (their source, format and reader): a table's kinds, else
    the files themselves."""
    return files.kinds if isinstance(files, SourceFiles) else files


def reader_code_files(files: Sequence[SourceFile]) -> list[str]:
    """The files of the users' readers of ``files``, sorted, each once."""
    return sorted({file.code.file for file in per_source(files) if file.code is not None})
