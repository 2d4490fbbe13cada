"""The optional ``export`` stage: shards → ``export.output_dir`` in other tools' formats.

Declared when ``export.output_dir`` is set. Every format is written into one
staging directory that replaces the output whole (a local swap, or a remote
attempt and its commit), so the exports always belong to one shard set; they
are stale, like every output, when the shards or the tokenizer change.
"""

from __future__ import annotations

from pipeline.config import Config
from pipeline.engine import storage
from pipeline.engine.runner import Stage
from pipeline.shards import export
from stages.console import say
from stages.encode import open_splits, shard_reader_stage


def build(config: Config) -> Stage:
    return shard_reader_stage(config, "export", run)


def run(config: Config) -> None:
    tokenizer, shard_sets = open_splits(config)
    output = config.output_path(config.export.output_dir)
    with storage.local_output_dir(output) as staging:
        written = export.export_shards(shard_sets, tokenizer, staging, config.export.formats)
    tokens = {shard_set.split: shard_set.num_tokens for shard_set in shard_sets}
    for path in written:
        say("export", f"{tokens[path.stem]:,} tokens → {output}/{path.name}")
