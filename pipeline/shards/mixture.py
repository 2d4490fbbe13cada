"""Mixture weights: sampling training windows so that each source gets its target share of the tokens.

``data.sources[i].weight`` is source ``i``'s target share of the training tokens, relative to the
others' (``w_i / Σ w``), as in Megatron's ``BlendedDataset`` and nanotron's Nanosets. Without weights
the mixture is the natural one: every token of the split is as likely as any other.

With weights, each source is a token stream of its own: its documents, in shard order. A window of
``context + 1`` tokens is drawn from one source's stream (it may span that source's documents, never
two sources), so each window's source is chosen first, with the target shares, then its place in that
stream. A source whose share is above its natural one is therefore seen more often than once per epoch
(its documents repeat), one below it less (it is subsampled).

- The train stage draws each window's source and its start with the run's generator (what the
  checkpoint saves), so a resumed run continues with exactly the windows an uninterrupted one draws.
- :class:`~pipeline.shards.torch_dataset.ShardWindows` cuts each source's stream into windows every
  ``context`` tokens, deals each epoch ``n_i`` windows of source ``i`` (``N = Σ`` windows, ``n_i`` its
  share of ``N``, rounded by largest remainder), taken in turn from an endless sequence of
  permutations of that source's windows (so a subsampled source goes through all its windows over
  the epochs before repeating one, and an upsampled one through all of them before repeating any),
  then shuffles the epoch's windows.

The shares achieved are counted in tokens: each window's ``context`` input tokens, to the source of
each (a window of the natural mixture may cover documents of several sources).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pipeline.errors import ShardError
from pipeline.shards.format import ShardSet


@dataclass(frozen=True)
class SourceStream:
    """One source's documents in a shard set, as a token stream: each document's shard, start and length."""

    source: int
    shards: np.ndarray  # per document: the shard index
    starts: np.ndarray  # per document: the first token's position in its shard
    ends: np.ndarray  # per document: the end of its tokens in the stream (cumulative lengths)

    @property
    def tokens(self) -> int:
        return int(self.ends[-1]) if len(self.ends) else 0

    def read(self, shard_set: ShardSet, start: int, count: int) -> np.ndarray:
        """``count`` tokens of the stream from ``start``, across the source's documents."""
        pieces, document = [], int(np.searchsorted(self.ends, start, side="right"))
        while count:
            begin = int(self.ends[document - 1]) if document else 0
            local = int(self.starts[document]) + start - begin
            take = min(count, int(self.ends[document]) - start)
            pieces.append(shard_set.shards[int(self.shards[document])].tokens[local : local + take])
            start, count, document = start + take, count - take, document + 1
        return np.concatenate(pieces) if len(pieces) > 1 else pieces[0]


def source_streams(shard_set: ShardSet) -> dict[int, SourceStream]:
    """Each source of the shard set (with tokens) as its stream, by source index."""
    by_source: dict[int, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}
    for index, shard in enumerate(shard_set.shards):
        lengths = np.diff(shard.offsets).astype(np.int64)
        for source in np.unique(shard.sources).tolist():
            rows = np.flatnonzero((shard.sources == source) & (lengths > 0))
            by_source.setdefault(source, []).append((np.full(len(rows), index), shard.offsets[rows], lengths[rows]))
    streams = {}
    for source, parts in sorted(by_source.items()):
        lengths = np.concatenate([part[2] for part in parts])
        if lengths.sum():
            streams[source] = SourceStream(source, np.concatenate([part[0] for part in parts]),
                                           np.concatenate([part[1] for part in parts]).astype(np.int64),
                                           np.cumsum(lengths))
    return streams


def target_shares(shard_set: ShardSet, weights: Sequence[float] | None,
                  streams: dict[int, SourceStream]) -> dict[int, float]:
    """Each source's target share of the tokens: its weight's share of all weights, or with no weights its
    natural share of the split's tokens. A weighted source without tokens in the split, or a source of
    the shards that no weight is given for, is a ShardError naming it."""
    total = shard_set.num_tokens
    if weights is None:
        return {source: stream.tokens / total for source, stream in streams.items()} if total else {}
    where = f"shard set {shard_set.directory} (split {shard_set.split!r})"
    unweighted = sorted(set(streams) - set(range(len(weights))))
    if unweighted:
        raise ShardError(f"{where} holds documents of data.sources[{unweighted[0]}], but weights are given for "
                         f"{len(weights)} sources only; re-encode with this config's sources")
    empty = [source for source in range(len(weights)) if source not in streams]
    if empty:
        raise ShardError(f"data.sources[{empty[0]}].weight is {weights[empty[0]]}, but {where} holds no token of "
                         "that source; remove the source or give prepare more of its documents")
    return {source: weight / sum(weights) for source, weight in enumerate(weights)}


def window_tokens_by_source(shard_set: ShardSet, shards: np.ndarray, starts: np.ndarray, context: int,
                            count: int) -> list[int]:
    """Input tokens of each source (by index, up to ``count`` sources) in windows starting at ``starts`` of
    ``shards``: the first ``context`` tokens of each window, to their documents' sources."""
    totals = np.zeros(count, dtype=np.int64)
    for shard_index in np.unique(shards).tolist():
        shard, begins = shard_set.shards[shard_index], starts[shards == shard_index]
        first = np.searchsorted(shard.offsets, begins, side="right") - 1
        spans = np.searchsorted(shard.offsets, begins + context, side="left") - first  # rows each window covers
        window = np.repeat(np.arange(len(begins)), spans)
        rows = np.arange(spans.sum()) - np.repeat(np.cumsum(spans) - spans, spans) + np.repeat(first, spans)
        low = np.maximum(shard.offsets[rows], begins[window])
        high = np.minimum(shard.offsets[rows + 1], begins[window] + context)
        totals += np.bincount(shard.sources[rows], weights=high - low, minlength=count).astype(np.int64)
    return totals.tolist()


class MixtureSampler:
    """The train stage's batches: random windows of the natural mixture, or of the weighted one, and the
    input tokens each source contributed to them."""

    def __init__(self, shard_set: ShardSet, weights: Sequence[float] | None, context: int):
        self.shard_set, self.weights, self.context = shard_set, weights, context
        self.streams = source_streams(shard_set)
        self.shares = target_shares(shard_set, weights, self.streams)
        self.sources = max([len(weights or ()), *(source + 1 for source in self.streams)])
        if weights is not None:
            short = [s for s, stream in self.streams.items() if stream.tokens <= context]
            if short:
                raise ShardError(f"data.sources[{short[0]}] has {self.streams[short[0]].tokens:,} tokens in split "
                                 f"{shard_set.split!r}, fewer than one window of {context + 1}; lower train.context "
                                 "or give that source more documents")
            self._order = sorted(self.shares)
            self._probabilities = np.array([self.shares[s] for s in self._order])

    def sample(self, rng: np.random.Generator, batch_size: int) -> tuple[np.ndarray, list[int]]:
        """``batch_size`` windows of ``context + 1`` tokens as int64 ``[batch, context + 1]``, and the input
        tokens per source (a list indexed by source)."""
        if self.weights is None:
            shards, starts = self.shard_set.window_starts(rng, batch_size, self.context)
            batch = self.shard_set.gather_windows(shards, starts, self.context)
            return batch, window_tokens_by_source(self.shard_set, shards, starts, self.context, self.sources)
        picks = rng.choice(len(self._order), size=batch_size, p=self._probabilities)
        streams = [self.streams[self._order[pick]] for pick in picks.tolist()]
        starts = rng.integers(0, [stream.tokens - self.context for stream in streams])
        counts = [0] * self.sources
        for stream in streams:
            counts[stream.source] += self.context
        rows = [stream.read(self.shard_set, int(start), self.context + 1) for stream, start in zip(streams, starts)]
        return np.stack(rows).astype(np.int64), counts


def epoch_counts(shares: dict[int, float], total: int) -> dict[int, int]:
    """Windows per source in an epoch of ``total``: each source's share of it, rounded by largest remainder
    (ties to the lower source index), so that the counts add up to ``total``."""
    exact = {source: share * total for source, share in shares.items()}
    counts = {source: int(value) for source, value in exact.items()}
    by_remainder = sorted(exact, key=lambda source: (-(exact[source] - counts[source]), source))
    for source in by_remainder[: total - sum(counts.values())]:
        counts[source] += 1
    return counts


def stream_windows(seed: int, source: int, windows: int, begin: int, count: int) -> np.ndarray:
    """Items ``begin`` to ``begin + count`` of source ``source``'s endless sequence of windows: one seeded
    permutation of its ``windows`` windows after another."""
    taken, position = [], begin
    while position < begin + count:
        rank, offset = divmod(position, windows)
        permutation = np.random.default_rng([seed, source, rank]).permutation(windows)
        take = min(windows - offset, begin + count - position)
        taken.append(permutation[offset : offset + take])
        position += take
    return np.concatenate(taken) if taken else np.zeros(0, dtype=np.int64)


def mixture_report(source_tokens: Sequence[int], shares: dict[int, float]) -> list[dict[str, float | int]]:
    """Tokens seen per source, their share and the target share (what the metrics and the summary show)."""
    total = sum(source_tokens)
    sources = sorted(set(shares) | {s for s, tokens in enumerate(source_tokens) if tokens})
    return [{"source": s, "tokens": int(source_tokens[s]) if s < len(source_tokens) else 0,
             "share": (source_tokens[s] / total if total and s < len(source_tokens) else 0.0),
             "target": shares.get(s, 0.0)} for s in sources]
