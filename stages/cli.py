"""The ``lmprep`` command: one thin click layer over the library and the stages.

Every error a user can cause is a :class:`pipeline.errors.PipelineError`; it is
printed as one line on stderr with exit status 2 and no traceback. Anything
else is a bug and keeps its traceback.
"""

from __future__ import annotations

import click

from pipeline.errors import PipelineError


class UserError(click.ClickException):
    """A PipelineError as the CLI shows it: ``error: <message>``, exit status 2."""

    exit_code = 2

    def show(self, file=None) -> None:
        click.echo(f"error: {self.message}", err=True)


class LmprepGroup(click.Group):
    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except PipelineError as exc:
            raise UserError(" ".join(str(exc).split())) from None


@click.group(cls=LmprepGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="lmprep")
def cli() -> None:
    """Turn a folder of raw text into a tokenizer, Arrow token shards and a checkpoint."""


def main() -> None:
    cli(prog_name="lmprep")


from stages.cli_pipeline import clean, config_group, run, status  # noqa: E402

for _command in (run, status, clean, config_group):
    cli.add_command(_command)

from stages.cli_tokenizer import tokenizer_group  # noqa: E402

cli.add_command(tokenizer_group)

from stages.cli_data import export_command, stats_command  # noqa: E402

cli.add_command(export_command)
cli.add_command(stats_command)

from stages.cli_model import check, sample  # noqa: E402

cli.add_command(sample)
cli.add_command(check)
