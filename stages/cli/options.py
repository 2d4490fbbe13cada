"""Options shared by every command that reads the config: ``--config PATH`` and ``--set KEY=VALUE``."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

import click

from pipeline.config import Config, Origins, load_config_with_origins, parse_config
from pipeline.engine import retries
from pipeline.errors import ConfigError

CONFIG_NAMES = ("config.yaml", os.path.join("configs", "default.yaml"))  # what `lmprep init` writes; this repository
CEILING_ENV = "LMPREP_CEILING_DIRECTORIES"  # as git's GIT_CEILING_DIRECTORIES: parents the search never goes up into
_CONFIG_FILE = "lmprep.config_file"

Command = Callable[..., Any]


def config_options(command: Command | None = None, *, optional: bool = False, with_origins: bool = False) -> Any:
    """Add ``--config``/``--set`` to a click command and pass it the loaded ``config: Config``.

    Without ``--config`` (or ``LMPREP_CONFIG``) the project's config is found as DVC finds ``dvc.yaml``:
    the first of :data:`CONFIG_NAMES` in the current directory, else in the nearest parent that has one
    (up to a mount point); a file found in a parent is named on stderr once it loads.
    Use it bare (``@config_options``) or called (``@config_options(optional=True)``). With
    ``optional``, no config found means the built-in defaults, so the command also works outside a
    project; a ``--config`` naming a missing file is still an error, and so is ``--set`` with no config
    file to override. With ``with_origins`` the command also gets ``origins: Origins``, where each
    value came from. The config's ``storage`` deadlines apply to the command's requests to object stores,
    and the retries they needed are counted in one line on stderr once it succeeds.
    """
    if command is None:
        return functools.partial(config_options, optional=optional, with_origins=with_origins)

    if_missing = " If none is found, the built-in defaults apply." if optional else ""

    @click.option("--config", "config_path", default=None, metavar="PATH", envvar="LMPREP_CONFIG",
                  help=f"YAML config file [default: {' or '.join(CONFIG_NAMES)} in the current directory or the "
                       f"nearest parent that has one].{if_missing}")
    @click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
                  help="Override a config key, e.g. --set train.steps=500 (repeatable).")
    @functools.wraps(command)
    def wrapper(*args: Any, config_path: str | None, overrides: tuple[str, ...], **kwargs: Any) -> Any:
        found = config_path is None
        if found:
            config_path = found_config(optional=optional and not overrides)
        if config_path is None:
            config, origins = builtin_defaults(), Origins("built-in defaults")
        else:
            config, origins = load_config_with_origins(config_path, overrides)
            click.get_current_context().meta[_CONFIG_FILE] = config_path
            if found and config_path.startswith(os.pardir + os.sep):  # once it loads: an error in it stays one line
                click.echo(f"using config {config_path}", err=True)
        if with_origins:
            kwargs["origins"] = origins
        before = retries.retried()
        with retries.using(config.storage):
            result = command(*args, config=config, **kwargs)
        if retried := retries.since(before):
            click.echo(f"storage: {retries.summary(retried)}", err=True)
        return result

    return wrapper


def config_file() -> str | None:
    """The config file the current command read; None when it runs on the built-in defaults."""
    return click.get_current_context().meta.get(_CONFIG_FILE)


def builtin_defaults() -> Config:
    """The config an empty config file gives."""
    return parse_config({}, origin="built-in defaults")


def found_config(*, optional: bool) -> str | None:
    """The project's config file, found from the current directory; None if there is none and that is
    ``optional``."""
    path = find_config(os.getcwd())
    if path is None and not optional:
        raise ConfigError(f"no config file: no {' or '.join(CONFIG_NAMES)} in {os.getcwd()} or a parent directory; "
                          "pass --config PATH")
    return path


def find_config(start: str) -> str | None:
    """The first of :data:`CONFIG_NAMES` in ``start`` or its nearest parent that has one, as a path from the
    current directory; the search stops at a mount point (as DVC stops looking for its root) and before a
    directory listed in ``LMPREP_CEILING_DIRECTORIES`` (``os.pathsep``-separated, as git's ceiling)."""
    ceilings = {os.path.abspath(path) for path in os.environ.get(CEILING_ENV, "").split(os.pathsep) if path}
    directory = os.path.abspath(start)
    while True:
        for name in CONFIG_NAMES:
            candidate = os.path.join(directory, name)
            if os.path.isfile(candidate):
                return os.path.relpath(candidate)
        parent = os.path.dirname(directory)
        if parent == directory or parent in ceilings or os.path.ismount(directory):
            return None
        directory = parent
