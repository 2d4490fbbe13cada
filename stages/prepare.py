"""The ``prepare`` stage: raw files (the config's source globs) → ``prepare.output_dir``.

Its dependencies are the files the globs match *now*, so adding, removing or
editing a raw file makes it stale, as does any key under ``data`` or ``prepare``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence

import click

from pipeline.config import Config
from pipeline.prepare import prepare_corpus
from pipeline.runner import Stage
from pipeline.sources import SourceFile, expand_sources
from stages.console import show_progress


# Version of the code that shapes this stage's outputs (sources, cleaning, prepare in pipeline/):
# bump it whenever the same raw files and settings would give other outputs, and the stage re-runs
# wherever it ran before. tests/test_code_versions.py pins the outputs of this version.
CODE_VERSION = 1

def build(config: Config) -> Stage:
    root = config.here(".")
    files = expand_sources(config.data.sources, root=root)
    return Stage(
        name="prepare",
        deps=tuple(os.path.relpath(file.path, root) for file in files),
        outs=(config.out(config.prepare.output_dir),),
        params=("data", "prepare"),
        run=functools.partial(run, config, files),
        code_version=CODE_VERSION,
    )


def run(config: Config, files: Sequence[SourceFile]) -> None:
    stats = prepare_corpus(files, config.prepare, config.output_path(config.prepare.output_dir),
                           progress=show_progress())
    click.echo(stats.summary())
