"""The ``train`` stage: shards + tokenizer → ``checkpoints/<name>/`` (checkpoint, metrics, loss plot).

torch is imported only when the stage runs, or when ``status`` previews a
stale train stage with a checkpoint in place, so listing or checking the
pipeline otherwise never pays for it.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

from pipeline.config import Config
from pipeline.engine import hashing, locations
from pipeline.engine.runner import Stage
from pipeline.errors import PipelineError
from stages.console import PROGRESS, say

CODE_VERSION = 5  # 2: the chunked loss (other rounding); 3: checksums in the checkpoint; 4: source_tokens in metrics;
# 5: the checksums of tokenizer.json and metrics.jsonl in the checkpoint, no train.output_dir in it


def build(config: Config) -> Stage:
    shards, tokenizer, output = (config.out(config.encode.output_dir), config.out(config.tokenizer.output),
                                 config.out(config.train.output_dir))
    return Stage(
        name="train",
        deps=(shards, tokenizer),
        outs=(output,),
        params=("train", *weight_params(config)),
        run=functools.partial(run, config),
        code_version=CODE_VERSION,
        keys={shards: "encode.output_dir", tokenizer: "tokenizer.output", output: "train.output_dir"},
        run_forced=functools.partial(run, config, retrain=True),
        preview=functools.partial(preview, config),
        adopts=adopts,
        scratch=() if locations.is_url(output) else (output + ".partial",),  # periodic checkpoints of a killed run
    )


def weight_params(config: Config) -> tuple[str, ...]:
    """``data.sources[i].weight`` of every source: the mixture training samples."""
    return tuple(f"data.sources[{index}].weight" for index in range(len(config.data.sources)))


def mixture_weights(config: Config) -> tuple[float, ...] | None:
    """The sources' weights, or None when no source has one (natural proportions; the config allows all or none)."""
    weights = tuple(source.weight for source in config.data.sources)
    return None if not weights or None in weights else weights


def adopts(output: str) -> bool:
    """A remote checkpoint directory is this stage's own wherever it was written (another machine, a lost
    state dir): training resumes it or sets it aside, never deletes it, so an interrupted run continues anywhere."""
    from pipeline.model.checkpoint import checkpoint_exists

    return locations.is_url(output) and checkpoint_exists(output)


def tokenizer_path(config: Config) -> str:
    """The tokenizer file the shards were encoded with (the tokenizer stage's output)."""
    return config.output_path(config.tokenizer.output)


def settings_here(config: Config):
    """``train`` with its output directory as a path from the current directory, and the sources' weights."""
    return dataclasses.replace(config.train, output_dir=config.output_path(config.train.output_dir),
                               mixture=mixture_weights(config))


def run(config: Config, retrain: bool = False) -> None:
    from pipeline.model import training
    from pipeline.shards.format import ShardSet
    from pipeline.shards.manifest import has_split
    from pipeline.tokenizer import Tokenizer

    tokenizer_file = tokenizer_path(config)
    tokenizer = Tokenizer.load(tokenizer_file)
    shard_dir = config.output_path(config.encode.output_dir)
    train_set = ShardSet.open(shard_dir, "train", tokenizer=tokenizer)
    val_set = ShardSet.open(shard_dir, "val", tokenizer=tokenizer) if has_split(shard_dir, "val") else None
    summary = training.train_checkpoint_dir(
        settings_here(config), tokenizer=tokenizer, train_set=train_set, val_set=val_set,
        tokenizer_file=tokenizer_file, progress=PROGRESS, notify=functools.partial(say, "train"),
        retrain=retrain,
    )
    if summary.step > summary.start_step:
        say(
            "train",
            f"trained steps {summary.start_step:,}→{summary.step:,}: train loss {summary.train_loss:.4f}"
            + (f", val loss {summary.val_loss:.4f}" if summary.val_loss is not None else "")
            + f", {summary.tokens_per_second:,.0f} tokens/s → {summary.checkpoint}"
        )
        if mixture_weights(config) is not None:  # the natural mixture is in metrics.jsonl
            say("train", describe_mixture(summary.mixture))


def describe_mixture(rows: tuple[dict, ...]) -> str:
    """``mixture (tokens seen, share, target): data.sources[0] 61,440 50.2% (50.0%), …``, over the whole run."""
    return "mixture (tokens seen, share, target): " + ", ".join(
        f"data.sources[{row['source']}] {row['tokens']:,} {row['share']:.1%} ({row['target']:.1%})" for row in rows)


def preview(config: Config, stale_upstream: Sequence[str]) -> str | None:
    """Warn when running the stage now would set the current checkpoint aside and train from scratch.

    Judged on the tokenizer and shards as they are now. A stale stage before this one runs first and may
    change them, and with them the name the checkpoint is set aside under (a new tokenizer's checkpoint
    goes to ``<dir>-<old fingerprint>``), so the warning then names no new directory.
    The checkpoint is judged without torch: on its header and, for a local one, its tensors' checksums; a
    remote one on its header alone (two ranged reads), never downloaded.
    """
    from pipeline.model.checkpoint import checkpoint_exists
    from pipeline.model.homes import set_aside_path
    from pipeline.model.resume import plan_resume

    directory = config.output_path(config.train.output_dir)
    try:
        if not checkpoint_exists(directory):
            return None
        from pipeline.shards.manifest import read_manifest  # numpy, regex: only with a checkpoint to judge
        from pipeline.tokenizer import Tokenizer

        tokenizer = Tokenizer.load(tokenizer_path(config))
        shards = hashing.canonical_hash(read_manifest(config.output_path(config.encode.output_dir), "train").to_dict())
    except PipelineError:  # a missing or broken input: the run itself will say what is wrong
        return None
    plan = plan_resume(directory, tokenizer=tokenizer, settings=settings_here(config),
                       shard_fingerprint=shards, header_only=True)
    if plan.action != "set_aside":
        return None
    if stale_upstream:
        return (f"{plan.reason}: running it will set {directory} aside and train from scratch (where it moves "
                f"is decided then, after {' and '.join(repr(name) for name in stale_upstream)} ran)")
    aside = set_aside_path(directory, plan.tag)
    return f"{plan.reason}: running it will move {directory} to {aside} and train from scratch"
