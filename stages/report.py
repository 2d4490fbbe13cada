"""The optional ``report`` stage, and what ``lmprep report`` calls: the run's outputs → one HTML page.

Declared when ``report.output`` is set; it depends on every other declared stage's main output, so it
runs again (last) whenever one of them changes. ``lmprep report`` writes the page without running any
stage, from whatever outputs exist: a section whose inputs are missing says so.
"""

from __future__ import annotations

import datetime
import functools
import os
from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter

from pipeline.config import Config
from pipeline.engine import locations, storage
from pipeline.engine.runner import Stage
from pipeline.tokenizer import backend
from stages.console import say

CODE_VERSION = 1


@dataclass(frozen=True)
class Written:
    path: str
    size: int
    missing: tuple[str, ...]  # the titles of the sections that are incomplete


def build(config: Config) -> Stage:
    from stages.registry import STAGES, declared

    output = config.out(config.report.output)
    upstream = {spec.output_key: config.out(attrgetter(spec.output_key)(config)) for spec in STAGES
                if spec.name not in ("report", "export") and declared(spec, config)}
    return Stage(name="report", deps=tuple(upstream.values()), outs=(output,), params=("report", "data.sources"),
                 run=functools.partial(run, config), code_version=CODE_VERSION,
                 keys={output: "report.output", **{path: key for key, path in upstream.items()}})


def run(config: Config) -> None:
    written = write_report(config, config.output_path(config.report.output))
    say("report", describe(written))


def write_report(config: Config, path: str, origin: Callable[[str], str] | None = None) -> Written:
    """Gather the run's outputs and write the page to ``path`` (atomically; a URL in one request)."""
    from pipeline.report import gather, render  # numpy and the page's modules: only when a page is written
    from stages.registry import STAGES, declared

    data = gather(config, [spec.name for spec in STAGES if spec.name != "report" and declared(spec, config)],
                  origin=origin)
    generated = (f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC by lmprep {_version()} "
                 f"({backend.name()} tokenizer core)")
    project = os.path.basename(os.path.abspath(config.project_root))
    page = render(data, title=f"lmprep report: {project}", generated=generated)
    encoded = page.encode("utf-8")
    if not locations.is_url(path):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    storage.write_bytes(path, encoded)
    missing = tuple(data["titles"][name] for name, section in data["sections"].items() if section["missing"])
    return Written(os.fspath(path), len(encoded), missing)


def _version() -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version("lmprep")
    except importlib.metadata.PackageNotFoundError:
        return "(not installed)"


def describe(written: Written) -> str:
    incomplete = f"; incomplete: {', '.join(written.missing)}" if written.missing else ""
    return f"{written.size / 1024:,.0f} KiB → {written.path}{incomplete}"
