"""The counting pass of BPE training as partition tasks: one prepared part file per task.

Each task counts the distinct pre-split chunks of its part; the counts are
summed pairwise as a tree (on a cluster, between workers) and only the total
reaches the driver, which runs the merges as before. The driver's memory is
therefore the distinct chunks of the whole training split (about 100 bytes
each: a few million for gigabytes of English), not the corpus.
"""

from __future__ import annotations

import functools
import os
from collections import Counter
from pathlib import Path

from pipeline.data import documents
from pipeline.engine import locations, storage
from pipeline.engine.executor import Tasks
from pipeline.tokenizer._train_count import count_chunks
from pipeline.tokenizer.patterns import chunk_aligned, compile_checked


def count_prepared(tasks: Tasks, prepared_dir: str | os.PathLike[str], split: str, *, pattern: str,
                   progress: bool = False) -> dict[str, int]:
    """The chunk counts of every document of a prepared split (``pattern`` already resolved)."""
    compile_checked(pattern)
    prepared = storage.committed(prepared_dir)
    paths = [locations.join(prepared, part.file) for part in documents.read_parts(prepared, split) if part.documents]
    if not paths:
        return {}
    return tasks.map_reduce(functools.partial(count_part, pattern), add_counts, paths,
                            labels=[str(path) for path in paths], desc="tokenizer: count chunks", progress=progress)


def count_part(pattern: str, location: Path | str) -> Counter[str]:
    """Task: the chunk counts of one part file, a long document read in pieces cut where no chunk crosses (with
    the named patterns and the word kind's; see ``patterns.chunk_aligned``), so that the task's memory is the
    distinct chunks, not the longest document."""
    with storage.local_copy(location) as path:
        texts = chunk_aligned(documents.iter_document_pieces(path), pattern)
        return Counter(count_chunks(texts, pattern=pattern, workers=1))


def add_counts(left: Counter[str], right: Counter[str]) -> Counter[str]:
    """The sum of two counts, updating the larger so that most updates hit existing keys."""
    if len(right) > len(left):
        left, right = right, left
    left.update(right)
    return left
