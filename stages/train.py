"""The ``train`` stage: shards + tokenizer → ``checkpoints/<name>/`` (checkpoint, metrics, loss plot).

torch is imported only when the stage runs, so listing or checking the
pipeline never pays for it.
"""

from __future__ import annotations

import functools

from pipeline.config import Config
from pipeline.runner import Stage
from pipeline.shards import ShardSet, manifest_path
from pipeline.tokenizer import Tokenizer
from stages.console import say, show_progress


# Version of the code that shapes this stage's outputs (training, model, checkpoint in pipeline/):
# bump it whenever the same shards, tokenizer and settings would give another checkpoint, and the
# stage re-runs wherever it ran before.
CODE_VERSION = 1

def build(config: Config) -> Stage:
    return Stage(
        name="train",
        deps=(config.encode.output_dir, tokenizer_path(config)),
        outs=(config.train.output_dir,),
        params=("train",),
        run=functools.partial(run, config),
        code_version=CODE_VERSION,
        keys={config.encode.output_dir: "encode.output_dir", tokenizer_path(config): "tokenizer.output",
              config.train.output_dir: "train.output_dir"},
    )


def tokenizer_path(config: Config) -> str:
    """The tokenizer file the shards were encoded with (the tokenizer stage's output)."""
    return config.tokenizer.output


def run(config: Config) -> None:
    from pipeline import training

    tokenizer = Tokenizer.load(tokenizer_path(config))
    shard_dir = config.encode.output_dir
    train_set = ShardSet.open(shard_dir, "train", tokenizer=tokenizer)
    val_set = ShardSet.open(shard_dir, "val", tokenizer=tokenizer) if manifest_path(shard_dir, "val").exists() else None
    summary = training.train_checkpoint_dir(
        config.train, tokenizer=tokenizer, train_set=train_set, val_set=val_set,
        progress=show_progress(), notify=functools.partial(say, "train"),
    )
    if summary.step > summary.start_step:
        say(
            "train",
            f"trained steps {summary.start_step}→{summary.step}: train loss {summary.train_loss:.4f}"
            + (f", val loss {summary.val_loss:.4f}" if summary.val_loss is not None else "")
            + f", {summary.tokens_per_second:,.0f} tokens/s → {summary.checkpoint}"
        )
