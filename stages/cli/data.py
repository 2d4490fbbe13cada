"""``lmprep export`` and ``lmprep stats``: run the ``export``/``stats`` stages (and what they need);
``lmprep locate``: where a token of the shards comes from.

They are the stages the config declares (``export.output_dir``, ``stats.output_dir``);
the options are shorthands for those keys, so the runner tracks the outputs like any other. The library modules
that read Arrow files (numpy, pyarrow) are imported inside the commands, not with ``--help`` or a usage error.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import click

from pipeline.config import EXPORT_FORMATS, Config
from pipeline.data.cleaning import SPLITS
from pipeline.engine import locations, storage
from pipeline.errors import ConfigError
from stages import stats as stats_stage
from stages.cli.options import config_options
from stages.cli.pipeline import make_pipeline, run_pipeline


def with_section(config: Config, section: str, **values: Any) -> Config:
    """``config`` with the given keys of ``section`` replaced (None values leave a key as it is)."""
    given = {key: value for key, value in values.items() if value not in (None, ())}
    return dataclasses.replace(config, **{section: dataclasses.replace(getattr(config, section), **given)})


def run_stage(config: Config, name: str, force: bool) -> None:
    if getattr(config, name).output_dir is None:
        raise ConfigError(f"the config declares no {name} stage: set {name}.output_dir (or pass --out)")
    run_pipeline(make_pipeline(config), [name], force=force)


@click.command(name="export")
@click.option("--format", "formats", type=click.Choice(EXPORT_FORMATS), multiple=True,
              help="parquet: one .parquet per split; nanogpt: flat train.bin/val.bin (uint16, uint32 above "
                   "65,536 IDs) and meta.pkl; megatron: Megatron-LM/NeMo indexed datasets "
                   "train_text_document.bin/.idx (repeatable) [default: export.formats].")
@click.option("--out", "output_dir", type=click.Path(file_okay=False), help="[default: export.output_dir]")
@click.option("--force", is_flag=True, help="Export even when the exports are up to date.")
@config_options
def export_command(formats: tuple[str, ...], output_dir: str | None, force: bool, config: Config) -> None:
    """Run the export stage: the shards in other tools' formats, each file with a JSON sidecar."""
    output_dir = config.output_value(output_dir) if output_dir else None
    run_stage(with_section(config, "export", formats=formats, output_dir=output_dir), "export", force)


@click.command(name="stats")
@click.option("--top", type=click.IntRange(min=0), help="How many of the most frequent tokens to list "
                                                         "[default: stats.top].")
@click.option("--out", "output_dir", type=click.Path(file_okay=False), help="[default: stats.output_dir]")
@click.option("--force", is_flag=True, help="Recompute even when the stats are up to date.")
@config_options
def stats_command(top: int | None, output_dir: str | None, force: bool, config: Config) -> None:
    """Run the stats stage, then print per split: documents, tokens, bytes per token, the most frequent tokens;
    and per source what prepare read, kept and dropped (by step and rule)."""
    from pipeline.data.accounting import source_table, source_warnings
    from pipeline.data.prepare import STATS_FILE

    config = with_section(config, "stats", top=top, output_dir=config.output_value(output_dir) if output_dir else None)
    run_stage(config, "stats", force)
    summary = json.loads(storage.read_bytes(stats_stage.committed_path(config, stats_stage.SUMMARY_FILE)))
    weights = [source.weight for source in config.data.sources]
    for split, figures in summary["splits"].items():
        click.echo(split_table(split, figures))
        click.echo(source_shares(figures.get("sources", []), weights))
    prepared = json.loads(storage.read_bytes(locations.join(storage.committed(config.output_path(
        config.prepare.output_dir)), STATS_FILE)))
    click.echo("prepared documents per source:\n" + source_table(prepared["sources"]))
    for warning in source_warnings(prepared):
        click.echo(warning)
    click.echo(f"histogram of document lengths → {stats_stage.committed_path(config, stats_stage.PLOT_FILE)}")


def source_shares(sources: list[dict[str, Any]], weights: list[float | None]) -> str:
    """``  tokens per source: data.sources[0] 12,345 (61.2%, target 50.0%), …`` (targets when weights are set)."""
    total = sum(weight for weight in weights if weight is not None)

    def target(source: int) -> str:
        weight = weights[source] if source < len(weights) else None
        return f", target {weight / total:.1%}" if weight is not None else ""

    return "  tokens per source: " + ", ".join(
        f"data.sources[{row['source']}] {row['tokens']:,} ({row['share']:.1%}{target(row['source'])})"
        for row in sources)


def split_table(split: str, figures: dict[str, Any]) -> str:
    lines = [f"{split}: {figures['documents']:,} documents, {figures['tokens']:,} tokens, "
             f"{figures['bytes_per_token']:.2f} bytes per token"]
    if figures["top_tokens"]:
        lines.append(f"  {'ID':>7}  {'count':>12}  {'share':>6}  token")
    for row in figures["top_tokens"]:
        share = row["count"] / figures["tokens"]
        lines.append(f"  {row['id']:>7}  {row['count']:>12,}  {share:6.2%}  {row['token']}")
    return "\n".join(lines)


@click.command(name="locate")
@click.argument("split", type=click.Choice(SPLITS))
@click.argument("token", type=click.IntRange(min=0))
@click.option("--row", is_flag=True, help="TOKEN is a row (a document) of the split, not a token position.")
@config_options
def locate_command(split: str, token: int, row: bool, config: Config) -> None:
    """Say where token TOKEN of SPLIT (its position in the split's token stream, as in the exported train.bin)
    comes from: its shard and row, the source in data.sources and the document ID (the raw file, or the part of
    it one task read, then # and the document's number there), with paths as they open from here."""
    from pipeline.data.documents import document_metadata
    from pipeline.shards.format import ShardSet
    from pipeline.shards.origins import renamed_file

    shard_set = ShardSet.open(config.output_path(config.encode.output_dir), split, verify=False)
    try:
        shard, index = shard_set.locate_row(token) if row else shard_set.locate(token)
    except IndexError as exc:
        raise ConfigError(str(exc)) from None
    source = int(shard.sources[index])
    sources = config.data.sources
    named = f"data.sources[{source}]" + (f" {config.here(sources[source].glob)}" if source < len(sources) else "")
    start, end = int(shard.offsets[index]), int(shard.offsets[index + 1])
    click.echo(f"{split} {'row' if row else 'token'} {token:,}: {shard.path} row {index:,} ({end - start:,} tokens)")
    click.echo(f"source: {named}")
    click.echo(f"document: {renamed_file(shard.document_id(index), config.here)}")
    metadata = document_metadata(config.output_path(config.prepare.output_dir), split, shard.document_id(index))
    for name, value in (metadata or {}).items():
        click.echo(f"{name}: {value}")
