"""Summaries of a shard set: counts, compression, the most frequent tokens, document lengths.

Every figure comes from one pass of ``np.bincount`` over the mapped token
stream; no Python loop touches individual tokens.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipeline.engine import atomic
from pipeline.shards.format import ShardSet
from pipeline.tokenizer import Tokenizer


@dataclass(frozen=True)
class SplitStats:
    split: str
    documents: int
    tokens: int
    text_bytes: int  # UTF-8 bytes the non-special tokens stand for
    top_tokens: list[tuple[int, int]]  # (ID, count), most frequent first
    document_lengths: np.ndarray  # tokens per document, specials included
    sources: list[dict[str, int]]  # per source with rows in the split: its index, rows and tokens (the manifest's)

    @property
    def bytes_per_token(self) -> float:
        return self.text_bytes / self.tokens if self.tokens else 0.0


def token_counts(shard_set: ShardSet) -> np.ndarray:
    """How often each ID occurs in the split."""
    counts = np.zeros(shard_set.vocab_size, dtype=np.int64)
    for shard in shard_set.shards:
        counts += np.bincount(shard.tokens, minlength=shard_set.vocab_size)
    return counts


def text_bytes(shard_set: ShardSet, tokenizer: Tokenizer, counts: np.ndarray | None = None) -> int:
    """The UTF-8 bytes of text the split's tokens stand for (special tokens stand for none)."""
    counts = token_counts(shard_set) if counts is None else counts
    specials = set(tokenizer.special_tokens.values())
    widths = np.array([0 if i in specials else len(tokenizer.token_bytes(i)) for i in range(len(counts))])
    return int(counts @ widths)


def split_stats(shard_set: ShardSet, tokenizer: Tokenizer, *, top: int = 10) -> SplitStats:
    counts = token_counts(shard_set)
    order = np.argsort(-counts, kind="stable")[:top]
    lengths = [np.diff(shard.offsets) for shard in shard_set.shards]
    return SplitStats(
        split=shard_set.split,
        documents=shard_set.num_documents,
        tokens=shard_set.num_tokens,
        text_bytes=text_bytes(shard_set, tokenizer, counts),
        top_tokens=[(int(i), int(counts[i])) for i in order if counts[i]],
        document_lengths=np.concatenate(lengths) if lengths else np.zeros(0, dtype=np.int64),
        sources=shard_set.manifest.sources,
    )


def summary(stats: Sequence[SplitStats], tokenizer: Tokenizer) -> dict[str, Any]:
    """What ``stats.json`` holds: the tokenizer's fingerprint, then per split its counts, top tokens and tokens
    per source (the natural mixture, which training reproduces without weights)."""
    return {
        "tokenizer_fingerprint": tokenizer.fingerprint,
        "vocab_size": tokenizer.vocab_size,
        "splits": {
            split.split: {
                "documents": split.documents,
                "tokens": split.tokens,
                "text_bytes": split.text_bytes,
                "bytes_per_token": round(split.bytes_per_token, 6),
                "top_tokens": [{"id": i, "count": count, "token": tokenizer.render_token(i)}
                               for i, count in split.top_tokens],
                "sources": [{**source, "share": round(source["tokens"] / split.tokens, 6) if split.tokens else 0.0}
                            for source in split.sources],
            }
            for split in stats
        },
    }


def plot_document_lengths(lengths: Mapping[str, np.ndarray], path: str | os.PathLike[str]) -> None:
    """A PNG histogram of tokens per document, one outline per split, on logarithmic bins.

    Document lengths span orders of magnitude (a one-line fact, a whole book), so
    a linear axis puts nearly every document in its first bin. Each split's bars are its
    share of that split's documents, so a small val split is as visible as train.
    """
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4))
    present = {split: values for split, values in lengths.items() if len(values)}
    if present:
        low = min(int(values.min()) for values in present.values())
        high = max(int(values.max()) for values in present.values())
        bins = np.unique(np.geomspace(max(low, 1), high + 1, 41).round())  # whole tokens: no empty sliver bins
        for split, values in present.items():
            axes.hist(values, bins=bins, weights=np.full(len(values), 1 / len(values)), histtype="step",
                      linewidth=1.8, label=f"{split} ({len(values):,} documents, median {np.median(values):,.0f})")
        axes.legend(loc="upper right")
    axes.set_xscale("log")
    axes.yaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
    axes.xaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1, 2, 5)))
    axes.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda x, _: f"{x:,.0f}"))
    axes.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    axes.set(xlabel="tokens per document (log scale)", ylabel="share of the split's documents",
             title="Document lengths")
    axes.grid(alpha=0.3)
    with atomic.atomic_path(path) as tmp:
        figure.savefig(tmp, format="png", dpi=100, bbox_inches="tight")
    plt.close(figure)
