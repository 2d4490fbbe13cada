"""``lmprep run``, ``status``, ``dag``, ``clean`` and ``config show``: the pipeline as a whole."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator
from typing import Any

import click

from pipeline.config import FROM_FILE, Config, Origins, dump_yaml, resolved_size
from pipeline.engine.runner import Pipeline, StageStatus, direct_upstream
from pipeline.errors import ConfigError
from stages.cli.options import config_file, config_options
from stages.registry import CHECKPOINT_STAGES, STAGE_NAMES, STAGES, build_stages


def make_pipeline(config: Config) -> Pipeline:
    """The pipeline of ``config``, rooted in its ``output_root`` (the project root)."""
    path = config_file()
    guarded = {f"the config file {path!r}": os.path.abspath(path)} if path is not None else {}
    runs = None if config.run_cache_dir is None else config.input(config.run_cache_dir)
    return Pipeline(build_stages(config), param_value=config.value, state_dir=config.out(config.state_dir),
                    root=config.project_root, guarded=guarded, run_cache=runs, names_root=config.names_root,
                    log=click.echo,
                    log_header={"config": path or "built-in defaults", "executor.kind": config.executor.kind})


def run_pipeline(pipeline: Pipeline, targets: list[str] | None, *, force: bool, wait: bool = True) -> None:
    """Run the stale stages among ``targets``; with ``executor.address: local`` they share one Dask
    LocalCluster, started by the first that needs it and closed when the run ends."""
    from pipeline.engine.executor import share_local_cluster

    with share_local_cluster():
        pipeline.run(targets, force=force, wait=wait)


@click.command(help=f"""Run the stale stages (all, or STAGE... and what they depend on), in order.

While another run is going on in the same state dir, wait for it to finish first.

\b
Stages: {', '.join(STAGE_NAMES)}
(export, stats and report when the config sets export.output_dir, stats.output_dir, report.output).
--force on train retrains from scratch (the old checkpoint is set aside).""")
@click.argument("stages", nargs=-1, metavar="[STAGE]...")
@click.option("--force", is_flag=True, help="Re-run the named stages (all if none) even when up to date.")
@click.option("--no-wait", is_flag=True,
              help="Fail at once if another run is going on here, instead of waiting for it.")
@click.option("--executor", "executor_kind", type=click.Choice(["local", "dask"]), default=None,
              help="Run the tasks in local processes or on the Dask cluster at executor.address "
                   "[default: executor.kind].")
@config_options
def run(stages: tuple[str, ...], force: bool, no_wait: bool, executor_kind: str | None, config: Config) -> None:
    """Run the stale stages (all, or STAGE... and what they depend on), in order.

    While another run is going on in the same state dir, wait for it to finish first.
    """
    if executor_kind is not None:
        config = dataclasses.replace(config, executor=dataclasses.replace(config.executor, kind=executor_kind))
    pipeline = make_pipeline(config)
    declared = {stage.name for stage in pipeline.stages}
    for name in stages:
        if name in STAGE_NAMES and name not in declared:
            key = next(spec.output_key for spec in STAGES if spec.name == name)
            raise ConfigError(f"stage '{name}' is not declared by this config; set {key} to add it")
    run_pipeline(pipeline, list(stages) or None, force=force, wait=not no_wait)


STATUS_VERSION = 1  # of ``lmprep status --json``'s document; bumped when a key changes meaning or goes


@click.command()
@click.option("--check", is_flag=True, help="Exit with status 1 if any stage is stale.")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON document: per stage, up to date or not, the reasons and its outputs.")
@config_options
def status(check: bool, as_json: bool, config: Config) -> None:
    """Show, per stage, whether it is up to date and if not, what changed."""
    pipeline = make_pipeline(config)
    report = pipeline.status()
    if as_json:
        click.echo(json.dumps(status_document(pipeline, report), indent=2, ensure_ascii=False))
    else:
        show_status(report)
    if check and any(stage.stale for stage in report):
        raise SystemExit(1)


def status_document(pipeline: Pipeline, report: list[StageStatus]) -> dict[str, Any]:
    """``{"version": 1, "stages": {name: {"up_to_date", "reasons", "warning", "outputs"}}}``, in pipeline
    order; outputs as the lock records them (relative to the project root, or URLs)."""
    outs = {stage.name: list(stage.outs) for stage in pipeline.stages}
    return {"version": STATUS_VERSION, "stages": {
        stage.name: {"up_to_date": not stage.stale, "reasons": list(stage.reasons), "warning": stage.warning,
                     "outputs": outs[stage.name]} for stage in report}}


def show_status(report: list[StageStatus]) -> None:
    for stage in report:
        if stage.reasons in ((), ("never run",)):
            click.echo(f"{stage.name}: {stage.describe()}")
            if stage.warning and not stage.reasons:  # the scratch an interrupted run left
                click.echo(f"    warning: {stage.warning}")
            continue
        click.echo(f"{stage.name}: stale")
        for reason in stage.reasons:
            click.echo(f"    {reason}")
        if stage.warning:
            click.echo(f"    warning: {stage.warning}")


@click.command()
@click.option("--dot", is_flag=True, help="Print the graph in Graphviz's DOT language (| dot -Tpng > dag.png).")
@config_options
def dag(dot: bool, config: Config) -> None:
    """Show the stages and which stages' outputs each one reads, as the config declares them."""
    graph = direct_upstream(build_stages(config))
    click.echo(dot_graph(graph) if dot else text_graph(graph))


def text_graph(graph: dict[str, list[str]]) -> str:
    """One line per stage in pipeline order: ``encode  ← prepare, tokenizer``."""
    width = max(map(len, graph))
    return "\n".join(f"{name:<{width}}  ← {', '.join(upstream)}" if upstream else name
                     for name, upstream in graph.items())


def dot_graph(graph: dict[str, list[str]]) -> str:
    """``strict digraph {...}`` with an edge from each stage to every stage that reads its outputs."""
    nodes = [f'\t"{name}";' for name in graph]
    edges = [f'\t"{upstream}" -> "{name}";' for name, upstreams in graph.items() for upstream in upstreams]
    return "\n".join(["strict digraph {", *nodes, *edges, "}"])


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
@click.option("--origin", "show_origin", is_flag=True,
              help="Print one key per line with where its value came from (a file, --set or the built-in default).")
@config_options(with_origins=True)
def show(show_origin: bool, config: Config, origins: Origins) -> None:
    """Print the effective config (what it extends + file + --set overrides + defaults) as YAML.

    Of ``tokenizer.vocab_size`` and ``tokenizer.merges`` one is set and the other null; the null one's
    resolved value is shown as a comment on its line, so the output still loads as a config; so is the
    file a setting was read from (``tokenizer.path``, see :mod:`pipeline.config.frozen`). Paths
    are as written, relative to the config file's directory (outputs to ``output_root``).
    """
    if show_origin:
        for key, value in _leaves(config.to_dict()):
            click.echo(f"{key}: {json.dumps(value, ensure_ascii=False)}  # {origins.of(key)}")
        return
    notes = _resolved_size_note(config)
    for key in FROM_FILE:
        if origins.of(f"tokenizer.{key}").startswith("tokenizer.path"):
            notes[key] = "; ".join(filter(None, [notes.get(key), f"from {origins.of(f'tokenizer.{key}')}"]))
    click.echo(_with_notes(dump_yaml(config), notes), nl=False)


def _leaves(node: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """``(key.path, value)`` for every value of the config; a list is one value."""
    for key, value in node.items():
        path = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict):
            yield from _leaves(value, path)
        else:
            yield path, value


def _resolved_size_note(config: Config) -> dict[str, str]:
    """The note on the null one of ``tokenizer.vocab_size`` and ``tokenizer.merges``: its resolved value."""
    vocab_size, merges = resolved_size(config.tokenizer)
    key, value = ("merges", merges) if config.tokenizer.merges is None else ("vocab_size", vocab_size)
    if value is not None:
        return {key: f"resolved: {value}"}
    if config.tokenizer.path is not None:  # the file's size is shown as it is
        return {}
    if config.tokenizer.kind == "word":
        return {key: "the word kind has no merges"}
    return {key: "depends on the training text's characters (char kind)"}


def _with_notes(text: str, notes: dict[str, str]) -> str:
    """``text`` (the config as YAML) with ``# note`` after the line of each tokenizer key in ``notes``."""
    lines = text.splitlines(keepends=True)
    section = lines.index("tokenizer:\n")
    for key, note in notes.items():
        at = next(i for i in range(section + 1, len(lines)) if lines[i].startswith(f"  {key}:"))
        lines[at] = f"{lines[at].rstrip()}  # {note}\n"
    return "".join(lines)
