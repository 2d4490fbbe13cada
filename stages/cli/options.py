"""Options shared by every command that reads the config: ``--config PATH`` and ``--set KEY=VALUE``."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

import click
from click.core import ParameterSource

from pipeline.config import Config, Origins, load_config_with_origins, parse_config

DEFAULT_CONFIG = "configs/default.yaml"
_CONFIG_FILE = "lmprep.config_file"

Command = Callable[..., Any]


def config_options(command: Command | None = None, *, optional: bool = False, with_origins: bool = False) -> Any:
    """Add ``--config``/``--set`` to a click command and pass it the loaded ``config: Config``.

    Use it bare (``@config_options``) or called (``@config_options(optional=True)``). With
    ``optional``, a missing *default* config file means the built-in defaults, so the command also
    works outside a project directory; a ``--config`` (or ``LMPREP_CONFIG``) naming a missing file
    is still an error, and so is ``--set`` without a config file to override. With ``with_origins``
    the command also gets ``origins: Origins``, where each value came from.
    """
    if command is None:
        return functools.partial(config_options, optional=optional, with_origins=with_origins)

    if_missing = " If the default one is missing, the built-in defaults apply." if optional else ""

    @click.option("--config", "config_path", default=DEFAULT_CONFIG, show_default=True, metavar="PATH",
                  envvar="LMPREP_CONFIG", help="YAML config file." + if_missing)
    @click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
                  help="Override a config key, e.g. --set train.steps=500 (repeatable).")
    @functools.wraps(command)
    def wrapper(*args: Any, config_path: str, overrides: tuple[str, ...], **kwargs: Any) -> Any:
        if optional and _default_config_missing(config_path, overrides):
            config, origins = builtin_defaults(), Origins("built-in defaults")
        else:
            config, origins = load_config_with_origins(config_path, overrides)
            click.get_current_context().meta[_CONFIG_FILE] = config_path
        if with_origins:
            kwargs["origins"] = origins
        return command(*args, config=config, **kwargs)

    return wrapper


def config_file() -> str | None:
    """The config file the current command read; None when it runs on the built-in defaults."""
    return click.get_current_context().meta.get(_CONFIG_FILE)


def builtin_defaults() -> Config:
    """The config an empty config file gives."""
    return parse_config({}, origin="built-in defaults")


def _default_config_missing(config_path: str, overrides: tuple[str, ...]) -> bool:
    source = click.get_current_context().get_parameter_source("config_path")
    return source is ParameterSource.DEFAULT and not overrides and not os.path.exists(config_path)
