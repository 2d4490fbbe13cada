"""Atomic outputs: write to a temporary sibling, then rename over the target.

A crash, ``kill -9`` or Ctrl-C at any point leaves either the old file or the
new one, never a torn mix. ``os.replace`` is atomic within one file system,
which a sibling temp file guarantees.

A temporary is named after its target and the process writing it
(``.{name}.tmp-{pid}-{random}``), so that cleaning up after a killed writer
removes only that target's temporaries whose writer is gone, never those of a
run still writing, such as a second pipeline using the same directory.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import itertools
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from pipeline.errors import StorageError

_TMP_MARK = ".tmp-"
_SURROGATE = re.compile("[\ud800-\udfff]")
# errors that only writing causes: reported against the output being written
_WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def _name_output_in_write_errors(generator_function):
    """Raise a full disk (or quota, or file size limit) met while writing an output as an
    OSError naming the output, not a temporary or nothing at all, as buffered writes and
    pyarrow's do: the output is the name the user knows."""

    @functools.wraps(generator_function)
    def named(path: str | os.PathLike[str], **options: Any) -> Iterator[Path]:
        try:
            yield from generator_function(path, **options)
        except OSError as exc:
            if exc.errno not in _WRITE_ERRNOS:
                raise
            raise OSError(exc.errno, os.strerror(exc.errno), os.fspath(path)) from exc

    return named


@contextlib.contextmanager
@_name_output_in_write_errors
def atomic_path(path: str | os.PathLike[str], *, durable: bool = True) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success rename it onto ``path``.

    The caller writes the temporary path however it likes (pyarrow, torch,
    plain ``open``). On any exception the temporary file is removed and the
    previous ``path`` is untouched. A ``path`` that names a directory (an existing
    one, or ending in a separator) is refused before anything is written. ``durable=False`` skips the
    fsync before the rename: for intermediate files in a staging directory that a crash discards
    anyway (a few ms each locally, more on a network file system).
    """
    target = _file_target(path)
    tmp = _temporary_file(target)
    try:
        yield Path(tmp)
        commit(tmp, target, durable=durable)
    except BaseException:
        _remove(tmp)
        raise


def temporary_beside(path: str | os.PathLike[str]) -> Path:
    """A new empty temporary file beside ``path`` (its parent created), named as :func:`remove_orphaned_temporaries`
    finds it once its writer is gone: for a writer that decides only later whether it replaces ``path``
    (:func:`commit`) or not (it unlinks it)."""
    return Path(_temporary_file(_file_target(path)))


def commit(tmp: str | os.PathLike[str], path: str | os.PathLike[str], *, durable: bool = True) -> None:
    """Rename the finished temporary ``tmp`` onto ``path`` (``durable``: as :func:`atomic_path`)."""
    _apply_umask(tmp, 0o666)  # after the writer: some (safetensors) replace the file with a private one
    if durable:
        _fsync_file(tmp)
    os.replace(tmp, path)


# The helpers of single files work on strings: a pathlib.Path made per step cost an encode task more than its
# writes did (five Paths and 0.15-0.4 ms of CPU per atomic write of a small file).


def _file_target(path: str | os.PathLike[str]) -> str:
    """``path`` with its parent created; IsADirectoryError for a directory (an existing one, or a trailing
    separator), before anything is written."""
    target = os.fspath(path)
    if target.endswith(("/", os.sep)) or os.path.isdir(target):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), target)
    parent = os.path.dirname(target)
    if parent and not os.path.isdir(parent):
        os.makedirs(parent, exist_ok=True)
    return target


def _temporary_file(target: str) -> str:
    fd, name = tempfile.mkstemp(prefix=_temporary_prefix(target), dir=os.path.dirname(target) or os.curdir)
    os.close(fd)
    return name


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def write_bytes(path: str | os.PathLike[str], data: bytes, *, durable: bool = True) -> None:
    """Atomically replace ``path`` with ``data`` (``durable``: as :func:`atomic_path`)."""
    with atomic_path(path, durable=durable) as tmp:
        tmp.write_bytes(data)


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """Atomically replace ``path`` with ``text`` encoded as UTF-8."""
    write_bytes(path, text.encode("utf-8"))


def write_json(path: str | os.PathLike[str], obj: Any, *, indent: int | None = 2) -> None:
    """Atomically write ``obj`` as JSON with sorted keys (byte-stable output): :func:`dumps_json`'s text and a
    newline, written as it is encoded, never whole in memory (the lock of a stage that reads 100,000 raw files
    is some 10 MB of text, and its indented encoding held three times that while it was joined)."""
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8", newline="") as out:
        for chunk in _json_encoder(indent).iterencode(obj):
            out.write(_escaped(chunk))
        out.write("\n")


def write_json_entries(path: str | os.PathLike[str], entries: Iterable[tuple[str, Any]]) -> None:
    """Atomically write a JSON object from its ``(key, value)`` entries, given in sorted key order, one at a
    time: the bytes :func:`write_json` writes of their dict with ``indent=None``, without the whole text (or
    the dict) in memory at once (the hash cache of a million raw files is some 180 MB of text)."""
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8", newline="") as out:
        out.write("{")
        for number, (key, value) in enumerate(entries):
            out.write(f"{',' if number else ''}{dumps_json(key, indent=None)}:{dumps_json(value, indent=None)}")
        out.write("}\n")


def dumps_json(obj: Any, *, indent: int | None = 2) -> str:
    """The one JSON serialisation of the project: sorted keys, UTF-8, no NaN.

    A lone surrogate, which is how Python spells a byte of a file name that is not UTF-8
    (``os.fsdecode``), is written as its ``\\udcXX`` escape: valid JSON that reads back as the same
    name, where the raw character could not be encoded as UTF-8 at all. Every other character is
    written as itself, so the text (and every hash of it) is what it always was.
    """
    text = _indented_json(obj, indent) if indent is not None else None
    return _escaped(text if text is not None else _json_encoder(indent).encode(obj))


def _json_encoder(indent: int | None) -> json.JSONEncoder:
    separators = (",", ": ") if indent is not None else (",", ":")
    return json.JSONEncoder(sort_keys=True, ensure_ascii=False, indent=indent, separators=separators,
                            allow_nan=False)


def _escaped(text: str) -> str:
    """``text`` with each lone surrogate written as its ``\\udcXX`` escape (see :func:`dumps_json`)."""
    return _SURROGATE.sub(lambda match: f"\\u{ord(match.group()):04x}", text) if _SURROGATE.search(text) else text


class Preformatted:
    """A value whose indented JSON its maker writes itself (a tokenizer's vocab and merges, by the native core):
    ``write(newline, step)`` gives it at the depth ``newline`` (a newline and the current indentation) gives, as
    :func:`dumps_json` would write the value. Only :func:`dumps_json` with an indent takes it."""

    def __init__(self, write: Callable[[str, str], str]):
        self.write = write


class _NotPlain(Exception):
    """A value :func:`_indented_json` leaves to ``json.dumps``."""


_encode_str = json.encoder.encode_basestring
_SCALARS = {str: _encode_str, int: int.__repr__, bool: {True: "true", False: "false"}.__getitem__,
            type(None): lambda _: "null"}


def _indented_json(obj: Any, indent: int) -> str | None:
    """``json.dumps(obj, sort_keys=True, ensure_ascii=False, indent=indent)``'s text, built without its encoder
    (pure Python when indented: several generator steps per value, about 0.3 s for a 65,536-ID
    tokenizer.json): a container of scalars of one type, or a list of lists of str (a tokenizer's merges), is
    joined in one step. Only plain dicts with str keys, lists, tuples, str, int, bool and None; None for
    anything else (floats included), which ``json.dumps`` then writes, or refuses, itself."""
    if type(indent) is not int:
        return None
    parts: list[str] = []
    try:
        _append_json(obj, "\n", " " * indent, parts)
    except (_NotPlain, RecursionError):
        return None
    return "".join(parts)


def _append_json(obj: Any, newline: str, step: str, parts: list[str]) -> None:
    """Appends ``obj``'s indented JSON at the depth ``newline`` (a newline and the current indentation) gives."""
    kind = type(obj)
    if kind in _SCALARS:
        parts.append(_SCALARS[kind](obj))
        return
    if kind is Preformatted:
        parts.append(obj.write(newline, step))
        return
    if kind is dict:
        if set(map(type, obj)) - {str}:
            raise _NotPlain
        names = sorted(obj)  # json sorts the items: the same order, as keys are distinct
        opening, closing, values = "{", "}", list(map(obj.__getitem__, names))
        keys = [_encode_str(name) + ": " for name in names]
    elif kind is list or kind is tuple:
        opening, closing, keys, values = "[", "]", None, obj
    else:
        raise _NotPlain
    if not values:
        parts.append(opening + closing)
        return
    inner = newline + step
    separator = "," + inner
    encoded = _joined_values(values, inner, step)
    if encoded is not None:
        pieces = encoded if keys is None else map(str.__add__, keys, encoded)
        parts.append(opening + inner + separator.join(pieces) + newline + closing)
        return
    parts.append(opening)
    for number, value in enumerate(values):
        parts.append((separator if number else inner) + ("" if keys is None else keys[number]))
        _append_json(value, inner, step, parts)
    parts.append(newline + closing)


def _joined_values(values, inner: str, step: str) -> list[str] | None:
    """Each value's JSON where all are scalars of one type, or all non-empty lists of str, at depth ``inner``.

    Lists of one length, as a tokenizer's merges are, fill one template each: every string is encoded in one
    pass, with no join or type check per list."""
    kinds = set(map(type, values))
    if len(kinds) != 1:
        return None
    kind = kinds.pop()
    if kind in _SCALARS:
        return list(map(_SCALARS[kind], values))
    lengths = set(map(len, values)) if kind is list else {0}
    if 0 in lengths or set(map(type, itertools.chain.from_iterable(values))) != {str}:
        return None
    deeper = inner + step
    if len(lengths) == 1:
        width = lengths.pop()
        template = "[" + deeper + ("," + deeper).join(["%s"] * width) + inner + "]"
        encoded = iter(map(_encode_str, itertools.chain.from_iterable(values)))
        return list(map(template.__mod__, zip(*[encoded] * width)))
    opening, separator, closing = "[" + deeper, "," + deeper, inner + "]"
    return [opening + separator.join(map(_encode_str, value)) + closing for value in values]


@contextlib.contextmanager
@_name_output_in_write_errors
def atomic_dir(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield an empty staging directory; on success swap it in place of ``path``.

    The swap is two renames (old → backup, staging → target). If the process
    dies between them, :func:`recover_dir` (called first thing here) restores
    the backup, so a directory output is always either wholly old or wholly new.
    """
    target = Path(path)
    recover_dir(target)
    with _staging_errors(target):
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=_temporary_prefix(target), dir=target.parent))
    _apply_umask(staging, 0o777)
    try:
        yield staging
        backup = _backup_of(target)
        if target.exists():
            os.replace(target, backup)
        os.replace(staging, target)
        shutil.rmtree(backup, ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def link_file(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
    """Replace ``target`` by a hard link to ``source`` (a copy where no link can be made: another file
    system, or one without links), renamed into place, so ``target`` is wholly old or wholly new.

    Outputs are only ever replaced, never written in place, so two names of one file stay equal."""
    target = _file_target(target)
    temporary = os.path.join(os.path.dirname(target), f"{_temporary_prefix(target)}link")
    _remove(temporary)  # left by a killed writer whose process ID this one has
    try:
        try:
            os.link(source, temporary)
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
                raise
            shutil.copy2(source, temporary)
        os.replace(temporary, target)
    except BaseException:
        _remove(temporary)
        raise


def link_tree(source: str | os.PathLike[str], target: str | os.PathLike[str], files: list[str]) -> None:
    """Replace the directory ``target`` by one holding ``files`` (relative paths) of ``source``, each a hard
    link (or a copy, as :func:`link_file`), swapped in as :func:`atomic_dir` does."""
    with atomic_dir(target) as staging:
        for relative in files:
            link_file(Path(source) / relative, staging / relative)


def recover_dir(path: str | os.PathLike[str]) -> None:
    """Finish or undo a directory swap that a crash interrupted."""
    target = Path(path)
    backup = _backup_of(target)
    if backup.exists():
        if target.exists():
            shutil.rmtree(backup)
        else:
            os.replace(backup, target)


def remove_orphaned_temporaries(path: str | os.PathLike[str]) -> None:
    """Delete the temp files and staging dirs of ``path`` whose writer has died.

    Temporaries of other targets in the same directory, and those of a live
    process, are left alone. A temporary without a writer's pid (named before
    temporaries carried one) counts as orphaned.
    """
    target = Path(path)
    if not target.parent.is_dir():
        return
    prefix = f".{target.name}{_TMP_MARK}"
    for entry in target.parent.iterdir():
        if entry.name.startswith(prefix) and not _writer_alive(entry.name[len(prefix):]):
            if entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)


@contextlib.contextmanager
def _staging_errors(target: Path) -> Iterator[None]:
    """An output whose directory cannot take the temporary written first (``/proc/self/export``: no entry can be
    created in ``/proc/self``) is one line naming the output, not the temporary's name in a traceback. A full
    disk, a read-only file system and a denied permission keep their own lines."""
    try:
        yield
    except OSError as exc:
        if exc.errno in _WRITE_ERRNOS or exc.errno in (errno.EROFS, errno.EACCES) or exc.errno is None:
            raise
        raise StorageError(f"{target}: cannot be written: no file can be created in {target.parent} "
                           f"({os.strerror(exc.errno).lower()}); choose another place for this output") from None


def _temporary_prefix(target: str | os.PathLike[str]) -> str:
    return f".{os.path.basename(target)}{_TMP_MARK}{os.getpid()}-"


def _writer_alive(suffix: str) -> bool:
    """Whether the process named at the start of a temporary's ``{pid}-{random}`` suffix still runs."""
    match = re.match(r"(\d+)-", suffix)
    if match is None:
        return False
    try:
        os.kill(int(match.group(1)), 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:  # alive, owned by another user
        return True
    return True


def _apply_umask(path: str | os.PathLike[str], mode: int) -> None:
    """Give a temporary the mode a plain ``open``/``mkdir`` would have.

    ``mkstemp``/``mkdtemp`` create private (0600/0700) entries, and the rename
    would carry that onto the output, hiding artefacts from the rest of a team.
    """
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, mode & ~umask)


def _backup_of(target: Path) -> Path:
    return target.with_name(f".{target.name}.old")


def _fsync_file(path: str | os.PathLike[str]) -> None:
    if os.path.isfile(path):
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
