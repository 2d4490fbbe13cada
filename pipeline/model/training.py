"""Train the bigram model on the shards: the loop, its metrics and the loss plot.

Batches are random windows drawn from the memory-mapped shards by a numpy
generator seeded from ``train.seed``; the model is initialised after
``torch.manual_seed(train.seed)``. Both RNG states and the AdamW state go into
the checkpoint, so a run of 300 steps and a run of 100 resumed to 300 end with
the same weights, bit for bit, on the same CPU.

Validation uses its own generator, reseeded for every evaluation, so every
evaluation scores the same val windows and evaluating never shifts the
training batches.

Whether a run resumes or starts from scratch is decided by :mod:`pipeline.model.resume`; where the
checkpoint lives and how it is replaced (a local directory, or a URL) by :mod:`pipeline.model.homes`.

Each metrics record holds the loss in nats per token and in bits per byte
(nats / ln 2 × tokens / UTF-8 bytes of the split): unlike the first, the second
compares across tokenizers, and ``source_tokens``, the input tokens of the
step's batch from each source (a list by index in ``data.sources``): their sums
over the records are the mixture achieved, which the summary compares with
the target (:mod:`pipeline.shards.mixture`). The first record after a resume is marked.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from pipeline.engine import atomic, storage
from pipeline.engine.locations import Location
from pipeline.errors import CheckpointError, ShardError, TokenizerMismatchError, TrainingError, shorten
from pipeline.model.bigram import BigramLM, ModelConfig, padded_vocab_size, training_memory_bytes
from pipeline.model.checkpoint import TOKENIZER_FILE, Checkpoint, TokenizerLike, save_checkpoint
from pipeline.model.homes import checkpoint_home, partial_dir
from pipeline.model.integrity import MAX_COMPANION_BYTES
from pipeline.model.resume import ResumePlan, interrupted_run, plan_resume
from pipeline.shards.mixture import MixtureSampler, mixture_report

if TYPE_CHECKING:
    from pipeline.config import TrainConfig
    from pipeline.shards.format import ShardSet

METRICS_FILE = "metrics.jsonl"
LOSS_PLOT_FILE = "loss.png"

Notify = Callable[[str], None]


def _ignore(message: str) -> None:
    """The default ``notify``: library code prints nothing unless asked."""


@dataclass(frozen=True)
class TrainSummary:
    """What a training run did, for the CLI and the benchmark."""

    checkpoint: Location  # a URL for a remote train.output_dir
    start_step: int
    step: int
    tokens: int = 0
    seconds: float = 0.0
    data_seconds: float = 0.0
    train_loss: float | None = None
    val_loss: float | None = None
    mixture: tuple[dict[str, Any], ...] = ()  # per source: tokens seen over the whole run, share, target share

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0

    @property
    def data_share(self) -> float:
        """Fraction of step time spent sampling batches from the shards."""
        return self.data_seconds / self.seconds if self.seconds else 0.0


def model_config_for(settings: TrainConfig, tokenizer: TokenizerLike) -> ModelConfig:
    """The model shape: vocab size from the tokenizer (padded as ``train.pad_vocab_to`` says), the rest from
    ``train``."""
    return ModelConfig(vocab_size=padded_vocab_size(tokenizer.vocab_size, settings.pad_vocab_to), dim=settings.dim,
                       tie_weights=settings.tie_weights)


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
            f"{where} records vocab size {shard_set.vocab_size:,}, the tokenizer has {tokenizer.vocab_size:,}"
        )
    if model_config.vocab_size < tokenizer.vocab_size:
        raise TokenizerMismatchError(
            f"the model has vocab size {model_config.vocab_size:,}, the tokenizer {tokenizer.vocab_size:,}"
        )
    if shard_set.num_tokens and shard_set.max_id >= model_config.vocab_size:
        raise ShardError(
            f"{where} holds token ID {shard_set.max_id}, outside the model's vocab size "
            f"{model_config.vocab_size:,}; re-encode with `lmprep run encode`"
        )


def train_checkpoint_dir(
    settings: TrainConfig,
    *,
    tokenizer: TokenizerLike,
    train_set: ShardSet,
    val_set: ShardSet | None,
    tokenizer_file: Location | None = None,
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
    and published step by step (see :mod:`pipeline.model.homes`).
    """
    model_config = model_config_for(settings, tokenizer)
    _check_inputs(settings, tokenizer, model_config, train_set, val_set)  # before anything is written
    with checkpoint_home(settings.output_dir) as home:
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
        interrupted = interrupted_run(partial, resume, tokenizer=tokenizer, settings=settings,
                                      shard_fingerprint=train_set.fingerprint)
        if interrupted is not None:
            tell(f"continuing the interrupted run from its checkpoint at step {interrupted.step:,} in {partial}")
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
    output_dir: Location,
    resume: Checkpoint | None = None,
    tokenizer_file: Location | None = None,
    partial_dir: Location | None = None,
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
    # as the checkpoint records them: not output_dir, a path from wherever the command ran, so that a checkpoint's
    # bytes do not depend on the working directory (no resume decision reads it)
    recorded_settings = {key: value for key, value in dataclasses.asdict(settings).items() if key != "output_dir"}

    def save(directory: Path, run: _Run, *, final: bool) -> Path:
        _add_bits_per_byte(run.metrics[first:], factors)  # idempotent: also on the records a partial save had
        if resume is not None and len(run.metrics) > first:  # also in a periodic save, which a later run may continue
            run.metrics[first] |= {"resumed": True, "new_shards": resume.shard_fingerprint != train_set.fingerprint}
        companions = {METRICS_FILE: _metrics_text(run.metrics).encode("utf-8")}
        if tokenizer_file is not None:
            companions[TOKENIZER_FILE] = storage.read_bytes(tokenizer_file)
        path = save_checkpoint(  # its metadata holds the companions' checksums: every read of it checks them
            directory, model=run.model, step=run.step, tokenizer=tokenizer,
            shard_fingerprint=train_set.fingerprint, train_config=recorded_settings,
            optimizer=run.optimizer, numpy_rng_state=run.rng.bit_generator.state,
            extra={"special_ids": dict(train_set.special_ids), "run_start": run_start}, companions=companions,
        )
        if final and run.metrics:
            _plot_losses(directory / LOSS_PLOT_FILE, run.metrics)
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
    MixtureSampler(train_set, settings.mixture, settings.context)  # refuses weights the shards cannot serve


def check_fits_in_memory(settings: TrainConfig, model_config: ModelConfig) -> None:
    """Refuse a model and batch shape whose estimated memory exceeds the machine's physical memory."""
    needed = training_memory_bytes(model_config, batch_size=settings.batch_size, context=settings.context)
    available = _physical_memory()
    if available is not None and needed > available:
        raise TrainingError(
            f"train.dim={settings.dim}, train.batch_size={settings.batch_size} and train.context={settings.context} "
            f"with vocab size {model_config.vocab_size:,} need about {needed / 2**30:,.1f} GiB, more than this "
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
    sampler = MixtureSampler(train_set, settings.mixture, settings.context)
    began = time.perf_counter()
    with Progress("train", total=target, initial=run.step, enabled=progress, unit="steps") as bar:
        while run.step < target:
            tick = time.perf_counter()
            windows, source_tokens = sampler.sample(run.rng, settings.batch_size)
            batch = torch.from_numpy(windows)
            data_seconds += time.perf_counter() - tick
            train_loss = _finite(_step(run, batch), "train", run.step, settings)
            record: dict[str, Any] = {"step": run.step, "train_loss": train_loss, "source_tokens": source_tokens}
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
        mixture=tuple(mixture_report(achieved_tokens(run.metrics), sampler.shares)),
    )


def achieved_tokens(metrics: list[dict[str, Any]]) -> list[int]:
    """Input tokens seen per source over the records (those of a run before sources were counted add none)."""
    totals: list[int] = []
    for record in metrics:
        counts = record.get("source_tokens", [])
        totals += [0] * (len(counts) - len(totals))
        for source, tokens in enumerate(counts):
            totals[source] += tokens
    return totals


def _finite(loss: float, split: str, step: int, settings: TrainConfig) -> float:
    """``loss``, or a TrainingError if it is NaN or infinite: training cannot recover from that."""
    if not math.isfinite(loss):
        raise TrainingError(f"the {split} loss became {loss} at step {step:,} (train.lr={settings.lr}); training "
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
    from a second thread, and OpenMP workers spinning on a busy machine slowed
    the default config down by an order of magnitude (docs/performance.md). It
    also makes the weights independent of the machine's core count.
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
    try:  # its checksum was checked with the checkpoint's
        lines = storage.read_bounded(path, MAX_COMPANION_BYTES, what="metrics log").splitlines()
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
        shown = shorten(repr(line.decode("utf-8", "backslashreplace")), 60)
        raise CheckpointError(
            f"{path} line {number} is not a metrics record ({shown}); "
            "delete that line, or the whole file, to resume from the checkpoint beside it"
        )
    return record


def _metrics_text(metrics: list[dict[str, Any]]) -> str:
    return "".join(atomic.dumps_json(record, indent=None) + "\n" for record in metrics)


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
                axes.annotate(f"{why} at step {record['step'] - 1:,}", (record["step"] - 1, 1),
                              xycoords=("data", "axes fraction"), rotation=90, va="top", ha="right", fontsize=8,
                              color="grey")
        axes.set(xlabel="step", ylabel=label)
        axes.grid(alpha=0.3)
        axes.legend()
    figure.suptitle("training loss")
    with atomic.atomic_path(path) as tmp:
        figure.savefig(tmp, format="png")
