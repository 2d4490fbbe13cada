"""The exception hierarchy: one root, one subclass per domain.

Every message names the file, key, value or ID at fault and, where there is one,
the fix. The CLI prints ``str(error)`` on one line and exits with status 2, so
whatever a message quotes goes through :func:`shorten` (a text: another error's,
a JSON value) or :func:`describe` (a value read from a file or typed by a user).
"""

import json
import reprlib
import sys
from typing import Any


class PipelineError(Exception):
    """Root of every error a user can cause and fix. ``details`` says where to read more (a stage's log
    file, when a task failed); the CLI shows it after the message."""

    details: str | None = None


class ConfigError(PipelineError):
    """A config file, key or value is invalid."""


class DataError(PipelineError):
    """Raw or prepared data cannot be read (bad UTF-8, bad JSON line, missing column)."""


class StorageError(PipelineError):
    """A file or object store cannot be reached or read: a bad URL, a missing bucket, no credentials."""


class FileTooLargeError(StorageError):
    """A file is larger than lmprep reads of its kind (each kind's bound is documented in docs/faults.md)."""


class TokenizerError(PipelineError):
    """Bad input to a tokenizer: an invalid ID, undecodable bytes, a bad pattern."""


class InvalidUtf8Error(TokenizerError):
    """Token IDs decode to bytes that are not UTF-8. ``problem`` is the message without the advice,
    so that each interface (Python API, CLI) can name its own way out."""

    def __init__(self, problem: str, advice: str) -> None:
        super().__init__(f"{problem}; {advice}")
        self.problem = problem


class AlphabetTooLargeError(TokenizerError):
    """The char kind's training text has more characters than the vocabulary holds. ``problem`` is the
    message without the advice, which names the way out in each interface's terms (flags, config keys)."""

    def __init__(self, problem: str, advice: str) -> None:
        super().__init__(f"{problem}; {advice}")
        self.problem = problem


class TokenizerFormatError(TokenizerError):
    """A tokenizer file is malformed or uses a component lmprep does not implement."""


class ShardError(PipelineError):
    """A shard set is missing, incomplete, corrupt or inconsistent."""


class TokenizerMismatchError(PipelineError):
    """An artefact was made with another tokenizer than the one it is used with."""


class CheckpointError(PipelineError):
    """A checkpoint is missing, malformed or unsafe to load."""


class RunnerError(PipelineError):
    """The stage runner cannot proceed (another run holds the lock, a cycle, an unknown stage)."""


class TrainingError(PipelineError):
    """Training cannot start or go on: the model would not fit in memory, or the loss diverged."""


class ReportError(PipelineError):
    """A run's output that the report reads is corrupt: a JSON file that does not parse, or is not as its stage
    writes it."""


def json_error_reason(exc: ValueError | RecursionError) -> str:
    """Why ``json.loads`` refused a document, in a user's words: a syntax error and where, an integer
    over Python's digit limit, or nesting too deep (the last two's own texts are about the interpreter)."""
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    if isinstance(exc, json.JSONDecodeError):
        where = f"column {exc.colno}" if exc.lineno == 1 else f"line {exc.lineno} column {exc.colno}"
        return f"{exc.msg} at {where}"
    if "int_max_str_digits" in str(exc):
        return f"an integer of more than {sys.get_int_max_str_digits():,} digits"
    return shorten(str(exc))


def shorten(text: str, limit: int = 200) -> str:
    """``text`` (an exception's, a repr, a JSON value) for a one-line message: each line break, with the
    whitespace around it, becomes one space (other spaces stay: they may be part of the value), and a text
    longer than ``limit`` characters is cut to ``limit`` with "…" as its last character."""
    line = " ".join(part for part in (piece.strip() for piece in text.splitlines()) if part)
    return line if len(line) <= limit else line[: limit - 1] + "…"


def describe(value: Any) -> str:
    """``repr(value)`` for a message about a value read from a file or typed by a user, bounded while it
    is built: strings cut at 80 characters with "...", containers at a few items and 3 levels, an integer
    over 128 bits named by its size, so that no value can make an error slow to build or long to read."""
    return _BOUNDED_REPR.repr(value)


class _BoundedRepr(reprlib.Repr):
    def repr_int(self, x: int, level: int) -> str:
        return repr(x) if x.bit_length() <= 128 else f"<integer of {x.bit_length()} bits>"


_BOUNDED_REPR = _BoundedRepr()
_BOUNDED_REPR.maxstring = _BOUNDED_REPR.maxother = 80
_BOUNDED_REPR.maxlevel = 3


def counted(count: int, noun: str) -> str:
    """``1 shard``, ``2 shards``, ``1,290 special tokens``: a count and its noun, in the plural unless it is one."""
    return f"{count:,} {noun}" if count == 1 else f"{count:,} {noun}s"
