"""Summaries of a shard set: counts, compression, the most frequent tokens, document lengths.

Every figure comes from one pass of ``np.bincount`` over the mapped token
stream; no Python loop touches individual tokens.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from pipeline import atomic
from pipeline.shards import ShardSet
from pipeline.tokenizer import Tokenizer


@dataclass(frozen=True)
class SplitStats:
    split: str
    documents: int
    tokens: int
    text_bytes: int  # UTF-8 bytes the non-special tokens stand for
    top_tokens: list[tuple[int, int]]  # (ID, count), most frequent first
    document_lengths: np.ndarray  # tokens per document, specials included

    @property
    def bytes_per_token(self) -> float:
        return self.text_bytes / self.tokens if self.tokens else 0.0


def split_stats(shard_set: ShardSet, tokenizer: Tokenizer, *, top: int = 10) -> SplitStats:
    counts = np.zeros(shard_set.vocab_size, dtype=np.int64)
    for shard in shard_set.shards:
        counts += np.bincount(shard.tokens, minlength=shard_set.vocab_size)
    specials = set(tokenizer.special_tokens.values())
    widths = np.array([0 if i in specials else len(tokenizer.token_bytes(i)) for i in range(len(counts))])
    order = np.argsort(-counts, kind="stable")[:top]
    lengths = [np.diff(shard.offsets) for shard in shard_set.shards]
    return SplitStats(
        split=shard_set.split,
        documents=shard_set.num_documents,
        tokens=shard_set.num_tokens,
        text_bytes=int(counts @ widths),
        top_tokens=[(int(i), int(counts[i])) for i in order if counts[i]],
        document_lengths=np.concatenate(lengths) if lengths else np.zeros(0, dtype=np.int64),
    )


def plot_document_lengths(lengths: Mapping[str, np.ndarray], path: str | os.PathLike[str]) -> None:
    """A PNG histogram of tokens per document, one series per split (matplotlib loaded only here)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4))
    for split, values in lengths.items():
        if len(values):
            axes.hist(values, bins=50, alpha=0.6, label=f"{split} ({len(values):,} documents)")
    axes.set(xlabel="tokens per document", ylabel="documents", title="Document lengths")
    axes.legend()
    with atomic.atomic_path(path) as tmp:
        figure.savefig(tmp, format="png", dpi=100)
    plt.close(figure)
