"""``lmprep report``: one HTML page of the run, from the outputs that exist (no stage runs)."""

from __future__ import annotations

import click

from pipeline.config import Config, Origins
from stages.cli.options import config_options
from stages.report import describe, write_report

DEFAULT_OUT = "report.html"


@click.command(name="report")
@click.option("--out", "out", type=click.Path(dir_okay=False),
              help=f"Where to write the page [default: report.output, else {DEFAULT_OUT}].")
@config_options(with_origins=True)
def report_command(out: str | None, config: Config, origins: Origins) -> None:
    """Write one self-contained HTML page of the run: overview, sources, what was dropped (a sample to read),
    documents and tokens, training. It reads the outputs as they are and runs no stage; a section whose
    outputs are missing says which and why."""
    if out is None:
        out = config.output_path(config.report.output) if config.report.output else DEFAULT_OUT
    click.echo(f"report: {describe(write_report(config, out, origins.of))}")
