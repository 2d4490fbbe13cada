"""The counting pass of BPE training as partition tasks: one prepared part file per task.

Each task counts the distinct pre-split chunks of its part; the counts are
summed pairwise as a tree (on a cluster, between workers) and only the total
reaches the driver, which runs the merges as before. The driver's memory is
therefore the distinct chunks of the whole training split (about 100 bytes
each: a few million for gigabytes of English), not the corpus. The counts travel
as ``_train_count.tally`` gives them: with the native core, one buffer per part,
summed without a Python object per chunk.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from pipeline.data import documents
from pipeline.engine import locations, storage
from pipeline.engine.executor import Tasks
from pipeline.tokenizer._train_count import add_counts, tally
from pipeline.tokenizer.patterns import chunk_aligned, compile_checked


def count_prepared(tasks: Tasks, prepared_dir: str | os.PathLike[str], split: str, *, pattern: str,
                   progress: bool = False):
    """The chunk counts of every document of a prepared split (``pattern`` already resolved), as
    ``_train_count.tally`` gives them (``{}`` for none)."""
    compile_checked(pattern)
    prepared = storage.committed(prepared_dir)
    paths = [locations.join(prepared, part.file) for part in documents.read_parts(prepared, split) if part.documents]
    if not paths:
        return {}
    return tasks.map_reduce(functools.partial(count_part, pattern), add_counts, paths,
                            labels=[str(path) for path in paths], desc="tokenizer: count chunks", progress=progress)


def count_part(pattern: str, location: Path | str):
    """Task: the chunk counts of one part file (``_train_count.tally``'s), a long document read in pieces cut where
    no chunk crosses (with the named patterns and the word kind's; see ``patterns.chunk_aligned``), so that the
    task's memory is the distinct chunks, not the longest document."""
    with storage.local_copy(location) as path:
        texts = chunk_aligned(documents.iter_document_pieces(path), pattern)
        return tally(texts, pattern=pattern, workers=1)
