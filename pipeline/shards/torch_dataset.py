"""A torch dataset over a shard set, for training your own model on lmprep's shards.

:class:`ShardWindows` yields batches ``(x, y)`` of ``batch_size`` windows of
``context`` tokens, ``y`` being ``x`` shifted by one token. The token stream of
the shard set (every shard's tokens, in order) is cut into windows of
``context + 1`` tokens starting every ``context`` tokens, so every token but the
first is a target exactly once per epoch. Each epoch shuffles the windows with
a generator seeded from ``(seed, epoch)``, deals whole batches to the DDP ranks
(``rank``, ``world_size``: batch ``k`` goes to rank ``k % world_size``) and, within
a rank, to the DataLoader workers the same way; a torch ``DataLoader`` with
``batch_size=None`` fetches from its workers in turn, so a rank sees the same
batches in the same order whatever the number of workers, and no window is
seen twice in an epoch. The last batches that would not give every rank the
same number are dropped.

With ``weights`` (``data.sources[i].weight`` of each source), each source's
token stream is cut into windows on its own, and an epoch of as many windows
as the set has holds each source's target share of them
(:mod:`pipeline.shards.mixture`), shuffled and dealt the same way.

Iterate with :meth:`ShardWindows.loader` and ``state_dict()`` says where the
iteration stands (epoch and batches consumed); a new dataset given it with
``load_state_dict()`` continues with exactly the next batch. The shard set is
opened through :class:`pipeline.shards.format.ShardSet`, which refuses a tokenizer
whose fingerprint differs from the shards'.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from pipeline.errors import ShardError
from pipeline.shards.format import ShardSet
from pipeline.shards.mixture import epoch_counts, source_streams, stream_windows, target_shares
from pipeline.tokenizer import Tokenizer

STATE_VERSION = 1


class ShardWindows(IterableDataset):
    """Shuffled ``(x, y)`` batches of token windows from one split of a shard set."""

    def __init__(self, directory: str | os.PathLike[str], split: str = "train", *, tokenizer: Tokenizer,
                 context: int, batch_size: int, seed: int = 0, rank: int = 0, world_size: int = 1,
                 weights: Sequence[float] | None = None):
        if context < 1 or batch_size < 1:
            raise ValueError(f"context ({context}) and batch_size ({batch_size}) must be at least 1")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in 0..{world_size - 1}, got {rank}")
        self.shard_set = ShardSet.open(directory, split, tokenizer=tokenizer)
        self.context, self.batch_size, self.seed = context, batch_size, seed
        self.rank, self.world_size = rank, world_size
        self.weights = None if weights is None else [float(weight) for weight in weights]
        self.windows = max(0, (self.shard_set.num_tokens - 1) // context)
        if self.weights is not None:
            self._streams = source_streams(self.shard_set)
            self.shares = target_shares(self.shard_set, self.weights, self._streams)
            self._source_windows = {s: (stream.tokens - 1) // context for s, stream in self._streams.items()}
            short = [s for s, count in self._source_windows.items() if count == 0]
            if short:
                raise ShardError(f"data.sources[{short[0]}] has {self._streams[short[0]].tokens:,} tokens in split "
                                 f"{split!r}, fewer than one window of {context + 1}")
            self.windows = sum(self._source_windows.values())
            self._per_epoch = epoch_counts(self.shares, self.windows)
            self._order = sorted(self._source_windows)
            self._first_code = np.cumsum([0] + [self._source_windows[s] for s in self._order])
        self.batches_per_rank = self.windows // batch_size // world_size
        if self.batches_per_rank == 0:
            raise ShardError(
                f"shard set {self.shard_set.directory} (split {split!r}) has {self.shard_set.num_tokens:,} tokens: "
                f"fewer than one batch of {batch_size} windows of {context + 1} tokens per rank ({world_size} ranks)")
        self._starts = np.cumsum([0] + [shard.num_tokens for shard in self.shard_set.shards])
        self.epoch = 0
        self.batch = 0  # batches of this epoch already consumed through loader()

    def __len__(self) -> int:
        """Batches per epoch for this rank."""
        return self.batches_per_rank

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """This rank's batches of the current epoch from the next unconsumed one, dealt to this worker."""
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        order = self._rank_batches(self.epoch)
        for index in range(self.batch + worker, len(order), workers):
            yield self._windows(order[index])

    def loader(self, *, num_workers: int = 0, **dataloader_options: Any) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """One epoch (the rest of it, after ``load_state_dict``) through a torch DataLoader, keeping
        :meth:`state_dict` up to date with every batch handed out."""
        batches = DataLoader(self, batch_size=None, num_workers=num_workers, **dataloader_options)
        for batch in batches:
            self.batch += 1
            yield batch
        self.epoch, self.batch = self.epoch + 1, 0

    def state_dict(self) -> dict[str, Any]:
        """Where the iteration stands, and what it is an iteration of."""
        return {"version": STATE_VERSION, "epoch": self.epoch, "batch": self.batch, **self._identity()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue where ``state`` stood; refuse a state of another shard set, seed or layout."""
        mismatched = {key: (state.get(key), value) for key, value in self._identity().items()
                      if state.get(key) != value}
        if state.get("version") != STATE_VERSION or mismatched:
            described = ", ".join(f"{key} {old!r} → {new!r}" for key, (old, new) in mismatched.items())
            raise ShardError(f"cannot resume: the saved data state belongs to another iteration "
                             f"({described or 'unknown state version'}); start from a fresh state")
        self.epoch, self.batch = state["epoch"], state["batch"]

    def _identity(self) -> dict[str, Any]:
        return {"shards": self.shard_set.fingerprint, "context": self.context, "batch_size": self.batch_size,
                "seed": self.seed, "rank": self.rank, "world_size": self.world_size, "weights": self.weights}

    def _rank_batches(self, epoch: int) -> np.ndarray:
        """This rank's batches of ``epoch``: rows of window indices (with weights, of window codes: the
        source's first code plus the window's index in the source)."""
        per_epoch = self.batches_per_rank * self.world_size
        rng = np.random.default_rng([self.seed, epoch])
        order = rng.permutation(self.windows) if self.weights is None else rng.permutation(self._epoch_codes(epoch))
        return order[: per_epoch * self.batch_size].reshape(per_epoch, self.batch_size)[self.rank :: self.world_size]

    def _epoch_codes(self, epoch: int) -> np.ndarray:
        """The windows of a weighted epoch: the next ``n_i`` of each source's endless sequence, as codes."""
        codes = []
        for code, source in zip(self._first_code, self._order):
            count = self._per_epoch[source]
            codes.append(code + stream_windows(self.seed, source, self._source_windows[source], epoch * count, count))
        return np.concatenate(codes)

    def _windows(self, windows: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        rows = np.stack([self._window(int(w)) for w in windows])
        tokens = torch.from_numpy(rows.astype(np.int64))
        return tokens[:, :-1], tokens[:, 1:]

    def _window(self, code: int) -> np.ndarray:
        """Window ``code``'s ``context + 1`` tokens: of the whole stream, or with weights of its source's."""
        if self.weights is None:
            return self._tokens(code * self.context, self.context + 1)
        index = int(np.searchsorted(self._first_code, code, side="right")) - 1
        stream = self._streams[self._order[index]]
        return stream.read(self.shard_set, (code - int(self._first_code[index])) * self.context, self.context + 1)

    def _tokens(self, start: int, count: int) -> np.ndarray:
        """``count`` tokens of the shard set's stream from ``start``, across shard boundaries."""
        pieces, shard = [], int(np.searchsorted(self._starts, start, side="right")) - 1
        while count:
            local = start - int(self._starts[shard])
            piece = self.shard_set.shards[shard].tokens[local : local + count]
            pieces.append(piece)
            start, count, shard = start + len(piece), count - len(piece), shard + 1
        return np.concatenate(pieces)
