"""``lmprep run``, ``lmprep status`` and ``lmprep config show``: the pipeline as a whole."""

from __future__ import annotations

import click

from pipeline.config import Config, dump_yaml
from pipeline.errors import ConfigError
from pipeline.runner import Pipeline
from stages.options import config_options
from stages.registry import CHECKPOINT_STAGES, STAGE_NAMES, build_stages


def make_pipeline(config: Config) -> Pipeline:
    return Pipeline(build_stages(config), param_value=config.value, state_dir=config.state_dir, log=click.echo)


@click.command(help=f"""Run the stale stages (all, or STAGE... and what they depend on), in order.

\b
Stages: {', '.join(STAGE_NAMES)}
(export and stats when the config sets export.output_dir / stats.output_dir).
--force on train retrains from scratch (the old checkpoint is set aside).""")
@click.argument("stages", nargs=-1, metavar="[STAGE]...")
@click.option("--force", is_flag=True, help="Re-run the named stages (all if none) even when up to date.")
@config_options
def run(stages: tuple[str, ...], force: bool, config: Config) -> None:
    pipeline = make_pipeline(config)
    declared = {stage.name for stage in pipeline.stages}
    for name in stages:
        if name in STAGE_NAMES and name not in declared:
            raise ConfigError(f"stage '{name}' is not declared by this config; set {name}.output_dir to add it")
    pipeline.run(list(stages) or None, force=force)


@click.command()
@click.option("--check", is_flag=True, help="Exit with status 1 if any stage is stale.")
@config_options
def status(check: bool, config: Config) -> None:
    """Show, per stage, whether it is up to date and if not, what changed."""
    report = make_pipeline(config).status()
    for stage in report:
        if stage.reasons in ((), ("never run",)):
            click.echo(f"{stage.name}: {stage.describe()}")
            continue
        click.echo(f"{stage.name}: stale")
        for reason in stage.reasons:
            click.echo(f"    {reason}")
        if stage.warning:
            click.echo(f"    warning: {stage.warning}")
    if check and any(stage.stale for stage in report):
        raise SystemExit(1)


@click.command()
@click.option("--checkpoints", is_flag=True, help="Also delete the trained checkpoints.")
@config_options
def clean(checkpoints: bool, config: Config) -> None:
    """Delete derived data (prepared text, tokenizer, shards); never the raw data."""
    pipeline = make_pipeline(config)
    names = [stage.name for stage in pipeline.stages if checkpoints or stage.name not in CHECKPOINT_STAGES]
    removed = pipeline.clean(names)
    click.echo("\n".join(f"removed {path}" for path in removed) or "nothing to remove")
    if not checkpoints:
        click.echo("checkpoints kept (use --checkpoints to delete them too)")


@click.group(name="config")
def config_group() -> None:
    """Inspect the configuration."""


@config_group.command(name="show")
@config_options
def show(config: Config) -> None:
    """Print the effective config (file + --set overrides + defaults) as YAML."""
    click.echo(dump_yaml(config), nl=False)

