"""The ``lmprep`` command: one thin click layer over the library and the stages.

Every error a user can cause is a :class:`pipeline.errors.PipelineError`, a
click usage error (unknown option, bad value, missing argument) or an OSError
about the user's files that the user must fix (a full disk, a quota, a
read-only file system, a denied permission, too long a name, a directory where
a file belongs); each is printed as one line on stderr with exit status 2 and no
traceback. Anything else is a bug and keeps its traceback. Ctrl-C prints one line
and exits with status 130.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import io
import os
import signal
import sys
from collections.abc import Iterator

import click
from click.exceptions import NoArgsIsHelpError

from pipeline.errors import PipelineError
from pipeline.tokenizer import backend
from stages import INTERRUPTED_MESSAGE, INTERRUPTED_STATUS, interrupted_while_loading

# OSErrors that are the user's to fix (free space, a quota, a read-only disk, permissions, a name, a directory)
USER_OS_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.ENAMETOOLONG, errno.EISDIR})
# every subcommand: its module and the click command in it, imported when the command line names it
COMMANDS = {
    "run": ("stages.cli.pipeline", "run"),
    "status": ("stages.cli.pipeline", "status"),
    "dag": ("stages.cli.pipeline", "dag"),
    "clean": ("stages.cli.pipeline", "clean"),
    "config": ("stages.cli.pipeline", "config_group"),
    "tokenizer": ("stages.cli.tokenizer", "tokenizer_group"),
    "export": ("stages.cli.data", "export_command"),
    "stats": ("stages.cli.data", "stats_command"),
    "locate": ("stages.cli.data", "locate_command"),
    "report": ("stages.cli.report", "report_command"),
    "sample": ("stages.cli.model", "sample"),
    "check": ("stages.cli.model", "check"),
    "stamp": ("stages.cli.model", "stamp"),
    "init": ("stages.cli.init", "init_command"),
}
ARGUMENTS = "lmprep.arguments"  # ctx.meta key: the root's command line, to name the command a parser error is about


class UserError(click.ClickException):
    """A PipelineError as the CLI shows it: ``error: <message>``, exit status 2."""

    exit_code = 2

    def show(self, file=None) -> None:
        click.echo(f"error: {self.message}", err=True)


class Interrupted(click.ClickException):
    """Ctrl-C as the CLI shows it: one line saying that the outputs are as they were, exit status 130."""

    exit_code = INTERRUPTED_STATUS

    def __init__(self) -> None:
        super().__init__(INTERRUPTED_MESSAGE)

    def show(self, file=None) -> None:
        click.echo(self.message, err=True)


class OneLineUsageError(click.UsageError):
    """A click usage error shown as ``error: <message> (see 'lmprep <command> --help')``, exit status 2.

    Click's own form is three lines (usage, hint, error); one line keeps every CLI error alike.
    """

    exit_code = 2

    def __init__(self, message: str, *, command_path: str) -> None:
        super().__init__(message)
        self.command_path = command_path

    def show(self, file=None) -> None:
        click.echo(f"error: {self.message} (see '{self.command_path} --help')", err=True)


@contextlib.contextmanager
def one_line_usage_errors(root: click.Context | None) -> Iterator[None]:
    """Turn click's usage errors into :class:`OneLineUsageError`; a bare group still prints its help."""
    try:
        yield
    except (NoArgsIsHelpError, OneLineUsageError):
        raise
    except click.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx else named_command_path(root)
        raise OneLineUsageError(" ".join(exc.format_message().split()), command_path=where) from None


def named_command_path(root: click.Context | None) -> str:
    """The command the arguments name, for the parser errors click raises without a context
    (an option missing its value)."""
    if root is None:
        return "lmprep"
    command, names = root.command, [root.command_path]
    for arg in root.meta.get(ARGUMENTS, ()):
        command = command.get_command(root, arg) if isinstance(command, click.Group) else None
        if command is None:
            break
        names.append(arg)
    return " ".join(names)


class LmprepGroup(click.Group):
    """The root group: parsing and every subcommand run inside it, so errors are mapped here once.

    Click's standalone ``main`` is kept as it is (exit 0, ``--help``/``--version``, ``SystemExit``);
    only the exceptions it shows are changed, Ctrl-C in a command included (click's "Aborted!", exit 1,
    would not say that the outputs are intact).
    """

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        """The command ``name``, its module imported only now: ``lmprep --version`` and each command load
        only what they run (the stages, numpy, pyarrow and torch cost more than the whole start-up)."""
        if name not in COMMANDS:
            return None
        module, attribute = COMMANDS[name]
        return getattr(importlib.import_module(module), attribute)

    def make_context(self, info_name, args, parent=None, **extra) -> click.Context:
        with one_line_usage_errors(None):
            return super().make_context(info_name, args, parent, **extra)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta[ARGUMENTS] = tuple(args)
        # the command's module is imported here, while Ctrl-C still ends the process at once (invoke puts
        # Python's handler back): the root's options are flags, so the first other word names the command
        named = next((arg for arg in args if not arg.startswith("-")), None)
        if named in COMMANDS:
            self.get_command(ctx, named)
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context):
        with one_line_usage_errors(ctx):
            try:
                restore_ctrl_c()
                return super().invoke(ctx)
            except PipelineError as exc:
                details = f" ({exc.details})" if exc.details else ""
                raise UserError(" ".join(str(exc).split()) + details) from None
            except KeyboardInterrupt:
                raise Interrupted() from None
            except OSError as exc:
                if exc.errno not in USER_OS_ERRNOS:
                    raise
                raise UserError(os_error_message(exc)) from None


def restore_ctrl_c() -> None:
    """From here Ctrl-C is a KeyboardInterrupt again, which the command's code handles (see ``stages.__main__``)."""
    if signal.getsignal(signal.SIGINT) is interrupted_while_loading:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def os_error_message(exc: OSError) -> str:
    """``out/shards: no space left on device; free some space and run again``."""
    message = os.strerror(exc.errno).lower()
    if exc.filename is not None:
        message = f"{exc.filename}: {message}"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        message += "; free some space and run again"
    return message


@click.group("lmprep", cls=LmprepGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(None, "-V", "--version", package_name="lmprep",
                      message=f"%(prog)s, version %(version)s (tokenizer backend: {backend.name()})")
def cli() -> None:
    """Turn a folder of raw text into a tokenizer, Arrow token shards and a checkpoint."""


def main() -> None:
    escape_undecodable_names()
    try:
        cli(prog_name="lmprep")
    finally:
        ignore_ctrl_c_while_exiting()  # first: a Ctrl-C landing in the next step's exec would be a traceback
        forget_handled_interrupts()


def forget_handled_interrupts() -> None:
    """Let the status the command exits with stand. Python 3.11 remembers a KeyboardInterrupt that left any
    ``exec``/``eval`` of source text (a dataclass or a namedtuple being made while a module loads, say), and
    under ``python -m`` ends the process by SIGINT after its last line even though the command handled it and
    exits with 130 (a Ctrl-C landing there once printed the one line and still ended with -2). Running source
    text once more clears that flag; a KeyboardInterrupt that does leave the program sets it again."""
    exec("")  # the empty module: its run resets the flag


def ignore_ctrl_c_while_exiting() -> None:
    """The command's outcome and status are settled: a Ctrl-C landing while the interpreter shuts down (joining
    threads, flushing streams) could only print its own "Exception ignored" traceback over the command's output
    and change the status of a command that has already finished. ``signal.signal`` runs the handler of a
    Ctrl-C that has just landed before it changes it: that KeyboardInterrupt is dropped, and the change made
    again."""
    while True:
        try:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            return
        except KeyboardInterrupt:
            continue


def escape_undecodable_names() -> None:
    """Write a file name that is not UTF-8 (its bytes are lone surrogates in Python) as ``\\udcff`` escapes, as
    stderr already does, instead of failing on it: a name may end up in any line, a path in a table or in JSON."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper) and stream.errors == "strict":
            stream.reconfigure(errors="backslashreplace")
