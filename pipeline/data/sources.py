"""Raw files to documents: the sources' globs, the task plan, and reading each partition through the reader of
each file's format (:data:`pipeline.data.registry.READERS`: .txt, .jsonl and .parquet, each optionally
gzip-compressed, and a user's reader).

Readers yield one document at a time and read files in bounded chunks, so
memory does not grow with file size (except for a .txt file read as a single
document, which *is* one document). Files are matched by the globs of the
config, in sorted order, so the corpus order — and therefore which copy of a
duplicate is kept — is the same on every machine.

A task reads one :class:`Partition`: consecutive :class:`Piece` s of the
corpus of about ``partition_bytes`` together. A piece is a whole file, a byte
range of a large uncompressed file of lines (``.jsonl``, or ``.txt`` with
``separator: line``) or a run of Parquet row groups. A byte range holds the
lines that *start* inside it, so consecutive ranges hold every line exactly
once whatever their size. Other files (gzip, other separators) are one piece
each. Small files are packed, so a corpus of a million small objects costs
tasks (and their requests and intermediate files) by its bytes, not its files.

Invalid UTF-8 is an error naming the file and byte offset unless the config
opts into ``replace`` or ``skip`` (drop the document).
"""

from __future__ import annotations

import itertools
import os
import re
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path, PurePath

from pipeline.config import SourceConfig
from pipeline.data.file_table import SourceFiles
from pipeline.data.reading import (
    CHUNK,
    STDIN,
    Piece,
    Reader,
    Record,
    SourceFile,
    TextDecoder,
    decoding_restart,
    open_binary,
)
from pipeline.data.record import parse_field
from pipeline.data.registry import READERS
from pipeline.data.user_code import resolve
from pipeline.engine import locations, storage
from pipeline.errors import ConfigError, DataError

_PREFETCH_BYTES = 8 << 20  # small remote files read ahead, at most this many bytes at a time
PARTITIONS_WANTED = 64  # a small corpus is cut into about this many partitions, so that every worker has some
MIN_PARTITION_BYTES = 2 << 20  # but none below this: a task costs its files and record whatever its size


def expand_sources(sources: Sequence[SourceConfig], *, root: str | os.PathLike[str] = ".",
                   label: str | None = None) -> SourceFiles:
    """Every file matched by the sources' globs, each glob's matches sorted; a glob matching nothing is an
    error naming it as ``label`` (by default its key, ``data.sources[0].glob``) and the glob it resolved to.

    Paths are ``root`` joined with the match, so a relative ``root`` gives relative paths; a glob
    that is a URL (``s3://bucket/raw/**/*.jsonl.gz``) gives URLs. Both are strings, kept in the columns of a
    :class:`~pipeline.data.file_table.SourceFiles`: the driver holds the files for the whole run.
    """
    if not sources:
        raise DataError("data.sources is empty; list at least one glob of raw files in the config")
    base = Path(root)
    files = SourceFiles()
    for index, source in enumerate(sources):
        _check_searchable(source.glob, base, label or f"data.sources[{index}].glob")
        stamps = storage.glob_stamps(source.glob) if locations.is_url(source.glob) else {}
        matches = sorted(stamps) if locations.is_url(source.glob) else storage.glob_files(source.glob, base)
        if not matches:
            resolved = source.glob if locations.is_url(source.glob) else os.path.normpath(base.resolve() / source.glob)
            looked_for = "" if resolved == source.glob else f" (looked for {resolved})"
            raise DataError(f"{label or f'data.sources[{index}].glob'} {source.glob!r} matches no files{looked_for}")
        for path in () if locations.is_url(source.glob) else matches:
            if not os.path.exists(path):
                raise DataError(f"{path} is a symbolic link to {os.readlink(path)}, which does not exist; "
                                "fetch the data it stands for, or remove the link")
        kinds: dict[str, SourceFile] = {}  # format → what the source's files of it share
        shared = os.path.commonprefix(matches)
        for path in matches:
            fmt = _format(path, source)
            if fmt not in kinds:
                kinds[fmt] = replace(_source_file(path, fmt, source, index, os.fspath(base)), path=shared)
            files.add(path, kinds[fmt], stamps.get(path))
    return files


# Trees a '**' never searches: the whole file system (a listing of every mounted disk, minutes or hours) and the
# kernel's virtual ones, whose files are no data (and some of which never end).
_UNSEARCHABLE = ("/", "/proc", "/sys", "/dev")


def _check_searchable(pattern: str, root: Path, key: str) -> None:
    """Refuse a local ``**`` glob under the file system's root or in a virtual file system (``/**/*.txt``)."""
    if locations.is_url(pattern) or "**" not in pattern:
        return
    base = os.path.normpath(os.path.join(os.path.abspath(root), glob_base(pattern)))
    if base == "/" or any(base == tree or base.startswith(tree + "/") for tree in _UNSEARCHABLE[1:]):
        where = "the whole file system" if base == "/" else f"{base}, a file system of the kernel's,"
        raise DataError(f"{key} {pattern!r} searches {where} with '**'; name the directory the data is in "
                        "(such as raw/**/*.txt)")


def glob_base(pattern: str) -> str:
    """The directory a glob reads under: its leading components without a wildcard."""
    pattern = os.fspath(locations.local(pattern))
    if locations.is_url(pattern):
        parts = pattern.split("/")
        return "/".join(parts[:next(i for i, part in enumerate(parts + ["*"]) if re.search(r"[*?[]", part))])
    parts = []
    for part in PurePath(pattern).parts:
        if re.search(r"[*?[]", part):
            break
        parts.append(part)
    return os.path.join(*parts) if parts else "."


def expand_arguments(patterns: Sequence[str], *, field: str | None = None,
                     separator: str = "document") -> list[SourceFile]:
    """Command-line sources: each a path or glob read as ``data.sources`` reads one (``.gz``, ``.jsonl``
    and ``.parquet`` by extension), or ``-`` for standard input: text, or JSON lines when ``field`` is given."""
    files: list[SourceFile] = []
    for pattern in patterns:
        if pattern == STDIN:
            files.append(SourceFile(Path(STDIN), "txt" if field is None else "jsonl", separator, field or "text"))
        else:
            source = SourceConfig(glob=pattern, separator=separator, field=field or "text")
            files += [replace(file, field_advice=_OPTION_ADVICE.get(file.format, file.field_advice))
                      for file in expand_sources([source], label="source")]
    return files


_OPTION_ADVICE = {"jsonl": "pass --field NAME", "parquet": "pass --column NAME"}  # the command line's own options


@dataclass(frozen=True)
class WholeFiles:
    """Consecutive whole files that one task reads, with the size of each: how the plan holds a run of small
    files (``files`` a view of the corpus's table), 8 bytes a file rather than a :class:`Piece` (64) and its size
    (32). Their pieces are made in the task that reads them."""

    files: Sequence[SourceFile]
    sizes: array  # of "q"

    @property
    def size(self) -> int:
        return sum(self.sizes)

    @property
    def pieces(self) -> Iterator[Piece]:
        return (Piece(file, 0, None, size) for file, size in zip(self.files, self.sizes))


@dataclass(frozen=True)
class Partition:
    """What one task reads: consecutive pieces of the corpus, held as ``runs``, each a piece of a file or
    :class:`WholeFiles`. ``index`` is its place in the corpus order; ``size`` its bytes, by which the largest
    start first."""

    index: int
    runs: tuple[Piece | WholeFiles, ...]

    @property
    def size(self) -> int:
        return sum(run.size for run in self.runs)

    @property
    def pieces(self) -> Iterator[Piece]:
        """Its pieces, each made as it is taken."""
        for run in self.runs:
            if isinstance(run, Piece):
                yield run
            else:
                yield from run.pieces

    def describe(self) -> str:
        """The partition as error messages and logs name it: its piece, or its first and last pieces."""
        first, *rest = itertools.islice(self.pieces, 2)
        if not rest:
            return first.describe()
        run = self.runs[-1]
        last = run if isinstance(run, Piece) else Piece(run.files[-1], 0, None, run.sizes[-1])
        return f"{first.describe()} to {last.describe()}, {len({piece.file.path for piece in self.pieces})} files"


def plan_partitions(files: Sequence[SourceFile], partition_bytes: int) -> list[Partition]:
    """Cut the files into pieces and pack consecutive pieces into partitions of about
    :func:`partition_size` bytes each, in corpus order.

    Reads only file sizes and Parquet footers, so the driver never touches the text.
    """
    plan = _packed(files, partition_bytes)
    size_wanted = partition_size(sum(partition.size for partition in plan), partition_bytes)
    return plan if size_wanted == partition_bytes else _packed(files, size_wanted)


def _packed(files: Sequence[SourceFile], size_wanted: int) -> list[Partition]:
    """The files cut into pieces of about ``size_wanted`` bytes, packed in order into partitions of at most that
    (or of one larger piece)."""
    packer = _Packer(files, size_wanted)
    for row, file in enumerate(files):
        for piece in _file_pieces(file, size_wanted):
            packer.add(row, file, piece)
    return packer.finish()


class _Packer:
    """Partitions packed piece by piece, each run of whole files kept as :class:`WholeFiles`."""

    def __init__(self, files: Sequence[SourceFile], size_wanted: int):
        self._files, self._wanted = files, size_wanted
        self.partitions: list[Partition] = []
        self._runs: list[Piece | WholeFiles] = []
        self._size = 0
        self._first, self._sizes = -1, array("q")  # the run of whole files being packed: its first row, sizes

    def add(self, row: int, file: SourceFile, piece: Piece) -> None:
        """Pack ``piece`` of ``file``, the file at ``row`` of the files."""
        if (self._runs or self._sizes) and self._size + piece.size > self._wanted:
            self._end_partition()
        if piece.start == 0 and piece.end is None and piece.file is file:
            if row != self._first + len(self._sizes):
                self._end_run()
                self._first = row
            self._sizes.append(piece.size)
        else:
            self._end_run()
            self._runs.append(piece)
        self._size += piece.size

    def finish(self) -> list[Partition]:
        if self._runs or self._sizes:
            self._end_partition()
        return self.partitions

    def _end_run(self) -> None:
        if self._sizes:
            self._runs.append(WholeFiles(self._files[self._first:self._first + len(self._sizes)], self._sizes))
        self._first, self._sizes = -1, array("q")

    def _end_partition(self) -> None:
        self._end_run()
        self.partitions.append(Partition(len(self.partitions), tuple(self._runs)))
        self._runs, self._size = [], 0


def partition_size(total_bytes: int, partition_bytes: int) -> int:
    """The bytes of a partition: ``prepare.partition_bytes`` at most, but small enough that a corpus below
    ``PARTITIONS_WANTED`` of them is still cut into about that many, each of ``MIN_PARTITION_BYTES`` at least
    (a 45 MB corpus was one partition, on one core). The parts, and document IDs of cut files, follow the
    partitions, so this depends on the data and the settings alone, never on the workers; and it is a power of
    two, so that an edit of one raw file seldom changes it (which would make every partition other than before
    and leave none of the records a finished run kept to reuse)."""
    wanted = max(total_bytes // PARTITIONS_WANTED, MIN_PARTITION_BYTES)
    return min(partition_bytes, 1 << (wanted.bit_length() - 1))


def _file_pieces(file: SourceFile, partition_bytes: int) -> list[Piece]:
    return reader_of(file).pieces(file, partition_bytes)


def reader_of(file: SourceFile) -> Reader:
    """The registered reader of the file's format."""
    return READERS[file.format]


def read_partition(partition: Partition, decoder: TextDecoder) -> Iterator[str]:
    """The documents of one partition, streamed; small remote files are fetched several at a time."""
    for _, records in read_partition_pieces(partition, decoder):
        for text, _ in records:
            yield text


def read_partition_pieces(partition: Partition, decoder: TextDecoder) -> Iterator[tuple[Piece, Iterator[Record]]]:
    """Each piece of one partition with its documents and their metadata, streamed (read them before asking for
    the next piece)."""
    for piece, data in _prefetched(partition.pieces):
        yield piece, read_piece_records(piece, decoder, data)


def _prefetched(pieces: Iterable[Piece]) -> Iterator[tuple[Piece, bytes | None]]:
    """Each piece with its bytes when it is a whole remote file of at most ``_PREFETCH_BYTES`` (fetched
    concurrently with its neighbours, ``_PREFETCH_BYTES`` at most at a time), else with None."""
    batch: list[Piece] = []
    batch_bytes = 0
    for piece in pieces:
        if batch and (not _prefetchable(piece) or batch_bytes + piece.size > _PREFETCH_BYTES):
            yield from zip(batch, storage.read_many([p.file.path for p in batch]))
            batch, batch_bytes = [], 0
        if _prefetchable(piece):
            batch.append(piece)
            batch_bytes += piece.size
        else:
            yield piece, None
    if batch:
        yield from zip(batch, storage.read_many([p.file.path for p in batch]))


def _prefetchable(piece: Piece) -> bool:
    return (locations.is_url(piece.file.path) and piece.start == 0 and piece.end is None
            and 0 < piece.size <= _PREFETCH_BYTES)  # a range of an empty object is refused by S3


def read_documents(file: SourceFile, decoder: TextDecoder) -> Iterator[str]:
    """The documents of one whole raw file, streamed."""
    yield from _read_piece(Piece(file), decoder)


def _read_piece(piece: Piece, decoder: TextDecoder, data: bytes | None = None) -> Iterator[str]:
    """The texts of one piece, from ``data`` (the file's bytes) when given, else from the file."""
    for text, _ in read_piece_records(piece, decoder, data):
        yield text


def read_piece_records(piece: Piece, decoder: TextDecoder, data: bytes | None = None) -> Iterator[Record]:
    """The documents of one piece with their metadata, from ``data`` (the file's bytes) when given."""
    with open_binary(piece.file.path, data) as stream:
        yield from reader_of(piece.file).read(piece, stream, decoder)


def read_document_pieces(file: SourceFile, decoder: TextDecoder) -> Iterator[tuple[str, bool]]:
    """The documents of one whole raw file as ``(text, ends_document)`` pieces, in order.

    A ``.txt`` file read as one document comes in pieces decoded from about 1 MB each, so that a
    reader that can use pieces (BPE's chunk counting) never holds a large file whole; any other
    document comes whole. With ``skip`` a file is read whole too: an invalid byte anywhere drops all of it.
    """
    if file.format != "txt" or file.separator != "document" or decoder.on_error == "skip":
        for text in read_documents(file, decoder):
            yield text, True
        return
    with open_binary(file.path) as stream:
        offset, held = 0, b""
        while data := stream.read(CHUNK):
            data = held + data
            cut = decoding_restart(data)
            yield decoder.decode(data[:cut], path=file.path, offset=offset), False
            offset, held = offset + cut, data[cut:]
        yield decoder.decode(held, path=file.path, offset=offset), True


def _format(path: str, source: SourceConfig) -> str:
    """The reader of a file of ``source``: its own, or the one its ``format`` names or its name tells."""
    if source.reader is not None:
        return "custom"
    return source.format if source.format != "auto" else _format_from_name(path)


def _source_file(path: str, fmt: str, source: SourceConfig, index: int, root: str) -> SourceFile:
    """A file of entry ``index`` of ``data.sources`` read as ``fmt``; what is wrong with the entry names it."""
    key = f"data.sources[{index}]"
    metadata = tuple(parse_field(spec, f"{key}.metadata") for spec in source.metadata)
    if source.reader is not None:
        code = resolve(source.reader, root=root, key=f"{key}.reader")
        return SourceFile(path, fmt, source.separator, source.field, source=index, metadata=metadata, code=code)
    if fmt not in READERS:
        raise ConfigError(f"{key}.format {fmt!r} is not a reader; known: auto, {', '.join(READERS)}")
    if metadata and fmt == "txt":
        raise ConfigError(f"{key}.metadata: {path} is read as text, which has no fields to keep; metadata needs "
                          ".jsonl, .parquet or a reader that gives them")
    return SourceFile(path, fmt, source.separator, source.field, source=index, metadata=metadata)


def _format_from_name(path: Path | str) -> str:
    fmt = format_of(path)
    if fmt is None:
        known = ", ".join(ext for reader in READERS.values() for ext in reader.extensions if ext not in ("txt",))
        raise DataError(f"{path}: cannot tell the format from the extension (known: {_shorten_list(known)}, "
                        "optionally .gz); narrow the glob or set format: in data.sources")
    return fmt


def _shorten_list(known: str, shown: int = 8) -> str:
    names = known.split(", ")
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")


# -- sampling (to guess how to read a file) -------------------------------


def format_of(path: Path | str) -> str | None:
    """The reader whose extensions the file name ends in (a ``.gz`` suffix aside), or None."""
    name = locations.name_of(path).lower()
    name = name[:-3] if name.endswith(".gz") else name
    return next((reader.name for reader in READERS.values() if name.endswith(reader.extensions)), None)


def head_bytes(path: Path, limit: int) -> bytes:
    """Up to ``limit`` bytes of the file's (decompressed) data."""
    with open_binary(path) as stream:
        return stream.read(limit)


def string_column_characters(path: Path, rows: int) -> dict[str, int]:
    """The characters each string column of a Parquet file (optionally ``.gz``) holds in its first ``rows`` rows."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    with open_binary(path) as stream:
        try:
            parquet = pq.ParquetFile(stream)
            names = [field.name for field in parquet.schema_arrow
                     if pa.types.is_string(field.type) or pa.types.is_large_string(field.type)]
            batch = next(parquet.iter_batches(batch_size=rows, columns=names), None) if names else None
        except (pa.ArrowException, OSError) as exc:
            raise DataError(f"{path}: not a readable parquet file ({exc})") from None
    if batch is None:
        return dict.fromkeys(names, 0)
    return {name: int(pc.sum(pc.utf8_length(batch.column(name))).as_py() or 0) for name in names}


