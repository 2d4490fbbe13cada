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
    holds an embedding row (and its gradient) and about six float32 rows of
    logits-sized tensors per distinct token of the batch, at most one per
    vocabulary entry. torch's own ~100 MB are not counted.
    """
    parameters = config.vocab_size * config.dim * (1 if config.tie_weights else 2)
    positions = batch_size * (context + 1)
    distinct = min(batch_size * context, config.vocab_size)
    return 16 * parameters + 48 * positions + distinct * (8 * config.dim + 24 * config.vocab_size)


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

        A bigram model's prediction depends only on the current token, so the
        log-probabilities are computed once per distinct token in the batch
        and gathered per position. Text is Zipf-like: a batch of 64 × 256
        positions holds a few hundred distinct IDs, so this does several times
        less work than the usual ``cross_entropy(self(ids), targets)``, to
        which it is mathematically equal.
        """
        distinct, position_row = torch.unique(ids.reshape(-1), return_inverse=True)
        log_probs = F.log_softmax(self(distinct), dim=-1)
        return -log_probs.reshape(-1).take(position_row * self.config.vocab_size + targets.reshape(-1)).mean()


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
