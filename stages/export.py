"""The optional ``export`` stage: shards → ``export.output_dir`` in other tools' formats.

Declared when ``export.output_dir`` is set. Every format is checked against the
tokenizer's vocabulary before anything is written, then written into one staging
directory that replaces the output whole (a local swap, or a remote attempt and
its commit), so the exports always belong to one shard set; they are stale, like
every output, when the shards or the tokenizer change.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pipeline.config import Config
from pipeline.engine import storage
from pipeline.engine.runner import Stage
from stages.console import say
from stages.encode import open_splits, shard_reader_stage

if TYPE_CHECKING:
    from pipeline.shards.format import ShardSet
    from pipeline.tokenizer import Tokenizer

# Version of the code that shapes this stage's outputs: bump it whenever the same shards, tokenizer and settings
# would give other files (2: meta.pkl names the .bin dtype).
CODE_VERSION = 3  # 3: the parquet export has the shards' source, file and document columns


def build(config: Config) -> Stage:
    return shard_reader_stage(config, "export", run, code_version=CODE_VERSION)


def run(config: Config) -> None:
    from pipeline.shards import export

    tokenizer, shard_sets = open_splits(config)
    output = config.output_path(config.export.output_dir)
    with storage.local_output_dir(output) as staging:
        written = export.export_shards(shard_sets, tokenizer, staging, config.export.formats)
    tokens = {shard_set.split: shard_set.num_tokens for shard_set in shard_sets}
    for split, path in written:
        say("export", f"{tokens[split]:,} tokens → {output}/{path.name}")
    for notice in notices(config.export.formats, shard_sets, tokenizer):
        say("export", notice)


def notices(formats: Sequence[str], shard_sets: Sequence[ShardSet], tokenizer: Tokenizer) -> list[str]:
    """What a user of the exported files must know that their names do not say."""
    lines = [f"{shard_set.split} has no tokens, so its .bin files are empty, which np.memmap (nanoGPT, Megatron) "
             "cannot open: leave that split out of their data paths"
             for shard_set in shard_sets if shard_set.num_tokens == 0 and {"nanogpt", "megatron"} & set(formats)]
    if "nanogpt" in formats and shard_sets[0].dtype.itemsize == 4:
        lines.append(f"the nanoGPT .bin files hold uint32 IDs ({tokenizer.vocab_size:,} IDs do not fit uint16): read "
                     "them with np.memmap(..., dtype=np.uint32) in nanoGPT's train.py (meta.pkl says dtype 'uint32')")
    return lines
