"""The ``train`` stage: shards + tokenizer → ``checkpoints/<name>/`` (checkpoint, metrics, loss plot).

torch is imported only when the stage runs, so listing or checking the
pipeline never pays for it.
"""

from __future__ import annotations

import dataclasses
import functools

from pipeline.config import Config
from pipeline.runner import Stage
from pipeline.shards import ShardSet, manifest_path
from pipeline.tokenizer import Tokenizer
from stages.console import say, show_progress


# Version of the code that shapes this stage's outputs (training, model, checkpoint in pipeline/):
# bump it whenever the same shards, tokenizer and settings would give another checkpoint, and the
# stage re-runs wherever it ran before.
CODE_VERSION = 2  # 2: the chunked loss (same loss, other float rounding)

def build(config: Config) -> Stage:
    return Stage(
        name="train",
        deps=(config.out(config.encode.output_dir), config.out(config.tokenizer.output)),
        outs=(config.out(config.train.output_dir),),
        params=("train",),
        run=functools.partial(run, config),
        code_version=CODE_VERSION,
    )


def tokenizer_path(config: Config) -> str:
    """The tokenizer file the shards were encoded with (the tokenizer stage's output)."""
    return config.output_path(config.tokenizer.output)


def run(config: Config) -> None:
    from pipeline import training

    tokenizer_file = tokenizer_path(config)
    tokenizer = Tokenizer.load(tokenizer_file)
    shard_dir = config.output_path(config.encode.output_dir)
    train_set = ShardSet.open(shard_dir, "train", tokenizer=tokenizer)
    val_set = ShardSet.open(shard_dir, "val", tokenizer=tokenizer) if manifest_path(shard_dir, "val").exists() else None
    summary = training.train_checkpoint_dir(
        dataclasses.replace(config.train, output_dir=config.output_path(config.train.output_dir)), tokenizer=tokenizer, train_set=train_set, val_set=val_set,
        tokenizer_file=tokenizer_file, progress=show_progress(), notify=functools.partial(say, "train"),
    )
    if summary.step > summary.start_step:
        say(
            "train",
            f"trained steps {summary.start_step}→{summary.step}: train loss {summary.train_loss:.4f}"
            + (f", val loss {summary.val_loss:.4f}" if summary.val_loss is not None else "")
            + f", {summary.tokens_per_second:,.0f} tokens/s → {summary.checkpoint}"
        )
