"""Options shared by every command that reads the config: ``--config PATH`` and ``--set KEY=VALUE``."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click

from pipeline.config import load_config

DEFAULT_CONFIG = "configs/default.yaml"


def config_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--config``/``--set`` to a click command and pass it the loaded ``config: Config``."""

    @click.option("--config", "config_path", default=DEFAULT_CONFIG, show_default=True, metavar="PATH",
                  envvar="LMPREP_CONFIG", help="YAML config file.")
    @click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
                  help="Override a config key, e.g. --set train.steps=500 (repeatable).")
    @functools.wraps(command)
    def wrapper(*args: Any, config_path: str, overrides: tuple[str, ...], **kwargs: Any) -> Any:
        return command(*args, config=load_config(config_path, overrides), **kwargs)

    return wrapper
