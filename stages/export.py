"""The optional ``export`` stage: shards → ``export.output_dir`` in other tools' formats.

Declared when ``export.output_dir`` is set. Every format is written into one
staging directory swapped in whole, so the exports always belong to one shard
set; they are stale, like every output, when the shards or the tokenizer change.
"""

from __future__ import annotations

import functools

from pipeline import atomic, export
from pipeline.config import Config
from pipeline.runner import Stage
from stages.console import say
from stages.encode import open_splits


def build(config: Config) -> Stage | None:
    if config.export.output_dir is None:
        return None
    return Stage(name="export", deps=(config.encode.output_dir, config.tokenizer.output),
                 outs=(config.export.output_dir,), params=("export",), run=functools.partial(run, config),
                 keys={config.encode.output_dir: "encode.output_dir", config.tokenizer.output: "tokenizer.output",
                       config.export.output_dir: "export.output_dir"})


def run(config: Config) -> None:
    tokenizer, shard_sets = open_splits(config)
    with atomic.atomic_dir(config.export.output_dir) as staging:
        written = export.export_shards(shard_sets, tokenizer, staging, config.export.formats)
    tokens = {shard_set.split: shard_set.num_tokens for shard_set in shard_sets}
    for path in written:
        say("export", f"{tokens[path.stem]:,} tokens → {config.export.output_dir}/{path.name}")
