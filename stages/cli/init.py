"""``lmprep init DIR --from PATH_OR_GLOB ...``: scaffold a project around the user's own files."""

from __future__ import annotations

from pathlib import Path

import click

from pipeline.data.scaffold import guess_sources, write_project
from pipeline.engine import locations


@click.command("init")
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("--from", "patterns", multiple=True, required=True, metavar="PATH_OR_GLOB",
              help="A folder, file or glob of .txt, .jsonl or .parquet files (optionally .gz) to train on "
                   "(repeatable).")
@click.option("--force", is_flag=True, help="Write over an existing config.yaml, .gitignore and Makefile.")
def init_command(directory: str, patterns: tuple[str, ...], force: bool) -> None:
    """Create a project in DIRECTORY: a commented config.yaml listing the sources (how to read each
    is guessed from a sample and shown in comments), a .gitignore for the derived data and a Makefile."""
    project = Path(directory)
    sources = guess_sources(list(patterns), project)
    project.mkdir(parents=True, exist_ok=True)
    for path in write_project(project, sources, force=force):
        click.echo(f"wrote {path}")
    for index, source in enumerate(sources):
        if source.doubt:
            glob = locations.openable(project / source.glob)
            click.echo(f"warning: data.sources[{index}] {glob}: separator {source.separator}, but {source.doubt}",
                       err=True)
    click.echo(f"check the guesses in {project / 'config.yaml'}, then run `make -C {project}` "
               f"(or `lmprep run --config {project / 'config.yaml'}`)")
