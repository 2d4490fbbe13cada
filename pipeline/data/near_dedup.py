"""Near-duplicate removal as a step of prepare: MinHash + LSH, partitioned like exact de-duplication.

1. In each partition task the key writer computes every live document's signature
   (:mod:`pipeline.data.minhash`), saves the partition's signatures (``(n, hashes)`` uint32, memory-mapped
   later) and its band keys, grouped by bucket (key modulo ``buckets``).
2. One task per bucket reads the bucket's band keys of every partition; documents sharing a key are
   candidates. Each is compared, in corpus order, with the group's earlier *leaders* (documents not
   matched so far) on the whole signature: it matches when the share of equal values, the estimated
   Jaccard similarity, is at least ``threshold``, which makes the cut sharp where banding alone is soft.
   A match is an edge (earlier → later); a document matching no leader becomes one. Its memory is its
   bucket's keys (24 bytes per document and band) and the signatures of 65,536 candidates at a time.
3. One task joins the edges of every bucket (union-find, the root of a cluster being its first document
   in corpus order) and marks every other member as a duplicate of that first document. Its memory
   grows with the edges found, not with the corpus.

Everything is ordered by (partition, position), so the marks are the same for any number of workers.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pipeline.config.schema import MAX_BUCKETS, bounded
from pipeline.data.dedup import Marks, load_arrays, load_npy, read_marks, save_arrays, save_marks
from pipeline.data.record import DedupStep
from pipeline.engine import locations, storage

if TYPE_CHECKING:
    import numpy as np

    from pipeline.engine.executor import Tasks

_ROW_BITS = 40  # a document's node in the union-find: partition << 40 | row (a trillion rows per partition)
_GATHER_ROWS = 65_536  # signatures verified at a time: 64 MB at 256 hashes, whatever the size of the bucket


@dataclass(frozen=True)
class NearDedupStep:
    """Drop a document whose MinHash-estimated Jaccard similarity with an earlier one is at least
    ``threshold`` (docs/curation.md): ``bands`` × ``rows`` of the ``hashes`` signature values find the
    candidate pairs, all ``hashes`` values verify them."""

    shingle: Literal["words", "chars"] = "words"
    shingle_size: int = bounded(5, low=1, high=1024)
    hashes: int = bounded(256, low=1, high=4096)
    bands: int = bounded(16, low=1)
    rows: int = bounded(4, low=1)
    threshold: float = bounded(0.8, low=0.0, high=1.0)
    seed: int = bounded(0, low=0, high=2**32 - 1)
    buckets: int = bounded(16, low=1, high=MAX_BUCKETS)

    def problem(self) -> str | None:
        """What makes these settings impossible, or None."""
        if self.bands * self.rows > self.hashes:
            return f"bands × rows ({self.bands} × {self.rows}) exceeds hashes ({self.hashes})"
        return None


class NearDedup(DedupStep):
    name = "near_dedup"
    Settings = NearDedupStep
    rule = "near_duplicate"

    def keys(self, work: Path | str, round_: int, index: int) -> SignatureWriter:
        return SignatureWriter(self.settings, locations.join(work, f"r{round_}-signatures-{index:05d}.npy"),
                               locations.join(work, f"r{round_}-bands-{index:05d}.npz"))

    def resolve(self, tasks: Tasks, work: Path | str, round_: int, partitions: int, *, progress: bool) -> None:
        buckets = range(self.settings.buckets)
        tasks.map(_Bucket(self.settings, work, round_, partitions), buckets,
                  labels=[f"near-dedup bucket {b}" for b in buckets], desc="prepare: near duplicates",
                  progress=progress)
        tasks.map(_Clusters(self.settings.buckets, work, round_, partitions), [0], labels=["near-dedup clusters"],
                  desc="prepare: near-duplicate clusters", progress=progress)

    def marks(self, work: Path | str, round_: int, index: int) -> Marks:
        return read_marks(self.mark_files(work, round_), index)

    def mark_files(self, work: Path | str, round_: int) -> list[Path | str]:
        return [_marks_file(work, round_)]


def _marks_file(work: Path | str, round_: int) -> Path | str:
    return locations.join(work, f"r{round_}-near-marks.npy")


class SignatureWriter:
    """Collects one partition's signatures and band keys; saves them on :meth:`close`."""

    def __init__(self, settings: NearDedupStep, signatures: Path | str, bands: Path | str):
        from pipeline.data import minhash

        self._settings, self._signatures_path, self._bands_path = settings, signatures, bands
        self.paths = (signatures, bands)  # what close() writes
        self._a, self._b = minhash.permutations(settings.hashes, settings.seed)
        self._signatures: list[np.ndarray] = []
        self._positions: list[int] = []

    def add(self, position: int, text: str) -> None:
        from pipeline.data import minhash

        hashes = minhash.shingle_hashes(text, shingle=self._settings.shingle, size=self._settings.shingle_size)
        self._signatures.append(minhash.signature(hashes, self._a, self._b))
        self._positions.append(position)

    def close(self) -> None:
        import numpy as np

        from pipeline.data import minhash

        settings = self._settings
        signatures = (np.stack(self._signatures) if self._signatures
                      else np.zeros((0, settings.hashes), dtype=np.uint32))
        with storage.output_file(self._signatures_path, durable=False) as tmp, open(tmp, "wb") as handle:
            np.save(handle, signatures)
        keys = np.array([minhash.band_keys(s, settings.bands, settings.rows) for s in signatures],
                        dtype=np.uint64).reshape(-1)
        rows = np.repeat(np.arange(len(signatures), dtype=np.int64), settings.bands)
        bucket_of = keys % np.uint64(settings.buckets)
        order = np.argsort(bucket_of, kind="stable")
        bounds = np.searchsorted(bucket_of[order], np.arange(settings.buckets + 1, dtype=np.uint64))
        save_arrays(self._bands_path, keys=keys[order], rows=rows[order], bounds=bounds,
                    positions=np.asarray(self._positions, dtype=np.int64))


@dataclass(frozen=True)
class _Bucket:
    """Task: the verified near-duplicate edges among one bucket's candidates."""

    settings: NearDedupStep
    work: Path | str
    round_: int
    partitions: int

    def __call__(self, bucket: int) -> None:
        import numpy as np

        keys, partitions, rows = self._entries(bucket)
        order = np.lexsort((rows, partitions, keys))  # by key, then in corpus order
        keys, partitions, rows = keys[order], partitions[order], rows[order]
        same = keys[1:] == keys[:-1]
        shared = np.zeros(len(keys), dtype=bool)
        shared[1:] |= same
        shared[:-1] |= same
        keys, partitions, rows = keys[shared], partitions[shared], rows[shared]  # only groups of two or more
        starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]) if len(keys) else np.zeros(0, dtype=np.int64)
        ends = np.r_[starts[1:], len(keys)][: len(starts)]
        need = math.ceil(self.settings.threshold * self.settings.hashes - 1e-9)
        edges: list[tuple[int, int, int, int]] = []
        with contextlib.ExitStack() as stack:
            signatures = _SignatureFiles(stack, self.work, self.round_)
            for chunk_starts, chunk_ends in _chunks(starts, ends, _GATHER_ROWS):
                first, last = int(chunk_starts[0]), int(chunk_ends[-1])
                gathered = signatures.gather(partitions[first:last], rows[first:last])
                for start, end in zip((chunk_starts - first).tolist(), (chunk_ends - first).tolist()):
                    members = list(zip(partitions[first + start : first + end].tolist(),
                                       rows[first + start : first + end].tolist()))
                    edges += _verified_edges(members, gathered[start:end], need)
        save_arrays(locations.join(self.work, f"r{self.round_}-edges-{bucket:05d}.npz"),
                    edges=np.array(edges, dtype=np.int64).reshape(-1, 4))

    def _entries(self, bucket: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        import numpy as np

        keys, partitions, rows = [], [], []
        for index in range(self.partitions):
            with load_arrays(locations.join(self.work, f"r{self.round_}-bands-{index:05d}.npz")) as saved:
                start, end = saved["bounds"][bucket : bucket + 2]
                keys.append(saved["keys"][start:end])
                rows.append(saved["rows"][start:end])
                partitions.append(np.full(end - start, index, dtype=np.int64))
        return np.concatenate(keys), np.concatenate(partitions), np.concatenate(rows)


def _chunks(starts: np.ndarray, ends: np.ndarray, rows: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The groups ``[starts[i], ends[i])`` in consecutive runs of about ``rows`` rows (a larger group alone)."""
    import numpy as np

    first = 0
    while first < len(starts):
        last = max(int(np.searchsorted(ends, starts[first] + rows, side="right")), first + 1)
        yield starts[first:last], ends[first:last]
        first = last


class _SignatureFiles:
    """The partitions' signature files, each memory-mapped on first use (a remote one copied once)."""

    def __init__(self, stack: contextlib.ExitStack, work: Path | str, round_: int):
        self._stack, self._work, self._round = stack, work, round_
        self._open: dict[int, np.ndarray] = {}

    def gather(self, partitions: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """The signatures of the given documents, read from each partition's file at once."""
        import numpy as np

        gathered = None
        for index in np.unique(partitions).tolist():
            signatures = self._partition(index)
            if gathered is None:
                gathered = np.zeros((len(rows), signatures.shape[1]), dtype=np.uint32)
            chosen = partitions == index
            gathered[chosen] = signatures[rows[chosen]]
        assert gathered is not None
        return gathered

    def _partition(self, index: int) -> np.ndarray:
        if index not in self._open:
            path = locations.join(self._work, f"r{self._round}-signatures-{index:05d}.npy")
            self._open[index] = load_npy(self._stack.enter_context(storage.local_copy(path)), mmap_mode="r")
        return self._open[index]


def _verified_edges(members: list[tuple[int, int]], signatures: np.ndarray,
                    need: int) -> list[tuple[int, int, int, int]]:
    """Edges (leader → member) of one candidate group, in corpus order: each member is compared with the
    leaders before it and joins the first whose signature agrees on at least ``need`` values."""
    import numpy as np

    leaders = [0]
    edges = []
    for i in range(1, len(members)):
        agree = np.count_nonzero(signatures[leaders] == signatures[i], axis=1)
        matched = np.flatnonzero(agree >= need)
        if len(matched):
            edges.append((*members[leaders[matched[0]]], *members[i]))
        else:
            leaders.append(i)
    return edges


@dataclass(frozen=True)
class _Clusters:
    """Task: join every bucket's edges into clusters and mark each member after the cluster's first."""

    buckets: int
    work: Path | str
    round_: int
    partitions: int

    def __call__(self, _: int) -> None:
        import numpy as np

        edges = [np.zeros((0, 4), dtype=np.int64)]
        for bucket in range(self.buckets):
            with load_arrays(locations.join(self.work, f"r{self.round_}-edges-{bucket:05d}.npz")) as saved:
                edges.append(saved["edges"])
        pairs = np.unique(np.concatenate(edges), axis=0)
        nodes = (pairs[:, [0, 2]] << _ROW_BITS) | pairs[:, [1, 3]]
        root = _union_find(nodes)
        members = np.array(sorted(node for node in root if root[node] != node), dtype=np.int64)
        firsts = np.array([root[node] for node in members.tolist()], dtype=np.int64)
        marks = np.stack([members >> _ROW_BITS, self._positions(members), firsts >> _ROW_BITS,
                          self._positions(firsts)], axis=1) if len(members) else np.zeros((0, 4), dtype=np.int64)
        save_marks(_marks_file(self.work, self.round_), marks)

    def _positions(self, nodes: np.ndarray) -> np.ndarray:
        """Each node's position in its partition's candidates, from the row of its signature."""
        import numpy as np

        positions = np.zeros(len(nodes), dtype=np.int64)
        partition_of, row_of = nodes >> _ROW_BITS, nodes & ((1 << _ROW_BITS) - 1)
        for index in np.unique(partition_of).tolist():
            with load_arrays(locations.join(self.work, f"r{self.round_}-bands-{index:05d}.npz")) as saved:
                chosen = partition_of == index
                positions[chosen] = saved["positions"][row_of[chosen]]
        return positions


def _union_find(edges: np.ndarray) -> dict[int, int]:
    """Each node of the ``(n, 2)`` edges mapped to its component's smallest node (its first document)."""
    parent: dict[int, int] = {}

    def find(node: int) -> int:
        parent.setdefault(node, node)
        while parent[node] != node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node

    for a, b in edges.tolist():
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    return {node: find(node) for node in parent}
