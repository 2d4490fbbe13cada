"""Exact de-duplication as a step of prepare, and the marks every de-duplication step leaves.

A de-duplication step works in three parts, each over files of the work directory:

1. in each partition task, a key writer (:meth:`ExactDedup.keys`) records a key per live document:
   here a 16-byte BLAKE2b digest of its text, grouped by bucket (digest modulo ``buckets``);
2. :meth:`ExactDedup.resolve` runs one task per bucket, which reads the bucket's keys of every
   partition in corpus order and marks each copy after the first. A digest lives in one bucket, so
   copies anywhere in the corpus meet in one task, and the first in input order wins as in a single
   pass. Its memory is about 80 bytes per document of its bucket: 10 million documents in 16 buckets
   cost ~50 MB per task, and no process holds every digest;
3. the next partition task reads its marks (:meth:`ExactDedup.marks`): for each marked position, the
   document it duplicates.

Marks are ``(n, 4)`` int64 arrays of rows ``(partition, position, kept partition, kept position)``
sorted by partition and position; :func:`read_marks` finds one partition's rows by bisection.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pipeline.config.schema import MAX_BUCKETS, bounded
from pipeline.data.record import DedupStep
from pipeline.engine import locations, storage

if TYPE_CHECKING:
    import numpy as np

    from pipeline.engine.executor import Tasks

# numpy parses an array file's header with ast.literal_eval, which CPython 3.11 (seen on 3.11.7) can break
# when two threads use the ast module at once ("AST constructor recursion depth mismatch"); the tasks of
# a thread pool (tests, a user's own executor) read their headers one at a time.
_NPY_HEADERS = threading.Lock()

Marks = dict[int, tuple[int, int]]
"""A partition's marked positions, each with the (partition, position) of the document it duplicates."""


@dataclass(frozen=True)
class ExactDedupStep:
    """Drop a document whose cleaned text equals an earlier one's; the first copy in corpus order stays.
    ``buckets`` is its number of tasks, as near_dedup's (``prepare.dedup_buckets``, deprecated, sets it where
    a step does not)."""

    buckets: int = bounded(16, low=1, high=MAX_BUCKETS)


class ExactDedup(DedupStep):
    name = "exact_dedup"
    Settings = ExactDedupStep
    rule = "duplicate"

    def keys(self, work: Path | str, round_: int, index: int) -> DigestWriter:
        return DigestWriter(locations.join(work, f"r{round_}-digests-{index:05d}.npz"), self.buckets)

    def resolve(self, tasks: Tasks, work: Path | str, round_: int, partitions: int, *, progress: bool) -> None:
        buckets = range(self.buckets)
        tasks.map(_Bucket(work, round_, partitions), buckets, labels=[f"dedup bucket {b}" for b in buckets],
                  desc="prepare: deduplicate", progress=progress)

    def marks(self, work: Path | str, round_: int, index: int) -> Marks:
        return read_marks(self.mark_files(work, round_), index)

    def mark_files(self, work: Path | str, round_: int) -> list[Path | str]:
        return [locations.join(work, f"r{round_}-duplicates-{b:05d}.npy") for b in range(self.buckets)]


class DigestWriter:
    """Collects one partition's digests and saves them as (n, 2) uint64, stably grouped by bucket, with
    their positions and the bucket bounds."""

    def __init__(self, path: Path | str, buckets: int):
        self._path, self._buckets = path, buckets
        self.paths = (path,)  # what close() writes
        self._digests: list[bytes] = []
        self._positions: list[int] = []

    def add(self, position: int, text: str) -> None:
        self._digests.append(hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest())
        self._positions.append(position)

    def close(self) -> None:
        import numpy as np

        array = np.frombuffer(b"".join(self._digests), dtype=np.uint64).reshape(-1, 2)
        bucket_of = array[:, 0] % np.uint64(self._buckets)
        order = np.argsort(bucket_of, kind="stable")
        bounds = np.searchsorted(bucket_of[order], np.arange(self._buckets + 1, dtype=np.uint64))
        positions = np.asarray(self._positions, dtype=np.int64)[order]
        save_arrays(self._path, digests=array[order], positions=positions, bounds=bounds)


@dataclass(frozen=True)
class _Bucket:
    """Task: mark every copy after the first among one bucket's digests."""

    work: Path | str
    round_: int
    partitions: int

    def __call__(self, bucket: int) -> None:
        import numpy as np

        digests, where = [], []
        for index in range(self.partitions):
            with load_arrays(locations.join(self.work, f"r{self.round_}-digests-{index:05d}.npz")) as saved:
                start, end = saved["bounds"][bucket : bucket + 2]
                digests.append(saved["digests"][start:end])
                where.append(np.stack([np.full(end - start, index, dtype=np.int64), saved["positions"][start:end]], 1))
        digests_all = np.concatenate(digests)
        where_all = np.concatenate(where)
        _, first, group = np.unique(digests_all.view(np.dtype((np.void, 16))).ravel(), return_index=True,
                                    return_inverse=True)
        later = np.ones(len(digests_all), dtype=bool)
        later[first] = False  # np.unique's index is the first occurrence, and the rows are in corpus order
        marks = np.concatenate([where_all[later], where_all[first[group[later]]]], axis=1)
        save_marks(locations.join(self.work, f"r{self.round_}-duplicates-{bucket:05d}.npy"), marks)


def save_marks(path: Path | str, marks: np.ndarray) -> None:
    """Marks rows, sorted by (partition, position) so that :func:`read_marks` can bisect them."""
    import numpy as np

    marks = marks.reshape(-1, 4).astype(np.int64)
    order = np.lexsort((marks[:, 1], marks[:, 0]))
    with storage.output_file(path, durable=False) as tmp, open(tmp, "wb") as handle:
        np.save(handle, marks[order])


def read_marks(paths: Sequence[Path | str], index: int) -> Marks:
    """Partition ``index``'s marked positions, from every marks file of a step."""
    import numpy as np

    found: Marks = {}
    for path in paths:
        with storage.local_copy(path) as local:
            marks = load_npy(local, mmap_mode="r")
            lo, hi = np.searchsorted(marks[:, 0], [index, index + 1])
            found.update((int(row[1]), (int(row[2]), int(row[3]))) for row in marks[lo:hi])
    return found


def save_arrays(path: Path | str, **arrays: np.ndarray) -> None:
    import numpy as np

    with storage.output_file(path, durable=False) as tmp, open(tmp, "wb") as handle:
        np.savez(handle, **arrays)


@contextlib.contextmanager
def load_arrays(path: Path | str) -> Iterator[Any]:
    """The arrays of an ``.npz`` file of the work directory, local or remote."""
    import numpy as np

    with storage.local_copy(path) as local:
        with _NPY_HEADERS:
            saved = np.load(local)
        with saved:
            yield saved



def load_npy(path: Path | str, *, mmap_mode: Literal["r"] | None = None) -> np.ndarray:
    """An ``.npy`` file of the work directory, memory-mapped with ``mmap_mode="r"``."""
    import numpy as np

    with _NPY_HEADERS:
        return np.load(path, mmap_mode=mmap_mode)
