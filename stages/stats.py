"""The optional ``stats`` stage: shards → ``stats.output_dir`` (``stats.json`` and ``doc_lengths.png``).

Declared when ``stats.output_dir`` is set. ``stats.json`` records the
tokenizer fingerprint with the figures; ``lmprep stats`` prints it as tables.
"""

from __future__ import annotations

import functools
from pathlib import Path

from pipeline import atomic, shard_stats
from pipeline.config import Config
from pipeline.runner import Stage
from stages.console import say
from stages.encode import open_splits

SUMMARY_FILE = "stats.json"
PLOT_FILE = "doc_lengths.png"


def build(config: Config) -> Stage | None:
    if config.stats.output_dir is None:
        return None
    return Stage(name="stats", deps=(config.encode.output_dir, config.tokenizer.output),
                 outs=(config.stats.output_dir,), params=("stats",), run=functools.partial(run, config),
                 keys={config.encode.output_dir: "encode.output_dir", config.tokenizer.output: "tokenizer.output",
                       config.stats.output_dir: "stats.output_dir"})


def summary_path(config: Config) -> Path:
    return Path(config.stats.output_dir) / SUMMARY_FILE


def run(config: Config) -> None:
    tokenizer, shard_sets = open_splits(config)
    stats = [shard_stats.split_stats(shard_set, tokenizer, top=config.stats.top) for shard_set in shard_sets]
    with atomic.atomic_dir(config.stats.output_dir) as staging:
        atomic.write_json(staging / SUMMARY_FILE, shard_stats.summary(stats, tokenizer))
        shard_stats.plot_document_lengths({split.split: split.document_lengths for split in stats}, staging / PLOT_FILE)
    say("stats", f"{', '.join(f'{s.split} {s.bytes_per_token:.2f}' for s in stats)} bytes per token "
                 f"→ {config.stats.output_dir}/{SUMMARY_FILE}, {PLOT_FILE}")
