"""Resume policy: what to do with the checkpoint (and the partial checkpoint) a run finds, and why.

Pure decisions from the checkpoint's records and the current settings; nothing is moved or written here.

``train.steps`` is the step the checkpoint reaches: an absolute target, whatever
happened before. A checkpoint directory is resumed only when the weights in it
are what the current settings would have produced so far: same tokenizer
fingerprint (hence vocab size) and same weight-shaping settings, i.e. every
``train`` key except ``steps``, ``eval_every``, ``eval_batches`` and
``output_dir`` (so ``dim``, ``tie_weights``, ``context``, ``batch_size``, ``lr``,
``weight_decay``, ``seed``), and when it is below ``train.steps``. It then
continues up to step ``train.steps``, on the current shards (which may be new
data encoded with the same, frozen, tokenizer). A checkpoint already at
``train.steps`` on these shards is left as it is.

Otherwise training starts from scratch, and only once it has succeeded is the
old directory renamed aside (never deleted) and the new one swapped in; a run
that fails or is interrupted leaves the old checkpoint where it was. The suffix
says why: ``default-<fp12>`` holds the checkpoint of the previous tokenizer
(its fingerprint's first 12 hex digits), ``default-old-lr-seed``
one trained with the previous ``train.lr`` and ``train.seed``,
``default-old-steps`` one already past ``train.steps``, ``default-old-data`` one
already at ``train.steps`` when the shards changed (raise ``train.steps`` to
continue it on the new shards instead), ``default-forced`` one replaced by
``lmprep run train --force``, and ``default-unreadable`` one that could not be read.
The suffix is decided when the directory moves, from the checkpoint in it then:
if another run replaced it meanwhile, the name is that checkpoint's, and
``default-replaced`` when it needed no setting aside.

With ``train.checkpoint_every: N`` the run also saves a checkpoint every N steps
into ``default.partial/`` (atomically), so a kill loses at most N steps: the next
run continues from it when it is the same run (same tokenizer, weight-shaping
settings, shards and starting point), ending with the same weights, bit for bit,
as a run never interrupted. It is removed once the run succeeds.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pipeline.errors import CheckpointError
from pipeline.model.checkpoint import (
    Checkpoint,
    CheckpointHeader,
    TokenizerLike,
    checkpoint_exists,
    checkpoint_file,
    read_checkpoint,
    read_sealed_header,
)

if TYPE_CHECKING:
    from pipeline.config import TrainConfig

NOT_WEIGHT_SHAPING = frozenset({"steps", "eval_every", "eval_batches", "checkpoint_every", "output_dir"})
"""``train`` keys a checkpoint may be resumed across; any other change means training from scratch."""


@dataclass(frozen=True)
class ResumePlan:
    """What to do with an existing checkpoint directory, and why."""

    action: Literal["fresh", "resume", "done", "set_aside"]
    reason: str
    checkpoint: Checkpoint | CheckpointHeader | None = None  # a header when planned with ``header_only``
    tag: str = ""  # the suffix the directory gets when set aside


def plan_resume(
    directory: str | os.PathLike[str], *, tokenizer: TokenizerLike, settings: TrainConfig,
    shard_fingerprint: str | None, retrain: bool = False, header_only: bool = False,
) -> ResumePlan:
    """Decide whether the checkpoint in ``directory`` can be continued on the shards ``shard_fingerprint``.

    ``retrain`` sets any checkpoint aside (``--force``). ``header_only`` judges from the checkpoint's header and
    the checksums of a local one's tensors, without importing torch (for ``status``, which must not download a
    remote checkpoint and answers in a fraction of a second; docs/faults.md says what only a run finds).
    """
    if not checkpoint_exists(directory):
        return ResumePlan("fresh", "no previous checkpoint")
    try:
        checkpoint = read_sealed_header(directory) if header_only else read_checkpoint(directory)
        recorded = checkpoint.train_config
    except CheckpointError as exc:
        return ResumePlan("set_aside", f"the previous checkpoint is unreadable ({exc})", tag="unreadable")
    if retrain:
        return ResumePlan("set_aside", f"retraining as forced (the checkpoint was at step {checkpoint.step:,})",
                          checkpoint, tag="forced")
    old, new = checkpoint.tokenizer.fingerprint[:12], tokenizer.fingerprint[:12]
    if checkpoint.tokenizer.fingerprint != tokenizer.fingerprint:
        return ResumePlan("set_aside", f"the tokenizer changed ({old} → {new})", checkpoint, tag=old)
    changed = changed_settings(recorded, settings)
    if changed:
        described = ", ".join(f"{_key_name(key)} {old} → {new}" for key, (old, new) in changed.items())
        return ResumePlan("set_aside", f"the train settings changed ({described})", checkpoint,
                          tag="old-" + "-".join(changed))
    return _plan_steps(checkpoint, settings.steps, shard_fingerprint)


def changed_settings(recorded: Mapping[str, Any], settings: TrainConfig) -> dict[str, tuple[Any, Any]]:
    """The weight-shaping ``train`` keys whose value differs from ``recorded``, as ``key: (old, new)``."""
    current = {key: list(value) if isinstance(value, tuple) else value  # as the checkpoint's JSON holds them
               for key, value in dataclasses.asdict(settings).items()}
    return {
        key: (recorded.get(key), value)
        for key, value in current.items()
        if key not in NOT_WEIGHT_SHAPING and recorded.get(key) != value
    }


def _key_name(key: str) -> str:
    """A ``train`` setting as the config names it (``mixture`` gathers the sources' weights)."""
    return "data.sources[*].weight" if key == "mixture" else f"train.{key}"


def _plan_steps(checkpoint: Checkpoint | CheckpointHeader, steps: int, shard_fingerprint: str | None) -> ResumePlan:
    """Resume, keep or set aside a checkpoint trained with the current settings, by its step and its shards."""
    step, same_shards = checkpoint.step, checkpoint.shard_fingerprint == shard_fingerprint
    if step > steps:
        return ResumePlan("set_aside", f"train.steps={steps:,} is below the checkpoint's step {step:,}",
                          checkpoint, tag="old-steps")
    if step == steps and same_shards:
        return ResumePlan("done", f"the checkpoint is at step {step:,} = train.steps on these shards with these "
                          "settings", checkpoint)
    if step == steps:
        return ResumePlan("set_aside", f"the shards changed and the checkpoint is already at train.steps={steps:,} "
                          "(raise train.steps to continue it on the new shards instead)", checkpoint, tag="old-data")
    if not same_shards:
        return ResumePlan("resume", f"the shards changed; continuing from step {step:,} to step {steps:,} on the "
                          "new shards", checkpoint)
    return ResumePlan("resume", f"resuming from step {step:,} to step {steps:,}", checkpoint)



def interrupted_run(partial: Path, resume: Checkpoint | None, *, tokenizer: TokenizerLike, settings: TrainConfig,
                     shard_fingerprint: str) -> Checkpoint | None:
    """The checkpoint an interrupted run left in ``partial``, if this run is that run continued:
    same tokenizer, weight-shaping settings and shards, begun at the same step (``resume``'s, or 0),
    and not past ``train.steps``. Anything else is ignored (and overwritten by this run's own
    periodic checkpoints)."""
    if not checkpoint_file(partial).exists():
        return None
    try:
        checkpoint = read_checkpoint(partial)
    except CheckpointError:
        return None
    start = resume.step if resume is not None else 0
    same_run = (checkpoint.tokenizer.fingerprint == tokenizer.fingerprint
                and not changed_settings(checkpoint.train_config, settings)
                and checkpoint.shard_fingerprint == shard_fingerprint
                and checkpoint.extra.get("run_start") == start
                and start < checkpoint.step <= settings.steps)
    return checkpoint if same_run else None


