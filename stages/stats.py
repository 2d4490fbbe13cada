"""The optional ``stats`` stage: shards → ``stats.output_dir`` (``stats.json`` and ``doc_lengths.png``).

Declared when ``stats.output_dir`` is set. ``stats.json`` records the
tokenizer fingerprint with the figures; ``lmprep stats`` prints it as tables.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.config import Config
from pipeline.engine import atomic, locations, storage
from pipeline.engine.runner import Stage
from stages.console import say
from stages.encode import open_splits, shard_reader_stage

CODE_VERSION = 2  # 2: tokens per source of each split in stats.json
SUMMARY_FILE = "stats.json"
PLOT_FILE = "doc_lengths.png"


def build(config: Config) -> Stage:
    return shard_reader_stage(config, "stats", run, code_version=CODE_VERSION)


def committed_path(config: Config, name: str) -> Path | str:
    """Where a file of the stats output is read: in its directory, or remotely in its committed attempt
    (never in an attempt that did not commit)."""
    output = config.output_path(config.stats.output_dir)
    return locations.join(storage.committed(output) if locations.is_url(output) else output, name)


def run(config: Config) -> None:
    from pipeline.shards import stats as shard_stats

    tokenizer, shard_sets = open_splits(config)
    stats = [shard_stats.split_stats(shard_set, tokenizer, top=config.stats.top) for shard_set in shard_sets]
    output = config.output_path(config.stats.output_dir)
    with storage.local_output_dir(output) as staging:
        atomic.write_json(staging / SUMMARY_FILE, shard_stats.summary(stats, tokenizer))
        shard_stats.plot_document_lengths({split.split: split.document_lengths for split in stats}, staging / PLOT_FILE)
    say("stats", f"{', '.join(f'{s.split} {s.bytes_per_token:.2f}' for s in stats)} bytes per token "
                 f"→ {output}/{SUMMARY_FILE}, {PLOT_FILE}")
