"""Progress of a long step: a bar on a terminal, and elsewhere (a log file, CI, Slurm) a line every few seconds.

A bar redraws itself with carriage returns, which a log keeps as noise; so where stderr is not a
terminal, :class:`Progress` writes one plain line every ``LMPREP_PROGRESS_SECONDS`` seconds (10 by
default) and one when the step ends, if it wrote any::

    encode: 12/39 parts (31%), 310.2 MB, 25.1 MB/s, ETA 0:00:28
    train: 1,200/3,000 steps (40%), 12.3 steps/s, ETA 0:02:26, loss 2.345, tok/s 52,000

A step that ends within the first interval writes nothing. Progress never changes an output.
"""

from __future__ import annotations

import datetime
import os
import sys
import time
from typing import Any, TextIO

from pipeline.errors import ConfigError

SECONDS_VARIABLE = "LMPREP_PROGRESS_SECONDS"
DEFAULT_SECONDS = 10.0


class Progress:
    """Counts done of ``total`` (``None``: unknown) in ``unit`` (a plural: "parts"); optional bytes and named
    values (loss, tok/s). A context manager; a step that fails writes no last line."""

    def __init__(self, desc: str, *, total: float | None, unit: str, enabled: bool, initial: float = 0,
                 leave: bool = True, stream: TextIO | None = None):
        self._desc, self._total, self._unit, self._initial = desc, total, unit, initial
        self._done, self._bytes, self._values = initial, 0, {}
        self._stream = stream or sys.stderr
        self._bar = None
        self._lines, self._written = 0, initial  # lines written, and the count the last one showed
        self._started = self._last = time.monotonic()
        self._every = line_seconds() if enabled else 0.0
        if enabled and self._stream.isatty():
            from tqdm import tqdm

            self._bar = tqdm(total=total, initial=initial, desc=desc, unit=unit, leave=leave, file=self._stream)
        self._enabled = enabled

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close(finished=exc_info[0] is None)

    def update(self, n: float = 1, *, nbytes: int = 0) -> None:
        self._done += n
        self._bytes += nbytes
        if self._bar is not None:
            self._bar.update(n)
        elif self._enabled and time.monotonic() - self._last >= self._every:
            self._write()

    def note(self, **values: Any) -> None:
        """Values shown after the counts (``loss=2.3``): on the bar, or on the next line."""
        self._values = values
        if self._bar is not None:
            self._bar.set_postfix(values, refresh=False)

    def close(self, *, finished: bool = True) -> None:
        if self._bar is not None:
            self._bar.close()
        elif self._lines and finished and self._done != self._written:
            self._write()
        self._enabled = False

    def line(self) -> str:
        """The line as it would be written now."""
        elapsed = max(time.monotonic() - self._started, 1e-9)
        rate = (self._done - self._initial) / elapsed
        parts = [f"{self._desc}: {_count(self._done)}"]
        if self._total:
            parts[0] += f"/{_count(self._total)} {self._unit} ({100 * self._done / self._total:.0f}%)"
        else:
            parts[0] += f" {self._unit}"
        if self._bytes:
            parts += [_size(self._bytes), f"{_size(self._bytes / elapsed)}/s"]
        parts.append(f"{rate:,.1f} {self._unit}/s")
        if self._total and rate > 0:
            left = max(self._total - self._done, 0) / rate
            parts.append(f"ETA {datetime.timedelta(seconds=round(left))}")
        parts += [f"{name.replace('_', '/')} {value}" for name, value in self._values.items()]
        return ", ".join(parts)

    def _write(self) -> None:
        self._last, self._written = time.monotonic(), self._done
        self._lines += 1
        print(self.line(), file=self._stream, flush=True)


def line_seconds() -> float:
    """Seconds between two progress lines: ``LMPREP_PROGRESS_SECONDS``, else 10."""
    value = os.environ.get(SECONDS_VARIABLE)
    if value is None:
        return DEFAULT_SECONDS
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:
        raise ConfigError(f"{SECONDS_VARIABLE}={value!r}: expected a number of seconds, 0 or more")
    return seconds


def _size(size: float) -> str:
    return f"{size / 1e6:,.1f} MB" if size >= 100_000 else f"{size / 1e3:,.1f} kB"


def _count(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.1f}"
