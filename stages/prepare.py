"""The ``prepare`` stage: raw files (the config's source globs) → ``prepare.output_dir``.

Its dependencies are the files the globs match *now* (a file set per glob, which the lock records as one digest),
so adding, removing or editing a raw file makes it stale, as does any key under ``data`` or ``prepare``.
It scans each glob's base directory, which the runner keeps every output out of.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence

import click

from pipeline.config import Config
from pipeline.config.schema import SAMPLING_KEYS, SourceConfig, schema_fields
from pipeline.data.file_table import SourceFiles, reader_code_files
from pipeline.data.sources import SourceFile, expand_sources, glob_base
from pipeline.data.steps import Chain, build_chain
from pipeline.engine import completion, locations
from pipeline.engine.file_sets import FileSet, Renamed
from pipeline.engine.runner import Stage
from stages.console import PROGRESS, say

# Version of the code that shapes this stage's outputs (sources, cleaning, prepare in pipeline/):
# bump it whenever the same raw files and settings would give other outputs, and the stage re-runs
# wherever it ran before. tests/test_code_versions.py pins the outputs of this version.
CODE_VERSION = 10  # 10: the max_chars cut keeps a last character's composition with a mark after it
# 9: a document longer than max_chars is cut as it is read (rejected/ keeps max_chars + 1 characters)
# 8: a corpus below 4 GB is cut into about 64 partitions (so parts) of 2 MiB or more, not 64 MB ones
# 7: document IDs name raw files from the config's directory (they named them from output_root)


def build(config: Config) -> Stage:
    files = expand_sources(config.data.sources, root=config.here("."))
    chain = build_chain(config.prepare, config.data.sources, root=config.here("."))
    code = sorted({*chain.code_files, *reader_code_files(files)})
    bases = {config.input(glob_base(source.glob)): f"data.sources[{index}].glob"
             for index, source in enumerate(config.data.sources)}
    output = config.out(config.prepare.output_dir)
    return Stage(
        name="prepare",
        deps=tuple(os.path.relpath(path, config.project_root) for path in code),
        file_sets=tuple(raw_files(config, index, source, files) for index, source in enumerate(config.data.sources)),
        outs=(output,),
        params=(*source_params(config), "prepare"),
        run=functools.partial(run, config, files, chain),
        code_version=CODE_VERSION,
        reusable=True,
        scratch=(output + completion.SUFFIX,),  # what a killed run finished, the first round a finished one kept
        scans=tuple(bases),
        keys={**bases, output: "prepare.output_dir"},
        listed=files.stamps(),
    )


def raw_files(config: Config, index: int, source: SourceConfig, files: SourceFiles) -> FileSet:
    """The files that source ``index`` matched, as the runner records them: one digest for the glob."""
    base = glob_base(source.glob)
    where = base if locations.is_url(base) else os.path.join(config.here("."), base)
    paths = files.of_source(index).paths
    return FileSet(source.glob, raw_dependency(where, config.project_root),
                   project_names(paths, where, config.project_root))


def project_names(paths: Sequence[str], base: str, project_root: str) -> Sequence[str]:
    """The raw files under the glob's ``base`` as the runner names them (:func:`raw_dependency`), without a second
    string per file where the names differ from the glob's strings by their common prefix alone: where the project
    root is not at or under the base and no file has a ``..`` below it (``/srv/data/a.txt`` named
    ``../../srv/data/a.txt``)."""
    if locations.is_url(base):
        return tuple(paths)
    old = locations.path_text(base).rstrip("/") + "/"
    if locations.inside(project_root, base) or not all(path.startswith(old) and not _steps_up(path[len(old):])
                                                       for path in paths):
        return tuple(raw_dependency(path, project_root) for path in paths)
    return Renamed(paths, old, os.path.relpath(base, project_root) + "/")


def _steps_up(relative: str) -> bool:
    """Whether a relative path has a ``..`` component."""
    return relative == ".." or relative.startswith("../") or relative.endswith("/..") or "/../" in relative


def raw_dependency(path: str, project_root: str | os.PathLike[str]) -> str:
    """A raw file as the runner names it, relative to the project root: the very string the glob gave when that is
    it already, not an equal second one (one string per raw file for the whole run, not two)."""
    if locations.is_url(path):
        return path
    relative = os.path.relpath(path, project_root)
    return path if relative == path else relative


def source_params(config: Config) -> tuple[str, ...]:
    """Every key of every source but those only training reads (``weight``): a new mixture re-runs train alone."""
    names = [f.name for f in schema_fields(SourceConfig) if f.name not in SAMPLING_KEYS]
    return tuple(f"data.sources[{index}].{name}" for index in range(len(config.data.sources)) for name in names)


def run(config: Config, files: Sequence[SourceFile], chain: Chain) -> None:
    from pipeline.data.prepare import prepare_corpus
    from pipeline.engine.executor import open_tasks

    if config.prepare.dedup_buckets is not None:
        say("prepare", f"prepare.dedup_buckets is deprecated: it sets the buckets of each exact_dedup step that "
                       f"sets none ({config.prepare.dedup_buckets}); write prepare.steps[i].exact_dedup.buckets")
    with open_tasks(config.executor, writes=[config.output_path(config.prepare.output_dir)]) as tasks:
        stats = prepare_corpus(files, config.prepare, config.output_path(config.prepare.output_dir), tasks=tasks,
                               progress=PROGRESS, names_root=config.names_root, code_version=CODE_VERSION,
                               notify=functools.partial(say, "prepare"), chain=chain,
                               source_names=[source_label(index, source)
                                             for index, source in enumerate(config.data.sources)])
    click.echo(stats.summary())


def source_label(index: int, source: SourceConfig) -> str:
    """A source as the stats name it: ``data.sources[1] prose (raw/*.txt)``, or without a name its glob alone."""
    label = f"data.sources[{index}]"
    return f"{label} {source.name} ({source.glob})" if source.name else f"{label} {source.glob}"
