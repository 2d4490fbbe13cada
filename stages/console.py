"""How stages talk to the user: one-line notes on stderr, progress bars only on a terminal."""

from __future__ import annotations

import sys

import click


def say(stage: str, message: str) -> None:
    click.echo(f"{stage}: {message}", err=True)


def show_progress() -> bool:
    """Progress bars redraw with carriage returns; in logs and pipes they are noise."""
    return sys.stderr.isatty()
