"""The ``prepare`` stage: raw files (the config's source globs) → ``prepare.output_dir``.

Its dependencies are the files the globs match *now*, so adding, removing or
editing a raw file makes it stale, as does any key under ``data`` or ``prepare``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import click

from pipeline.config import Config
from pipeline.executor import open_tasks
from pipeline.prepare import prepare_corpus
from pipeline.runner import Stage
from pipeline.sources import SourceFile, expand_sources
from stages.console import show_progress


def build(config: Config) -> Stage:
    files = expand_sources(config.data.sources)
    return Stage(
        name="prepare",
        deps=tuple(str(file.path) for file in files),
        outs=(config.prepare.output_dir,),
        params=("data", "prepare"),
        run=functools.partial(run, config, files),
    )


def run(config: Config, files: Sequence[SourceFile]) -> None:
    with open_tasks(config.executor) as tasks:
        stats = prepare_corpus(files, config.prepare, config.prepare.output_dir, tasks=tasks, progress=show_progress())
    click.echo(stats.summary())
