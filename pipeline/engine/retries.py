"""Deadlines and retries of the requests lmprep sends to object stores (``s3://`` and other fsspec URLs).

Every request has a deadline, and a transient failure is retried a bounded number of times, so that a
store that freezes, throttles or drops a connection never hangs a run, and a passing hiccup does not
fail one:

- **deadline**: ``storage.timeout`` seconds (default 15) to connect, and for each read of the answer
  once connected (s3fs's ``connect_timeout`` and ``read_timeout``, which botocore applies; other
  fsspec backends keep their own);
- **retries**: after a transient failure, up to ``storage.retries`` more attempts (default 3), the
  k-th after ``storage.backoff × 2^(k-1)`` seconds (default 0.5) times a jitter factor in [0.5, 1)
  fixed by a hash of the URL and k: workers throttled together spread out, and the schedule is the
  same on every run. s3fs's and botocore's own retries are turned off, so these are the only ones;
- **transient**: an answer with HTTP status 429, 500, 502, 503 or 504, or with the error code
  ``SlowDown``, ``Throttling``, ``ThrottlingException``, ``RequestLimitExceeded``, ``RequestTimeout``,
  ``InternalError`` or ``ServiceUnavailable``; a connection refused, reset or closed before the answer
  ended; a connect or read timeout. Anything else (access denied, no such key or bucket, missing
  credentials, a malformed request) fails at once.

So a request fails, in one line naming its URL, after at most ``(retries + 1) × timeout`` seconds of
waiting plus the back-off (under ``backoff × 2^retries``): 63.5 s with the defaults. The retries a
process made are counted by kind (:func:`retried`); tasks return their worker's counts to the driver
(:mod:`pipeline.engine.executor`), and the command reports them in one line.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol, TypeVar

from pipeline.errors import StorageError

_R = TypeVar("_R")

TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})
TRANSIENT_CODES = frozenset({"SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded", "RequestTimeout",
                             "InternalError", "ServiceUnavailable"})
# exception classes (by name, anywhere in the class's MRO; botocore's, aiohttp's and Python's) → what they mean
TRANSIENT_EXCEPTIONS = {
    "ConnectTimeoutError": "connect timeout",
    "ReadTimeoutError": "read timeout",
    "ConnectionClosedError": "connection closed",
    "EndpointConnectionError": "connection failed",
    "ResponseStreamingError": "answer cut short",
    "ClientPayloadError": "answer cut short",
    "ServerDisconnectedError": "connection closed",
    "ConnectionRefusedError": "connection refused",
    "ConnectionResetError": "connection reset",
    "ConnectionAbortedError": "connection aborted",
    "BrokenPipeError": "connection reset",
    "TimeoutError": "timeout",
}
S3_PROTOCOLS = ("s3", "s3a")


class DeadlineSettings(Protocol):
    """What this module reads of its settings (the ``storage`` section of the config)."""

    timeout: float
    retries: int
    backoff: float


@dataclasses.dataclass(frozen=True)
class Deadlines:
    """The settings in force (a task carries its driver's to its worker)."""

    timeout: float = 15.0
    retries: int = 3
    backoff: float = 0.5


_current = Deadlines()
_retried: Counter[str] = Counter()  # kind of transient failure → retries this process made after one


@contextlib.contextmanager
def using(settings: DeadlineSettings) -> Iterator[None]:
    """Send the requests of the block under ``settings``: a command under its config's ``storage`` section, a task
    under its driver's. The settings before it are back when the block ends, so nothing outlives the command or
    task that chose them. A process setting, not a context variable: the threads that fetch many objects at once
    (:func:`pipeline.engine.storage.read_many`) keep to the same deadlines."""
    global _current
    before = _current
    _current = Deadlines(timeout=float(settings.timeout), retries=int(settings.retries),
                         backoff=float(settings.backoff))
    try:
        yield
    finally:
        _current = before


def current() -> Deadlines:
    return _current


def filesystem_options(protocol: str) -> dict[str, Any]:
    """The options that give an fsspec file system of ``protocol`` the deadlines, and botocore no retries."""
    if protocol not in S3_PROTOCOLS:
        return {}
    timeout = _current.timeout
    return {"config_kwargs": {"connect_timeout": timeout, "read_timeout": timeout,
                              "retries": {"total_max_attempts": 1}}}


def without_own_retries(fs: Any, protocol: str) -> Any:
    """``fs`` making one attempt per request: s3fs retries some failures itself (a class attribute, 5 attempts,
    around botocore's own), which would multiply the deadline and go uncounted."""
    if protocol in S3_PROTOCOLS:
        fs.retries = 1
    return fs


def call(location: str | os.PathLike[str], function: Callable[..., _R], *args: Any, **kwargs: Any) -> _R:
    """``function(*args, **kwargs)``, attempted again after a transient failure (see the module's docstring).

    Raises the permanent failure as it is, or a StorageError naming ``location`` once the attempts are spent.
    """
    settings = _current
    for attempt in range(settings.retries + 1):
        try:
            return function(*args, **kwargs)
        except Exception as exc:
            kind = transient_kind(exc)
            if kind is None:
                raise
            if attempt == settings.retries:
                raise StorageError(
                    f"{os.fspath(location)}: {kind} on each of {attempt + 1} attempts (storage.timeout "
                    f"{settings.timeout:g} s, storage.retries {settings.retries}); the store is down, unreachable "
                    "or throttling, try again later") from None
            _retried[kind] += 1
            time.sleep(delay(location, attempt + 1, settings.backoff))
    raise AssertionError("unreachable")


def delay(location: str | os.PathLike[str], attempt: int, backoff: float) -> float:
    """Seconds to wait before ``attempt`` (1 for the first retry): exponential, with a jitter fixed by the URL.

    >>> delay("s3://b/k", 1, 0.5) == delay("s3://b/k", 1, 0.5) and 0.25 <= delay("s3://b/k", 1, 0.5) < 0.5
    True
    """
    digest = hashlib.sha256(f"{os.fspath(location)}\0{attempt}".encode()).digest()
    jitter = 0.5 + 0.5 * int.from_bytes(digest[:8], "big") / 2**64
    return backoff * 2 ** (attempt - 1) * jitter


def transient_kind(exc: BaseException) -> str | None:
    """What transient failure ``exc`` is (``SlowDown (HTTP 503)``, ``read timeout``), or None for a permanent one.

    The exception's causes count too: s3fs raises an ``OSError`` whose cause is botocore's error.
    """
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        kind = _answer_kind(exc) or _exception_kind(exc)
        if kind is not None:
            return kind
        exc = exc.__cause__  # type: ignore[assignment]
    return None


def _answer_kind(exc: BaseException) -> str | None:
    response = getattr(exc, "response", None)
    if not isinstance(response, Mapping):
        return None
    code = (response.get("Error") or {}).get("Code")
    status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
    if code not in TRANSIENT_CODES and status not in TRANSIENT_STATUSES:
        return None
    if not status:
        return str(code)
    return f"HTTP {status}" if code in (None, "", str(status)) else f"{code} (HTTP {status})"  # HEAD: no body, no code


def _exception_kind(exc: BaseException) -> str | None:
    for cls in type(exc).__mro__:
        if cls.__name__ in TRANSIENT_EXCEPTIONS:
            return TRANSIENT_EXCEPTIONS[cls.__name__]
    return None


def retried() -> Counter[str]:
    """The retries this process made so far, by kind of failure."""
    return Counter(_retried)


def add_retried(counts: Mapping[str, int]) -> None:
    """Count retries made elsewhere (a task's worker) as this process's."""
    _retried.update(counts)


def since(before: Mapping[str, int]) -> dict[str, int]:
    """The retries made since :func:`retried` returned ``before``."""
    return {kind: count - before.get(kind, 0) for kind, count in _retried.items() if count > before.get(kind, 0)}


def summary(counts: Mapping[str, int]) -> str:
    """``3 storage requests retried after transient failures (SlowDown (HTTP 503) ×2, read timeout ×1)``."""
    total = sum(counts.values())
    ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    kinds = ", ".join(f"{kind} ×{count}" for kind, count in ordered)
    return f"{total} storage request{'s' if total != 1 else ''} retried after transient failures ({kinds})"


class RetryingReader(io.RawIOBase):
    """A remote file's stream whose reads are retried: a failed read leaves the file's position where it
    was (fsspec buffered files move it only once bytes arrive), so the same read is simply made again."""

    def __init__(self, location: str, file: Any):
        super().__init__()
        self._location, self._file = location, file

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return bool(self._file.seekable())

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return int(self._file.seek(offset, whence))

    def tell(self) -> int:
        return int(self._file.tell())

    def readinto(self, buffer: Any) -> int:
        data = call(self._location, self._file.read, len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            self._file.close()
        super().close()
