"""``lmprep export`` and ``lmprep stats``: the encoded shards for other tools and for humans."""

from __future__ import annotations

from pathlib import Path

import click

from pipeline import documents, export, shard_stats
from pipeline.config import Config
from pipeline.shards import ShardSet, manifest_path
from pipeline.tokenizer import Tokenizer
from stages.options import config_options

EXPORT_SUFFIX = {"parquet": ".parquet", "nanogpt": ".bin"}


def open_splits(config: Config) -> tuple[Tokenizer, list[ShardSet]]:
    """The tokenizer and every split's verified shard set (train required, val when present)."""
    tokenizer = Tokenizer.load(config.output_path(config.tokenizer.output))
    directory = config.output_path(config.encode.output_dir)
    splits = [split for split in documents.SPLITS if split == "train" or manifest_path(directory, split).exists()]
    return tokenizer, [ShardSet.open(directory, split, tokenizer=tokenizer) for split in splits]


@click.command(name="export")
@click.option("--format", "format_", type=click.Choice(sorted(EXPORT_SUFFIX)), required=True,
              help="parquet: one .parquet per split; nanogpt: flat uint16 train.bin/val.bin.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="data/export", show_default=True,
              help="Directory to write into.")
@config_options
def export_command(format_: str, out_dir: str, config: Config) -> None:
    """Write the shards in another tool's format."""
    _, shard_sets = open_splits(config)
    writer = export.write_parquet if format_ == "parquet" else export.write_nanogpt_bin
    for shard_set in shard_sets:
        path = Path(out_dir) / f"{shard_set.split}{EXPORT_SUFFIX[format_]}"
        writer(shard_set, path)
        click.echo(f"{shard_set.split}: {shard_set.num_tokens:,} tokens → {path}")


@click.command(name="stats")
@click.option("--top", default=10, show_default=True, type=click.IntRange(min=0),
              help="How many of the most frequent tokens to list.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="data/stats", show_default=True,
              help="Directory for the document-length histogram (doc_lengths.png).")
@config_options
def stats_command(top: int, out_dir: str, config: Config) -> None:
    """Per split: documents, tokens, bytes per token, the most frequent tokens; plus a length histogram."""
    tokenizer, shard_sets = open_splits(config)
    lengths = {}
    for shard_set in shard_sets:
        stats = shard_stats.split_stats(shard_set, tokenizer, top=top)
        _print_stats(stats, tokenizer)
        lengths[stats.split] = stats.document_lengths
    plot = Path(out_dir) / "doc_lengths.png"
    shard_stats.plot_document_lengths(lengths, plot)
    click.echo(f"histogram of document lengths → {plot}")


def _print_stats(stats: shard_stats.SplitStats, tokenizer: Tokenizer) -> None:
    click.echo(f"{stats.split}: {stats.documents:,} documents, {stats.tokens:,} tokens, "
               f"{stats.bytes_per_token:.2f} bytes per token")
    for token_id, count in stats.top_tokens:
        share = count / stats.tokens
        click.echo(f"  {token_id:>7}  {count:>12,}  {share:6.2%}  {tokenizer.render_token(token_id)}")
