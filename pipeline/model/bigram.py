"""A tiny bigram language model: the smallest model that can consume the shards.

Each token's embedding (``vocab_size × dim``) is projected by an output head
(``dim × vocab_size``) to logits over the next token, so the model learns
P(next | current) and nothing more. With ``tie_weights`` the head reuses the
embedding matrix, halving the parameters (2 × 2048 × 64 = 262k untied,
131k tied). It exists to prove the pipeline end to end, not to write prose.

torch is imported here at module level; nothing outside the model, checkpoint
and training modules imports this module eagerly.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterator
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from pipeline.errors import CheckpointError


@dataclass(frozen=True)
class ModelConfig:
    """Everything needed to rebuild the model's shape; stored in every checkpoint."""

    vocab_size: int
    dim: int
    tie_weights: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> ModelConfig:
        """Rebuild from checkpoint metadata, refusing missing or mistyped fields."""
        try:
            config = cls(
                vocab_size=data["vocab_size"], dim=data["dim"], tie_weights=data["tie_weights"]
            )
        except (KeyError, TypeError) as exc:
            raise CheckpointError(f"model config {data!r} is incomplete: {exc}") from None
        if not (_is_positive_int(config.vocab_size) and _is_positive_int(config.dim)):
            raise CheckpointError(f"model config {data!r} needs positive integer vocab_size and dim")
        if not isinstance(config.tie_weights, bool):
            raise CheckpointError(f"model config {data!r}: tie_weights must be true or false")
        return config


def padded_vocab_size(vocab_size: int, multiple: int | None) -> int:
    """The model's vocab size for a tokenizer of ``vocab_size`` IDs: rounded up to a multiple of
    ``train.pad_vocab_to`` (as nanoGPT pads GPT-2's 50,257 to 50,304 = 786 × 64, for faster matrix
    shapes), or the tokenizer's own with None. The extra rows are IDs no tokenizer emits."""
    return vocab_size if multiple is None else -(-vocab_size // multiple) * multiple


def training_memory_bytes(config: ModelConfig, *, batch_size: int, context: int) -> int:
    """A lower estimate of the memory a training step takes, to refuse a shape before allocating it.

    Weights, gradients and AdamW's two moments are four float32 copies of the
    parameters; a batch is a few int64 index arrays of its positions; the loss
    holds an embedding row (and its gradient) per distinct token of the batch
    and, in a buffer kept from step to step, a row of logits per distinct token.
    torch's own ~100 MB are not counted.
    """
    parameters = config.vocab_size * config.dim * (1 if config.tie_weights else 2)
    positions = batch_size * (context + 1)
    distinct = min(batch_size * context, config.vocab_size)
    return 16 * parameters + 48 * positions + distinct * (8 * config.dim + 5 * config.vocab_size)


class BigramLM(nn.Module):
    """Token embedding followed by a linear head: logits for the next token."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.dim)
        self.head = None if config.tie_weights else nn.Linear(config.dim, config.vocab_size, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """``ids`` [batch, time] → logits [batch, time, vocab_size]."""
        head = self.embed.weight if self.head is None else self.head.weight
        return F.linear(self.embed(ids), head)

    def loss(self, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy of predicting ``targets`` from ``ids`` (same shape).

        A bigram model's logits depend only on the current token, so they are
        computed once per distinct token of the batch (text is Zipf-like: a batch
        of 64 × 256 positions holds a few hundred distinct IDs), and a position's
        loss is ``logsumexp(z) - z[target]`` of its token's row ``z``. The rows go
        into a buffer the model keeps from step to step (:class:`_LogitsBuffer`),
        turned into probabilities in place and reused by the backward pass: a new
        ``[distinct, vocab]`` tensor per step, tens of MB at vocab 8192, was more
        than the allocator keeps, so every step asked the kernel for fresh pages
        (a quarter of the step time was system time). Mathematically equal to
        ``cross_entropy(self(ids), targets)``.
        """
        head = self.embed.weight if self.head is None else self.head.weight
        flat_targets = targets.reshape(-1)
        distinct, row_of_position, counts = torch.unique(ids.reshape(-1), return_inverse=True, return_counts=True)
        target_at = row_of_position * head.shape[0] + flat_targets  # flat index of each target logit
        total = _BigramCrossEntropy.apply(self.embed(distinct), head, counts, target_at, self._buffer)
        return total / flat_targets.numel()

    @property
    def _buffer(self) -> _LogitsBuffer:
        if "_logits_buffer" not in self.__dict__:
            self.__dict__["_logits_buffer"] = _LogitsBuffer()
        return self.__dict__["_logits_buffer"]


class _LogitsBuffer:
    """A ``[rows, vocab]`` float buffer reused by every loss of one model, grown when a batch needs more rows.

    ``generation`` counts the losses computed into it, so that a backward pass can tell
    that a later loss overwrote the probabilities it needs.
    """

    def __init__(self) -> None:
        self.storage = torch.empty(0)
        self.generation = 0

    def take(self, rows: int, vocab_size: int, dtype: torch.dtype) -> torch.Tensor:
        if self.storage.numel() < rows * vocab_size or self.storage.dtype != dtype:
            # a quarter more than asked, so that batches with a few more distinct tokens fit too
            self.storage = torch.empty(rows * vocab_size * 5 // 4, dtype=dtype)
        self.generation += 1
        return self.storage[: rows * vocab_size].view(rows, vocab_size)


class _BigramCrossEntropy(torch.autograd.Function):
    """The summed cross-entropy of positions whose logits are ``rows[r] @ headᵀ``.

    ``counts[r]`` positions have row ``r``; ``target_at`` is each position's target
    logit as a flat index into the ``[rows, vocab]`` logits. Forward computes the
    logits into ``buffer`` and leaves the softmax there; backward turns it into
    the logits' gradient, ``counts[r] · softmax(z_r)`` minus one at each
    position's target, in place.
    """

    @staticmethod
    def forward(ctx: Any, rows: torch.Tensor, head: torch.Tensor, counts: torch.Tensor, target_at: torch.Tensor,
                buffer: _LogitsBuffer) -> torch.Tensor:
        logits = buffer.take(len(rows), head.shape[0], rows.dtype)
        torch.mm(rows, head.T, out=logits)
        target_total = logits.view(-1).take(target_at).sum()
        peak = logits.amax(dim=1, keepdim=True)
        probs = logits.sub_(peak).exp_()
        sums = probs.sum(dim=1, keepdim=True)
        probs.div_(sums)
        lse = peak.squeeze(1) + sums.squeeze(1).log()
        ctx.save_for_backward(rows, head, counts, target_at)
        ctx.buffer, ctx.generation, ctx.probs = buffer, buffer.generation, probs
        return torch.dot(lse, counts.to(lse.dtype)) - target_total

    @staticmethod
    def backward(ctx: Any, grad_total: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        rows, head, counts, target_at = ctx.saved_tensors
        if ctx.buffer.generation != ctx.generation:
            raise RuntimeError("BigramLM.loss: another loss of this model was computed before this one's "
                               "backward(); call backward() on each loss before computing the next")
        grad_logits = ctx.probs.mul_(counts.to(ctx.probs.dtype).unsqueeze(1))
        grad_logits.view(-1).index_put_((target_at,), grad_logits.new_tensor(-1.0), accumulate=True)
        grad_logits.mul_(grad_total)
        return grad_logits @ head, grad_logits.T @ rows, None, None, None


def generate(
    model: BigramLM,
    prompt_ids: list[int],
    *,
    max_tokens: int,
    temperature: float = 1.0,
    stop_ids: Collection[int] = (),
    generator: torch.Generator | None = None,
    vocab_size: int | None = None,
    top_k: int | None = None,
    top_p: float | None = None,
) -> Iterator[int]:
    """Yield up to ``max_tokens`` new IDs after ``prompt_ids``, ending after a stop ID.

    The stop ID itself is yielded so the caller can see why generation ended.
    ``temperature`` 0 picks the most likely token (greedy); higher is more random. ``top_k`` samples among
    the k most likely tokens only, ``top_p`` among the fewest whose probabilities add up to p (nucleus).
    Only IDs below ``vocab_size`` (the tokenizer's, when the model's is padded) are picked.
    A bigram model needs only the last ID, so the prompt must not be empty.
    """
    if not prompt_ids:
        raise ValueError("generate needs at least one prompt ID")
    current = prompt_ids[-1]
    with torch.no_grad():
        for _ in range(max_tokens):
            logits = model(torch.tensor([[current]]))[0, -1, :vocab_size]
            current = _pick(logits, temperature, generator, top_k=top_k, top_p=top_p)
            yield current
            if current in stop_ids:
                return


def _pick(logits: torch.Tensor, temperature: float, generator: torch.Generator | None, *,
          top_k: int | None = None, top_p: float | None = None) -> int:
    if temperature <= 0:
        return int(torch.argmax(logits))
    logits = logits / temperature
    if top_k is not None and top_k < logits.numel():
        logits = logits.masked_fill(logits < torch.topk(logits, top_k).values[-1], -math.inf)
    probs = torch.softmax(logits, dim=-1)
    if top_p is not None and top_p < 1:
        ranked, order = torch.sort(probs, descending=True, stable=True)
        outside = ranked.cumsum(0) - ranked >= top_p  # the mass before a token already reaches p
        probs = probs.index_fill(0, order[outside], 0.0)
    return int(torch.multinomial(probs, 1, generator=generator))


def _is_positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
