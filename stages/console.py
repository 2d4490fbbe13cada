"""How stages talk to the user: one-line notes on stderr; progress as bars on a terminal, as a line every
few seconds elsewhere (:mod:`pipeline.engine.progress` decides which)."""

from __future__ import annotations

import click

# Whether stages report their progress: always, since it goes to stderr in a form that suits where it goes.
PROGRESS = True


def say(stage: str, message: str) -> None:
    click.echo(f"{stage}: {message}", err=True)
