"""Megatron-LM's indexed dataset (``<prefix>.bin`` + ``<prefix>.idx``), which Megatron-core, NeMo and GPT-NeoX read.

The layout is the one ``megatron.core.datasets.indexed_dataset`` defines (its ``_IndexWriter`` writes it and
``IndexedDataset`` reads it; ``tests/shards/test_megatron_export.py`` reads these files back with it):

* ``.bin``: every token of the split, one document after another, in the dtype below, no header.
* ``.idx``: the magic ``MMIDIDX\\x00\\x00``, version 1 as a little-endian uint64, the dtype's code as one byte,
  the number of sequences and of document indices (uint64 each), then each sequence's length (int32), each
  sequence's byte offset in ``.bin`` (int64) and the document indices (int64): the sequence index where each
  document starts, then the number of sequences.

Every document of the shards is one sequence, as Megatron's ``tools/preprocess_data.py`` writes a document
when it does not split sentences, with its EOS/BOS as the encode stage added them (``--append-eod`` appends
the EOS there; here the shards already hold it), so the document indices are ``0, 1, …, documents``. The
dtype is the one ``preprocess_data.py`` picks (``DType.optimal_dtype`` of the vocabulary size): uint16 below
65,500 IDs, int32 from there on, so Megatron holds at most 2**31 IDs.

Both files are written shard by shard, and the index in three passes over the shards' offsets, so memory
stays at one shard whatever the corpus size.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np

from pipeline.engine import atomic
from pipeline.shards.format import ShardSet

INDEX_MAGIC = b"MMIDIDX\x00\x00"
INDEX_VERSION = 1
UINT16_BELOW = 65_500  # Megatron's DType.optimal_dtype: uint16 for fewer IDs, int32 from there on
DTYPE_CODES = {np.dtype("<u2"): 8, np.dtype("<i4"): 4}  # megatron.core's DType enum: uint16 = 8, int32 = 4
_INDEX_CHUNK = 1 << 20  # document indices written this many at a time


def token_dtype(vocab_size: int) -> np.dtype:
    """The dtype Megatron's ``preprocess_data.py`` would store a ``vocab_size`` vocabulary's IDs in."""
    return np.dtype("<u2") if vocab_size < UINT16_BELOW else np.dtype("<i4")


def file_names(split: str) -> tuple[str, str]:
    """``train_text_document.bin`` / ``.idx``: Megatron's ``{prefix}_{json key}_{level}`` naming, so
    ``--data-path <dir>/train_text_document`` reads them."""
    prefix = f"{split}_text_document"
    return f"{prefix}.bin", f"{prefix}.idx"


def write_indexed_dataset(shard_set: ShardSet, directory: str | os.PathLike[str]) -> list[Path]:
    """Write ``shard_set`` as ``<split>_text_document.bin`` and ``.idx`` into ``directory``; return both paths."""
    dtype = token_dtype(shard_set.vocab_size)
    bin_path, idx_path = (Path(directory) / name for name in file_names(shard_set.split))
    with atomic.atomic_path(bin_path) as tmp, open(tmp, "wb") as handle:
        for shard in shard_set.shards:
            handle.write(shard.tokens.astype(dtype, copy=False).data)
    with atomic.atomic_path(idx_path) as tmp, open(tmp, "wb") as handle:
        write_index(handle, shard_set, dtype)
    return [bin_path, idx_path]


def write_index(handle, shard_set: ShardSet, dtype: np.dtype) -> None:
    """The ``.idx`` of ``shard_set``, one document per sequence."""
    documents = shard_set.num_documents
    handle.write(INDEX_MAGIC + struct.pack("<QB", INDEX_VERSION, DTYPE_CODES[dtype]))
    handle.write(struct.pack("<QQ", documents, documents + 1))
    for shard in shard_set.shards:
        handle.write(np.diff(shard.offsets).astype("<i4").data)
    start = 0
    for shard in shard_set.shards:
        byte_offsets = (shard.offsets[:-1].astype("<i8") - shard.offsets[0] + start) * dtype.itemsize
        handle.write(byte_offsets.data)
        start += shard.num_tokens
    for first in range(0, documents + 1, _INDEX_CHUNK):
        handle.write(np.arange(first, min(first + _INDEX_CHUNK, documents + 1), dtype="<i8").data)
