"""The log file of a stage's run, ``{state_dir}/logs/<stage>.log``, written by the driver as the stage runs.

It holds a header (when, the config, why the stage ran), the executor and its workers, one line per
finished task (its partition, worker, seconds, a summary of its result and the storage requests it
retried), the full traceback of each failed task as its worker saw it, the stage's own lines (with the
seconds of its phases where it times them, :func:`timed`) and how the run ended. Each line is flushed as
it is written, so ``tail -f`` follows a run; the file is replaced when the stage next runs, so it holds
one run and its size is that run's. A run that was killed ends without its last line. Failing to write
the log never fails the stage: it is said once, and the stage goes on without it.
"""

from __future__ import annotations

import contextlib
import os
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TextIO

from pipeline.engine import locations
from pipeline.errors import PipelineError, counted

LOGS_DIR = "logs"  # under the state dir
TRACEBACK_ATTRIBUTE = "task_traceback"  # the attribute of a failed task's error that holds its worker's traceback


class StageLog:
    """The lines of one stage's run, written to ``path`` (replaced); a log without a path (:data:`NO_LOG`) takes
    them and writes nothing."""

    def __init__(self, path: Path | None = None, *, warn: Callable[[str], None] = lambda message: None):
        self.path, self._warn = path, warn
        self._file: TextIO | None = None
        self.kept = path is not None  # every line written so far (False once a write failed)
        self.tasks = self.failed = self.retried = 0
        self._started = time.monotonic()
        if path is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                self._file = open(path, "w", encoding="utf-8", errors="backslashreplace")  # noqa: SIM115 (closed by close)
            except OSError as exc:
                self._give_up(exc)

    def write(self, line: str) -> None:
        if self._file is None:
            return
        try:
            self._file.write(line.rstrip("\n") + "\n")
            self._file.flush()
        except OSError as exc:
            self._give_up(exc)

    def task_done(self, label: str, *, worker: str, seconds: float, summary: str, retried: int) -> None:
        self.tasks += 1
        self.retried += retried
        details = [summary] if summary else []
        details += [f"{counted(retried, 'storage request')} retried"] if retried else []
        self.write(f"task {label}: done on {worker} in {seconds:.2f} s" + "".join(f"; {d}" for d in details))

    def task_failed(self, label: str, failure: BaseException) -> None:
        """A failed task's error and, indented, the traceback its worker formatted."""
        self.failed += 1
        self.write(f"task {label}: FAILED: {_one_line(failure)}")
        for line in getattr(failure, TRACEBACK_ATTRIBUTE, "").rstrip("\n").splitlines():
            self.write(f"    {line}")

    def close(self, ending: str) -> None:
        counts = (f"{counted(self.tasks, 'task')} done, {self.failed:,} failed, "
                  f"{counted(self.retried, 'storage request')} retried")
        self.write(f"{ending} after {time.monotonic() - self._started:.1f} s ({counts})")
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None

    def _give_up(self, exc: OSError) -> None:
        self._file, self.kept = None, False
        reason = os.strerror(exc.errno).lower() if exc.errno else str(exc)
        self._warn(f"warning: could not write the stage log {self.path} ({reason}); the stage goes on without it")


NO_LOG = StageLog()
_current = NO_LOG


def current() -> StageLog:
    """The log of the stage running now, or :data:`NO_LOG` outside :func:`recording`."""
    return _current


def note(line: str) -> None:
    """A line of the stage's own (what it says on the console) in its log."""
    _current.write(line)


@contextlib.contextmanager
def timed(phase: str) -> Iterator[None]:
    """A line ``phase: {phase} in W s (C s CPU in the driver)`` in the stage's log when the block ends without an
    error: where a stage's time goes, its tasks' own seconds being on their lines."""
    start, start_cpu = time.perf_counter(), time.process_time()
    yield
    note(f"phase: {phase} in {time.perf_counter() - start:.2f} s ({time.process_time() - start_cpu:.2f} s CPU in the "
         "driver)")


def log_path(state_dir: str | os.PathLike[str], stage: str) -> Path:
    return Path(state_dir) / LOGS_DIR / f"{stage}.log"


@contextlib.contextmanager
def recording(path: Path, *, stage: str, header: Mapping[str, str],
              warn: Callable[[str], None]) -> Iterator[StageLog]:
    """Within this block, the stage's tasks and lines go to the log at ``path`` (replaced now).

    A failure that leaves the block is logged; when a task failed, the error (a PipelineError) names the
    log in its ``details``, which the CLI shows after its one line.
    """
    global _current
    log = StageLog(path, warn=warn)
    log.write(f"# lmprep: stage '{stage}', started {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
    for key, value in header.items():
        log.write(f"{key}: {value}")
    _current = log
    try:
        yield log
    except KeyboardInterrupt:
        log.close("interrupted")
        raise
    except BaseException as exc:
        log.write(f"error: {_one_line(exc)}")
        log.close("failed")
        if log.failed and log.kept and isinstance(exc, PipelineError):
            exc.details = f"details in {locations.openable(log.path)}"
        raise
    else:
        log.close("finished")
    finally:
        _current = NO_LOG




def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def with_traceback(failure: BaseException, raised: BaseException) -> BaseException:
    """``failure`` carrying the formatted traceback of ``raised`` (chain included), as text that pickles."""
    setattr(failure, TRACEBACK_ATTRIBUTE, "".join(traceback.format_exception(raised)))
    return failure


def describe_result(value: Any) -> str:
    """A task result's summary for its log line: its own ``task_summary()`` (the native chunk counter's: its
    entries), a mapping's count of entries (the tokenizer's chunk counts on the Python path), or nothing."""
    if hasattr(value, "task_summary"):
        return value.task_summary()
    if isinstance(value, Mapping):
        return f"{len(value):,} entries"
    return ""
