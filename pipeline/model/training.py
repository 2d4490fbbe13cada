"""Train the bigram model on the shards, resuming where that is sound.

Batches are random windows drawn from the memory-mapped shards by a numpy
generator seeded from ``train.seed``; the model is initialised after
``torch.manual_seed(train.seed)``. Both RNG states and the AdamW state go into
the checkpoint, so a run of 300 steps and a run of 100 resumed to 300 end with
the same weights, bit for bit, on the same CPU.

Validation uses its own generator, reseeded for every evaluation, so every
evaluation scores the same val windows and evaluating never shifts the
training batches.

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

Each metrics record holds the loss in nats per token and in bits per byte
(nats / ln 2 × tokens / UTF-8 bytes of the split): unlike the first, the second
compares across tokenizers. The first record after a resume is marked.

With ``train.checkpoint_every: N`` the run also saves a checkpoint every N steps
into ``default.partial/`` (atomically), so a kill loses at most N steps: the next
run continues from it when it is the same run (same tokenizer, weight-shaping
settings, shards and starting point), ending with the same weights, bit for bit,
as a run never interrupted. It is removed once the run succeeds.

``train.output_dir`` may be a URL (``s3://bucket/ckpt``): checkpoints in object
storage, which cannot rename. The trainer then works in a local scratch copy
and publishes every step of the local logic as a committed remote output
(:mod:`pipeline.engine.storage`), in the order that keeps the local case safe:

1. download the committed ``<url>`` and ``<url>.partial`` (so an interrupted run
   resumes on any machine; nothing local is needed);
2. train as locally, committing each periodic save to ``<url>.partial`` as it is
   written (a preempted driver loses at most ``checkpoint_every`` steps);
3. upload an old checkpoint being set aside to a free ``<url>-<tag>`` and commit it;
4. commit the new checkpoint to ``<url>`` (the swap: one PUT of its commit record);
5. delete ``<url>.partial``.

A kill between any two steps loses nothing: before 4 the previous commit of
``<url>`` stands (and the next run resumes from ``<url>.partial``); between 3
and 4 the old checkpoint is at both names, so the next run sets it aside once
more, as ``<url>-<tag>-2``. Messages name the URLs, never the scratch copy. As
for any remote output, one project owns it: runs of that project hold its lock,
so no other run replaces ``<url>`` meanwhile.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch

from pipeline.engine import atomic, storage
from pipeline.errors import CheckpointError, PipelineError, ShardError, TokenizerMismatchError, TrainingError
from pipeline.model.bigram import BigramLM, ModelConfig, training_memory_bytes
from pipeline.model.checkpoint import (
    TOKENIZER_FILE,
    Checkpoint,
    CheckpointHeader,
    TokenizerLike,
    checkpoint_exists,
    checkpoint_file,
    read_checkpoint,
    read_header,
    save_checkpoint,
)

if TYPE_CHECKING:
    from pipeline.config.schema import TrainConfig
    from pipeline.shards.format import ShardSet

METRICS_FILE = "metrics.jsonl"
LOSS_PLOT_FILE = "loss.png"

Notify = Callable[[str], None]

NOT_WEIGHT_SHAPING = frozenset({"steps", "eval_every", "eval_batches", "checkpoint_every", "output_dir"})
"""``train`` keys a checkpoint may be resumed across; any other change means training from scratch."""


def _ignore(message: str) -> None:
    """The default ``notify``: library code prints nothing unless asked."""


@dataclass(frozen=True)
class TrainSummary:
    """What a training run did, for the CLI and the benchmark."""

    checkpoint: Path | str  # a URL for a remote train.output_dir
    start_step: int
    step: int
    tokens: int = 0
    seconds: float = 0.0
    data_seconds: float = 0.0
    train_loss: float | None = None
    val_loss: float | None = None

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0

    @property
    def data_share(self) -> float:
        """Fraction of step time spent sampling batches from the shards."""
        return self.data_seconds / self.seconds if self.seconds else 0.0


@dataclass(frozen=True)
class ResumePlan:
    """What to do with an existing checkpoint directory, and why."""

    action: Literal["fresh", "resume", "done", "set_aside"]
    reason: str
    checkpoint: Checkpoint | CheckpointHeader | None = None  # a header when planned with ``header_only``
    tag: str = ""  # the suffix the directory gets when set aside


def model_config_for(settings: TrainConfig, tokenizer: TokenizerLike) -> ModelConfig:
    """The model shape: vocab size from the tokenizer, the rest from ``train``."""
    return ModelConfig(vocab_size=tokenizer.vocab_size, dim=settings.dim, tie_weights=settings.tie_weights)


def check_agreement(tokenizer: TokenizerLike, model_config: ModelConfig, shard_set: ShardSet) -> None:
    """Refuse to train unless tokenizer, shard set and model agree on IDs."""
    where = f"shard set {shard_set.directory} (split {shard_set.split!r})"
    if shard_set.tokenizer_fingerprint != tokenizer.fingerprint:
        raise TokenizerMismatchError(
            f"{where} was encoded with tokenizer {shard_set.tokenizer_fingerprint}, but the tokenizer is "
            f"{tokenizer.fingerprint}; re-encode with `lmprep run encode`"
        )
    if shard_set.vocab_size != tokenizer.vocab_size:
        raise TokenizerMismatchError(
            f"{where} records vocab size {shard_set.vocab_size}, the tokenizer has {tokenizer.vocab_size}"
        )
    if model_config.vocab_size != tokenizer.vocab_size:
        raise TokenizerMismatchError(
            f"the model has vocab size {model_config.vocab_size}, the tokenizer {tokenizer.vocab_size}"
        )
    if shard_set.num_tokens and shard_set.max_id >= model_config.vocab_size:
        raise ShardError(
            f"{where} holds token ID {shard_set.max_id}, outside the model's vocab size "
            f"{model_config.vocab_size}; re-encode with `lmprep run encode`"
        )


def plan_resume(
    directory: str | os.PathLike[str], *, tokenizer: TokenizerLike, settings: TrainConfig,
    shard_fingerprint: str | None, retrain: bool = False, header_only: bool = False,
) -> ResumePlan:
    """Decide whether the checkpoint in ``directory`` can be continued on the shards ``shard_fingerprint``.

    ``retrain`` sets any checkpoint aside (``--force``). ``header_only`` judges from the checkpoint's header,
    without reading its tensors (for ``status``, which must not download a remote checkpoint).
    """
    if not checkpoint_exists(directory):
        return ResumePlan("fresh", "no previous checkpoint")
    try:
        checkpoint = read_header(directory) if header_only else read_checkpoint(directory)
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
        described = ", ".join(f"train.{key} {old} → {new}" for key, (old, new) in changed.items())
        return ResumePlan("set_aside", f"the train settings changed ({described})", checkpoint,
                          tag="old-" + "-".join(changed))
    return _plan_steps(checkpoint, settings.steps, shard_fingerprint)


def changed_settings(recorded: Mapping[str, Any], settings: TrainConfig) -> dict[str, tuple[Any, Any]]:
    """The weight-shaping ``train`` keys whose value differs from ``recorded``, as ``key: (old, new)``."""
    current = dataclasses.asdict(settings)
    return {
        key: (recorded.get(key), value)
        for key, value in current.items()
        if key not in NOT_WEIGHT_SHAPING and recorded.get(key) != value
    }


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


def set_aside_path(directory: str | os.PathLike[str], tag: str) -> Path | str:
    """The first free sibling of ``directory`` among ``<name>-<tag>``, ``<name>-<tag>-2``, … (for a URL,
    the first prefix holding no object).

    :func:`set_aside` moves the directory there (a remote one is copied there), and ``status`` names it beforehand.
    """
    remote = storage.is_url(directory)
    base = os.fspath(directory).rstrip("/") if remote else os.fspath(Path(directory))
    taken = storage.holds_anything if remote else os.path.exists
    candidate, number = f"{base}-{tag}", 2
    while taken(candidate):
        candidate, number = f"{base}-{tag}-{number}", number + 1
    return candidate if remote else Path(candidate)


def set_aside(directory: str | os.PathLike[str], tag: str) -> Path:
    """Rename the local ``directory`` to :func:`set_aside_path` and return the new path."""
    candidate = Path(set_aside_path(directory, tag))
    os.replace(directory, candidate)
    return candidate


def train_checkpoint_dir(
    settings: TrainConfig,
    *,
    tokenizer: TokenizerLike,
    train_set: ShardSet,
    val_set: ShardSet | None,
    tokenizer_file: str | os.PathLike[str] | None = None,
    progress: bool = False,
    notify: Notify = _ignore,
    retrain: bool = False,
) -> TrainSummary:
    """Train into ``settings.output_dir``: resume or start fresh (always with ``retrain``), then swap in atomically.

    Training writes into a staging directory and the old checkpoint directory is
    set aside only after training has succeeded, so a failed or interrupted run
    leaves it where and as it was. Setting aside and swapping in are two renames
    in a row; a crash between them would leave the old checkpoint under its
    set-aside name and nothing at ``output_dir``. A URL is trained in a local copy
    and published step by step (see the module docstring).
    """
    model_config = model_config_for(settings, tokenizer)
    _check_inputs(settings, tokenizer, model_config, train_set, val_set)  # before anything is written
    with _checkpoint_home(settings.output_dir) as home:
        directory, tell = home.directory, lambda message: notify(home.words(message))
        plan = plan_resume(directory, tokenizer=tokenizer, settings=settings,
                           shard_fingerprint=train_set.fingerprint, retrain=retrain)
        if plan.action == "done":
            tell(f"nothing to train: {plan.reason}; raise train.steps to train further, "
                 "or pass --force to retrain from scratch")
            return TrainSummary(checkpoint=home.name(plan.checkpoint.path), start_step=plan.checkpoint.step,
                                step=plan.checkpoint.step)
        resume = _announce(plan, tell)
        partial = partial_dir(directory)
        interrupted = _interrupted_run(partial, resume, tokenizer=tokenizer, settings=settings,
                                       shard_fingerprint=train_set.fingerprint)
        if interrupted is not None:
            tell(f"continuing the interrupted run from its checkpoint at step {interrupted.step} in {partial}")
        with atomic.atomic_dir(directory) as staging:
            summary = train(settings, tokenizer=tokenizer, train_set=train_set, val_set=val_set, output_dir=staging,
                            resume=interrupted or resume, tokenizer_file=tokenizer_file,
                            partial_dir=partial if settings.checkpoint_every else None,
                            on_partial_saved=home.partial_saved, run_start=resume.step if resume is not None else 0,
                            progress=progress, notify=tell)
            if plan.action == "set_aside":
                # named after the checkpoint there now, which another run may have replaced while this one trained
                now = plan_resume(directory, tokenizer=tokenizer, settings=settings,
                                  shard_fingerprint=train_set.fingerprint, retrain=retrain)
                if now.action != "fresh":
                    tell(f"moved the old checkpoint to {home.set_aside(now.tag or 'replaced')}")
        home.publish()
        home.remove_partial()
        return dataclasses.replace(summary, checkpoint=home.name(directory / summary.checkpoint.name))


class _LocalHome:
    """Where a checkpoint directory lives and how its steps are made: here, a local directory, by renames."""

    def __init__(self, directory: Path):
        self.directory = directory

    def name(self, path: Path) -> Path | str:
        """What to call a path under the working directory (its parent) in messages and results."""
        return path

    def words(self, message: str) -> str:
        """``message`` with the paths it names as :meth:`name` calls them."""
        return message

    def partial_saved(self, partial: Path) -> None:
        """A periodic checkpoint was just saved into ``partial``."""

    def set_aside(self, tag: str) -> Path | str:
        """Keep the old checkpoint under a free name ``<name>-<tag>``, before the new one replaces it."""
        return set_aside(self.directory, tag)

    def publish(self) -> None:
        """The new checkpoint is in place in the working directory: make it the checkpoint."""

    def remove_partial(self) -> None:
        partial = partial_dir(self.directory)
        if partial.exists():
            shutil.rmtree(partial)


class _RemoteHome(_LocalHome):
    """A checkpoint directory at a URL, worked on in the local copy ``directory`` (see the module docstring)."""

    def __init__(self, url: str, directory: Path):
        super().__init__(directory)
        self.url = url

    def name(self, path: Path) -> Path | str:
        return self.words(str(path))

    def words(self, message: str) -> str:
        return message.replace(str(self.directory), self.url)

    def partial_saved(self, partial: Path) -> None:
        _commit_copy(partial, self.url + ".partial")

    def set_aside(self, tag: str) -> str:
        target = os.fspath(set_aside_path(self.url, tag))
        _commit_copy(self.directory, target)
        return target

    def publish(self) -> None:
        _commit_copy(self.directory, self.url)

    def remove_partial(self) -> None:
        storage.remove(self.url + ".partial")


@contextlib.contextmanager
def _checkpoint_home(output_dir: str) -> Iterator[_LocalHome]:
    """The home of ``train.output_dir``; for a URL, a scratch copy of its committed checkpoint and partial
    checkpoint, for as long as the run lasts, and errors raised meanwhile name the URL."""
    if not storage.is_url(output_dir):
        yield _LocalHome(Path(output_dir))
        return
    url = os.fspath(output_dir).rstrip("/")
    with tempfile.TemporaryDirectory(prefix="lmprep-") as scratch:
        home = _RemoteHome(url, Path(scratch) / storage.name_of(url))
        for remote, copy in ((url, home.directory), (url + ".partial", partial_dir(home.directory))):
            if storage.exists(remote):
                storage.download_dir(remote, copy)
        try:
            yield home
        except PipelineError as exc:
            exc.args = (home.words(str(exc)),)
            raise


def _commit_copy(directory: Path, url: str) -> None:
    """Upload a local directory as the new committed output at ``url`` (its previous commit stands until then)."""
    with storage.output_dir(url) as attempt:
        storage.upload_dir(directory, attempt)


def partial_dir(directory: str | os.PathLike[str]) -> Path:
    """Where ``train.checkpoint_every`` saves the checkpoints of a run in progress: ``<name>.partial``."""
    directory = Path(directory)
    return directory.with_name(directory.name + ".partial")


def _interrupted_run(partial: Path, resume: Checkpoint | None, *, tokenizer: TokenizerLike, settings: TrainConfig,
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


def _announce(plan: ResumePlan, notify: Notify) -> Checkpoint | None:
    """Say what the run will do; return the checkpoint to resume, if any. Nothing is moved here."""
    if plan.action == "set_aside":
        notify(f"{plan.reason}; training from scratch")
        return None
    if plan.action == "resume":
        notify(plan.reason)
        return plan.checkpoint
    return None


@dataclass
class _Run:
    """The mutable state of one training run."""

    model: BigramLM
    optimizer: torch.optim.Optimizer
    rng: np.random.Generator
    step: int
    metrics: list[dict[str, Any]]


def train(
    settings: TrainConfig,
    *,
    tokenizer: TokenizerLike,
    train_set: ShardSet,
    val_set: ShardSet | None,
    output_dir: str | os.PathLike[str],
    resume: Checkpoint | None = None,
    tokenizer_file: str | os.PathLike[str] | None = None,
    partial_dir: str | os.PathLike[str] | None = None,
    on_partial_saved: Callable[[Path], None] = lambda partial: None,
    run_start: int | None = None,
    progress: bool = False,
    notify: Notify = _ignore,
) -> TrainSummary:
    """Train from ``resume`` (or from scratch) up to step ``settings.steps`` on ``train_set``
    and write checkpoint, metrics and loss plot into ``output_dir``, with a copy of ``tokenizer_file``
    (the file ``tokenizer`` was loaded from) so that the directory is usable on its own. With
    ``partial_dir``, every ``settings.checkpoint_every`` steps the same is saved there (atomically), then
    passed to ``on_partial_saved``;
    ``run_start`` is the step the run began at, when ``resume`` is a checkpoint of it interrupted."""
    model_config = model_config_for(settings, tokenizer)
    _check_inputs(settings, tokenizer, model_config, train_set, val_set)
    if val_set is None or not _holds_window(val_set, settings.context):
        notify(f"the val split has no window of {settings.context + 1} tokens; skipping validation")
        val_set = None
    factors = {split.split: _bits_per_byte_factor(split, tokenizer) for split in (train_set, val_set) if split}
    run_start = run_start if run_start is not None else (resume.step if resume is not None else 0)

    def save(directory: Path, run: _Run, *, final: bool) -> Path:
        _add_bits_per_byte(run.metrics[first:], factors)  # idempotent: also on the records a partial save had
        path = save_checkpoint(
            directory, model=run.model, step=run.step, tokenizer=tokenizer,
            shard_fingerprint=train_set.fingerprint, train_config=dataclasses.asdict(settings),
            optimizer=run.optimizer, numpy_rng_state=run.rng.bit_generator.state,
            extra={"special_ids": dict(train_set.special_ids), "run_start": run_start},
        )
        if final and resume is not None and len(run.metrics) > first:
            run.metrics[first] |= {"resumed": True, "new_shards": resume.shard_fingerprint != train_set.fingerprint}
        _write_metrics(directory, run.metrics, plot=final)
        if tokenizer_file is not None:
            atomic.write_bytes(directory / TOKENIZER_FILE, storage.read_bytes(tokenizer_file))
        return path

    def save_partial(run: _Run) -> None:
        with atomic.atomic_dir(partial_dir) as staging:
            save(staging, run, final=False)
        on_partial_saved(Path(partial_dir))

    every = settings.checkpoint_every if partial_dir is not None else None
    with _deterministic():
        run = _start(settings, model_config, resume)
        first = len(run.metrics)
        summary = _loop(run, settings, train_set, val_set, target=settings.steps, progress=progress,
                        every=every, on_every=save_partial)
        path = save(Path(output_dir), run, final=True)
    return dataclasses.replace(summary, checkpoint=path)


def _check_inputs(settings: TrainConfig, tokenizer: TokenizerLike, model_config: ModelConfig, train_set: ShardSet,
                  val_set: ShardSet | None) -> None:
    for shard_set in (train_set, val_set):
        if shard_set is not None:
            check_agreement(tokenizer, model_config, shard_set)
    check_fits_in_memory(settings, model_config)


def check_fits_in_memory(settings: TrainConfig, model_config: ModelConfig) -> None:
    """Refuse a model and batch shape whose estimated memory exceeds the machine's physical memory."""
    needed = training_memory_bytes(model_config, batch_size=settings.batch_size, context=settings.context)
    available = _physical_memory()
    if available is not None and needed > available:
        raise TrainingError(
            f"train.dim={settings.dim}, train.batch_size={settings.batch_size} and train.context={settings.context} "
            f"with vocab size {model_config.vocab_size} need about {needed / 2**30:,.1f} GiB, more than this "
            f"machine's {available / 2**30:,.1f} GiB of memory; lower them"
        )


def _physical_memory() -> int | None:
    """Bytes of physical memory, or None where the platform does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def _start(settings: TrainConfig, model_config: ModelConfig, resume: Checkpoint | None) -> _Run:
    torch.manual_seed(settings.seed)
    model = BigramLM(model_config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.lr, weight_decay=settings.weight_decay)
    rng = np.random.default_rng(settings.seed)
    if resume is None:
        return _Run(model, optimizer, rng, step=0, metrics=[])
    model.load_state_dict(resume.model.state_dict())
    if resume.optimizer_state is not None:
        optimizer.load_state_dict(resume.optimizer_state)
    if resume.numpy_rng_state is not None:
        rng.bit_generator.state = resume.numpy_rng_state
    if resume.torch_rng_state is not None:
        torch.set_rng_state(resume.torch_rng_state)
    return _Run(model, optimizer, rng, step=resume.step, metrics=_read_metrics(resume.path.parent, resume.step))


def _loop(run: _Run, settings: TrainConfig, train_set: ShardSet, val_set: ShardSet | None, *,
          target: int, progress: bool, every: int | None = None,
          on_every: Callable[[_Run], None] = lambda run: None) -> TrainSummary:
    from pipeline.engine.progress import Progress

    start_step, tokens_per_step = run.step, settings.batch_size * settings.context
    data_seconds = train_loss = val_loss = 0.0
    began = time.perf_counter()
    with Progress("train", total=target, initial=run.step, enabled=progress, unit="steps") as bar:
        while run.step < target:
            tick = time.perf_counter()
            batch = torch.from_numpy(train_set.sample_batch(run.rng, settings.batch_size, settings.context))
            data_seconds += time.perf_counter() - tick
            train_loss = _finite(_step(run, batch), "train", run.step, settings)
            record: dict[str, Any] = {"step": run.step, "train_loss": train_loss}
            if val_set is not None and (run.step % settings.eval_every == 0 or run.step == target):
                record["val_loss"] = val_loss = _finite(_evaluate(run.model, val_set, settings), "val", run.step,
                                                        settings)
            run.metrics.append(record)
            if every and run.step % every == 0 and run.step < target:
                on_every(run)
            rate = (run.step - start_step) * tokens_per_step / (time.perf_counter() - began)
            bar.note(loss=f"{train_loss:.3f}", tok_s=f"{rate:,.0f}")
            bar.update()
    return TrainSummary(
        checkpoint=Path(), start_step=start_step, step=run.step,
        tokens=(run.step - start_step) * tokens_per_step, seconds=time.perf_counter() - began,
        data_seconds=data_seconds, train_loss=train_loss if run.step > start_step else None,
        val_loss=val_loss if val_set is not None and run.step > start_step else None,
    )


def _finite(loss: float, split: str, step: int, settings: TrainConfig) -> float:
    """``loss``, or a TrainingError if it is NaN or infinite: training cannot recover from that."""
    if not math.isfinite(loss):
        raise TrainingError(f"the {split} loss became {loss} at step {step} (train.lr={settings.lr}); training "
                            "stopped and nothing was saved; lower train.lr")
    return loss


def _step(run: _Run, batch: torch.Tensor) -> float:
    loss = run.model.loss(batch[:, :-1], batch[:, 1:])
    run.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    run.optimizer.step()
    run.step += 1
    return loss.item()


def _evaluate(model: BigramLM, val_set: ShardSet, settings: TrainConfig) -> float:
    """Mean loss over the same ``eval_batches`` val windows at every evaluation."""
    rng = np.random.default_rng([settings.seed, 1])
    with torch.no_grad():
        losses = [
            model.loss(batch[:, :-1], batch[:, 1:]).item()
            for batch in (
                torch.from_numpy(val_set.sample_batch(rng, settings.batch_size, settings.context))
                for _ in range(settings.eval_batches)
            )
        ]
    return float(np.mean(losses))


def _bits_per_byte_factor(shard_set: ShardSet, tokenizer: TokenizerLike) -> float | None:
    """What turns a mean loss in nats per token into bits per byte of the split's text."""
    from pipeline.shards.stats import text_bytes

    size = text_bytes(shard_set, tokenizer)
    return shard_set.num_tokens / (size * math.log(2)) if size else None


def _add_bits_per_byte(records: list[dict[str, Any]], factors: Mapping[str, float | None]) -> None:
    for record in records:
        for split, factor in factors.items():
            if f"{split}_loss" in record and factor is not None:
                record[f"{split}_bits_per_byte"] = record[f"{split}_loss"] * factor


def _holds_window(shard_set: ShardSet, context: int) -> bool:
    return any(shard.num_tokens > context for shard in shard_set.shards)


@contextlib.contextmanager
def _deterministic() -> Iterator[None]:
    """Deterministic kernels on one intra-op thread for the run, then the caller's settings again.

    One thread: the model's matmuls are a few MFLOP per step, too small to gain
    from a second thread, and OpenMP workers spinning on a busy 2-core machine
    made the default config train at 13k instead of 167k tokens/s. It also makes
    the weights independent of the machine's core count.
    """
    previous = torch.are_deterministic_algorithms_enabled(), torch.get_num_threads()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(previous[0])
        torch.set_num_threads(previous[1])


def _read_metrics(directory: Path, up_to_step: int) -> list[dict[str, Any]]:
    """The metrics a resumed run inherits: the previous log up to the checkpoint's step."""
    path = directory / METRICS_FILE
    try:
        lines = path.read_bytes().splitlines()
    except FileNotFoundError:
        return []
    records = [_parse_metrics_line(path, number, line) for number, line in enumerate(lines, 1) if line.strip()]
    return [record for record in records if record["step"] <= up_to_step]


def _parse_metrics_line(path: Path, number: int, line: bytes) -> dict[str, Any]:
    """One record of the metrics log; a damaged line stops the resume rather than being dropped silently."""
    try:
        record = json.loads(line.decode("utf-8"))
    except ValueError:  # not UTF-8 or not JSON
        record = None
    if not isinstance(record, dict) or type(record.get("step")) is not int:
        raise CheckpointError(
            f"{path} line {number} is not a metrics record ({line[:60].decode('utf-8', 'backslashreplace')!r}); "
            "delete that line, or the whole file, to resume from the checkpoint beside it"
        )
    return record


def _write_metrics(directory: Path, metrics: list[dict[str, Any]], *, plot: bool = True) -> None:
    lines = "".join(atomic.dumps_json(record, indent=None) + "\n" for record in metrics)
    atomic.write_text(directory / METRICS_FILE, lines)
    if metrics and plot:
        _plot_losses(directory / LOSS_PLOT_FILE, metrics)


def _plot_losses(path: Path, metrics: list[dict[str, Any]]) -> None:
    """Loss against step, in nats per token (left) and bits per byte (right), resumes marked by dashed lines.

    Drawn with Agg (no display, no pyplot state). Bits per byte do not depend on the tokenizer,
    so runs with byte and char tokenizers, or different vocabulary sizes, compare on the right.
    """
    from matplotlib.figure import Figure

    figure = Figure(figsize=(11, 4), dpi=100, layout="constrained")
    nats, bits = figure.subplots(1, 2)
    for axes, unit, label in ((nats, "loss", "cross-entropy, nats per token"),
                              (bits, "bits_per_byte", "bits per byte of text")):
        for split, style in (("train", {"linewidth": 1}), ("val", {"marker": "o"})):
            points = [(r["step"], r[f"{split}_{unit}"]) for r in metrics if f"{split}_{unit}" in r]
            if points:
                axes.plot(*zip(*points), label=split, **style)
        for record in metrics:
            if record.get("resumed"):
                why = "resumed on new shards" if record.get("new_shards") else "resumed"
                axes.axvline(record["step"] - 1, color="grey", linestyle="--", linewidth=1)
                axes.annotate(f"{why} at step {record['step'] - 1:,}", (record["step"] - 1, 1), xycoords=("data", "axes fraction"),
                              rotation=90, va="top", ha="right", fontsize=8, color="grey")
        axes.set(xlabel="step", ylabel=label)
        axes.grid(alpha=0.3)
        axes.legend()
    figure.suptitle("training loss")
    with atomic.atomic_path(path) as tmp:
        figure.savefig(tmp, format="png")
