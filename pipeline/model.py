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


def training_memory_bytes(config: ModelConfig, *, batch_size: int, context: int) -> int:
    """A lower estimate of the memory a training step takes, to refuse a shape before allocating it.

    Weights, gradients and AdamW's two moments are four float32 copies of the
    parameters; a batch is a few int64 index arrays of its positions; the loss
    holds an embedding row (and its gradient) per distinct token of the batch
    and a chunk of logits. torch's own ~100 MB are not counted.
    """
    parameters = config.vocab_size * config.dim * (1 if config.tie_weights else 2)
    positions = batch_size * (context + 1)
    distinct = min(batch_size * context, config.vocab_size)
    return 16 * parameters + 48 * positions + distinct * 8 * config.dim + 12 * LOGIT_CHUNK_VALUES


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
        loss is ``logsumexp(z) - z[target]`` of its token's row ``z``. The rows
        are never materialised whole: :class:`_BigramCrossEntropy` takes them a
        few at a time and recomputes them in the backward pass. Whole, at vocab
        8192 they were tens of MB per step, more than the allocator keeps, so
        every step asked the kernel for fresh pages (a quarter of the step time
        was system time). Mathematically equal to ``cross_entropy(self(ids), targets)``.
        """
        head = self.embed.weight if self.head is None else self.head.weight
        flat_targets = targets.reshape(-1)
        distinct, row_of_position, counts = torch.unique(ids.reshape(-1), return_inverse=True, return_counts=True)
        order = torch.argsort(row_of_position, stable=True)  # positions grouped by row, for chunking
        total = _BigramCrossEntropy.apply(self.embed(distinct), head, counts, row_of_position[order],
                                          flat_targets[order])
        return total / flat_targets.numel()


LOGIT_CHUNK_VALUES = 1 << 16
"""Logits computed at once by the loss (256 KiB of float32): small enough for the allocator to reuse."""


class _BigramCrossEntropy(torch.autograd.Function):
    """The summed cross-entropy of positions whose logits are ``rows[r] @ headᵀ``, a chunk of rows at a time.

    ``counts[r]`` positions have row ``r``; ``position_rows`` and ``position_targets``
    list every position's row and target, grouped by row. Forward sums
    ``counts[r] · logsumexp(z_r)`` minus each position's ``z_r[target]``; backward
    recomputes each chunk's logits (the gradient of ``z_r`` is ``counts[r] ·
    softmax(z_r)`` minus one at each of its positions' targets), so memory is
    one chunk of logits whatever the vocabulary size.
    """

    @staticmethod
    def forward(ctx: Any, rows: torch.Tensor, head: torch.Tensor, counts: torch.Tensor,
                position_rows: torch.Tensor, position_targets: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(rows, head, counts, position_rows, position_targets)
        total = rows.new_zeros(())
        for rows_at, logits_at in _chunks(counts, position_rows, position_targets, head.shape[0]):
            logits = rows[rows_at] @ head.T
            total += torch.dot(torch.logsumexp(logits, dim=1), counts[rows_at].to(logits.dtype))
            total -= logits.view(-1).take(logits_at).sum()
        return total

    @staticmethod
    def backward(ctx: Any, grad_total: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        rows, head, counts, position_rows, position_targets = ctx.saved_tensors
        grad_rows, grad_head = torch.empty_like(rows), torch.zeros_like(head)
        for rows_at, logits_at in _chunks(counts, position_rows, position_targets, head.shape[0]):
            grad_logits = torch.softmax(rows[rows_at] @ head.T, dim=1)
            grad_logits *= counts[rows_at].to(grad_logits.dtype).unsqueeze(1)
            grad_logits.view(-1).index_put_((logits_at,), grad_logits.new_tensor(-1.0), accumulate=True)
            grad_logits *= grad_total
            torch.mm(grad_logits, head, out=grad_rows[rows_at])
            grad_head.addmm_(grad_logits.T, rows[rows_at])
        return grad_rows, grad_head, None, None, None


def _chunks(counts: torch.Tensor, position_rows: torch.Tensor, position_targets: torch.Tensor,
            vocab_size: int) -> Iterator[tuple[slice, torch.Tensor]]:
    """Per chunk of rows: its slice of rows, and the flat index of each of its positions' target logit."""
    step = max(1, LOGIT_CHUNK_VALUES // vocab_size)
    starts = [0, *torch.cumsum(counts, 0).tolist()]
    for first in range(0, len(counts), step):
        last = min(first + step, len(counts))
        at = slice(starts[first], starts[last])
        yield slice(first, last), (position_rows[at] - first) * vocab_size + position_targets[at]


def generate(
    model: BigramLM,
    prompt_ids: list[int],
    *,
    max_tokens: int,
    temperature: float = 1.0,
    stop_ids: Collection[int] = (),
    generator: torch.Generator | None = None,
) -> Iterator[int]:
    """Yield up to ``max_tokens`` new IDs after ``prompt_ids``, ending after a stop ID.

    The stop ID itself is yielded so the caller can see why generation ended.
    ``temperature`` 0 picks the most likely token (greedy); higher is more random.
    A bigram model needs only the last ID, so the prompt must not be empty.
    """
    if not prompt_ids:
        raise ValueError("generate needs at least one prompt ID")
    current = prompt_ids[-1]
    with torch.no_grad():
        for _ in range(max_tokens):
            logits = model(torch.tensor([[current]]))[0, -1]
            current = _pick(logits, temperature, generator)
            yield current
            if current in stop_ids:
                return


def _pick(logits: torch.Tensor, temperature: float, generator: torch.Generator | None) -> int:
    if temperature <= 0:
        return int(torch.argmax(logits))
    probs = torch.softmax(logits / temperature, dim=-1)
    return int(torch.multinomial(probs, 1, generator=generator))


def _is_positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
