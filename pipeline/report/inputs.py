"""Reading a run's outputs for the report: JSON files within a bound, each missing file as a reason.

A file that is not there is not an error: the section that needs it says which file is missing and which
stage writes it. A file that is there but does not parse is: :class:`~pipeline.errors.ReportError` names it, on
one line, since a page built around it would hide the damage.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.engine import locations, storage
from pipeline.errors import PipelineError, ReportError, json_error_reason

MAX_JSON_BYTES = 64 << 20  # stats.json, lock.json, a manifest: far smaller on any corpus
MAX_LOG_BYTES = 16 << 20  # a stage log is read up to this much (its first lines and its last)
MAX_METRICS_BYTES = 256 << 20  # metrics.jsonl: one short line per training step


class Missing(Exception):  # noqa: N818 (not an error: a section's reason to be absent)
    """An input the report reads is not there: ``str()`` says which and what writes it."""


def output_location(directory: str) -> Path | str:
    """Where an output directory's committed files are read: the directory as given locally (messages name it as
    the user wrote it), a URL's committed attempt."""
    if not locations.is_url(directory):
        return directory
    try:
        return storage.committed(directory)
    except PipelineError as exc:
        raise Missing(str(exc)) from None


def exists(location: str | os.PathLike[str]) -> bool:
    try:
        return storage.exists(location)
    except PipelineError:
        return False


def read_json(location: str | os.PathLike[str], what: str, writer: str,
              shape: dict[str, type] | None = None) -> Any:
    """The parsed JSON of ``location``; :class:`Missing` saying that ``writer`` writes it when it is absent. With
    ``shape``, the document must be an object whose keys ``shape`` names hold values of those types."""
    if not exists(location):
        raise Missing(f"{os.fspath(location)} is missing ({what}: {writer} writes it)")
    data = storage.read_bounded(location, MAX_JSON_BYTES, what=what)
    document = parse_json(location, data, what, writer)
    if shape is not None:
        check_shape(location, document, what, shape, writer)
    return document


def check_shape(location: str | os.PathLike[str], document: Any, what: str, shape: dict[str, type],
                writer: str) -> None:
    if not isinstance(document, dict):
        raise ReportError(f"{os.fspath(location)}: the {what} is not a JSON object; {_again(writer)}")
    for key, kind in shape.items():
        if not isinstance(document.get(key), kind):
            raise ReportError(f"{os.fspath(location)}: the {what} has no {kind.__name__} {key!r}; {_again(writer)}")


def parse_json(location: str | os.PathLike[str], data: bytes, what: str, writer: str) -> Any:
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise ReportError(f"{os.fspath(location)}: the {what} is not valid JSON ({json_error_reason(exc)}); "
                          f"{_again(writer)}") from None


def _again(writer: str) -> str:
    """The advice for a file its writer would not have written: ``writer`` (``the stats stage``) again."""
    return f"{writer} writes it: run that again (lmprep run --force)"


def read_jsonl(location: str | os.PathLike[str], what: str, writer: str) -> list[Any]:
    """Each line of a JSON-lines file, parsed; a line that does not parse is a ReportError naming the line."""
    if not exists(location):
        raise Missing(f"{os.fspath(location)} is missing ({what}: {writer} writes it)")
    data = storage.read_bounded(location, MAX_METRICS_BYTES, what=what)
    records = []
    for number, line in enumerate(data.splitlines(), 1):
        if line.strip():
            record = parse_json(f"{os.fspath(location)} line {number}", line, what, writer)
            check_shape(f"{os.fspath(location)} line {number}", record, what, {"step": int}, writer)
            records.append(record)
    return records


# -- stage logs ------------------------------------------------------------------------------------------

_TASK = re.compile(r"^task (?P<label>.*): done on (?P<worker>.*) in (?P<seconds>[0-9.]+) s")
_END = re.compile(r"^(?P<ending>.+) after (?P<seconds>[0-9.]+) s \((?P<counts>.*)\)$")
_HEADER = re.compile(r"^(?P<key>[A-Za-z_. -]+): (?P<value>.*)$")


@dataclass
class StageLog:
    """What the report shows of one stage's log: its header, its tasks' total time, how it ended."""

    stage: str
    path: str
    modified: float
    header: dict[str, str] = field(default_factory=dict)
    tasks: int = 0
    task_seconds: float = 0.0
    workers: set[str] = field(default_factory=set)
    ending: str | None = None
    wall_seconds: float | None = None
    counts: str | None = None
    failed: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "path": self.path, "modified": self.modified, "header": self.header,
                "tasks": self.tasks, "task_seconds": round(self.task_seconds, 3), "workers": len(self.workers),
                "ending": self.ending, "wall_seconds": self.wall_seconds, "counts": self.counts, "failed": self.failed}


def read_stage_log(path: Path, stage: str) -> StageLog:
    """The figures of ``path`` (``{state_dir}/logs/<stage>.log``): read within :data:`MAX_LOG_BYTES`, so a huge log
    costs that much and no more."""
    if not path.is_file():
        raise Missing(f"{path} is missing (the {stage} stage writes it when it runs)")
    log = StageLog(stage=stage, path=str(path), modified=path.stat().st_mtime)
    in_header = True
    for line in _lines(path):
        if match := _TASK.match(line):
            in_header = False
            log.tasks += 1
            log.task_seconds += float(match["seconds"])
            log.workers.add(match["worker"])
        elif line.startswith("task ") and ": FAILED" in line:
            log.failed += 1
        elif match := _END.match(line):
            log.ending, log.wall_seconds, log.counts = match["ending"], float(match["seconds"]), match["counts"]
        elif line.startswith(f"{stage}: "):  # the stage's own lines end the header
            in_header = False
        elif in_header and (match := _HEADER.match(line)) and len(log.header) < 32:
            log.header[match["key"].strip()] = match["value"][:300]
    return log


def _lines(path: Path) -> Iterator[str]:
    with open(path, "rb") as file:
        data = file.read(MAX_LOG_BYTES + 1)
    if len(data) > MAX_LOG_BYTES:  # keep the head and the last lines, where the ending is
        with open(path, "rb") as file:
            file.seek(-(1 << 16), os.SEEK_END)
            data = data[: MAX_LOG_BYTES - (1 << 16)] + b"\n" + file.read()
    yield from data.decode("utf-8", errors="replace").splitlines()
