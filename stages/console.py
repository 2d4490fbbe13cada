"""How stages talk to the user: one-line notes on stderr; progress as bars on a terminal, as a line every
few seconds elsewhere (:mod:`pipeline.engine.progress` decides which)."""

from __future__ import annotations

import click

from pipeline.engine import stage_log

# Whether stages report their progress: always, since it goes to stderr in a form that suits where it goes.
PROGRESS = True


def say(stage: str, message: str) -> None:
    """A line on stderr, and in the stage's log."""
    click.echo(f"{stage}: {message}", err=True)
    stage_log.note(f"{stage}: {message}")
