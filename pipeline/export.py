"""Shard sets in other tools' formats: Parquet (duckdb, pandas, Spark) and nanoGPT's flat ``.bin``.

Both read the memory-mapped shards and write whole buffers, one shard at a
time, so memory stays at one shard whatever the corpus size.
"""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline import atomic
from pipeline.errors import ShardError
from pipeline.shards import COLUMN, METADATA_PREFIX, ShardSet, shard_schema


def write_parquet(shard_set: ShardSet, path: str | os.PathLike[str]) -> None:
    """One Parquet file, one row group per shard, the set's provenance in the schema metadata."""
    metadata = {METADATA_PREFIX + key: atomic.dumps_json(value, indent=None)
                for key, value in shard_set.manifest.stamp.to_dict().items()}
    schema = shard_schema(shard_set.dtype, metadata)
    list_type = schema.field(COLUMN).type
    with atomic.atomic_path(path) as tmp, pq.ParquetWriter(str(tmp), schema, compression="zstd") as writer:
        for shard in shard_set.shards:
            column = pa.ListArray.from_arrays(pa.array(shard.offsets), pa.array(shard.tokens), type=list_type)
            writer.write_table(pa.Table.from_arrays([column], schema=schema))


def write_nanogpt_bin(shard_set: ShardSet, path: str | os.PathLike[str]) -> None:
    """nanoGPT's format: every token of the split as one flat little-endian uint16 array, no header."""
    if shard_set.dtype != np.uint16:
        raise ShardError(
            f"{shard_set.directory}: nanoGPT .bin files hold uint16 IDs, but the vocabulary has "
            f"{shard_set.vocab_size} IDs (over 65,536); export --format parquet instead"
        )
    with atomic.atomic_path(path) as tmp, open(tmp, "wb") as handle:
        for shard in shard_set.shards:
            handle.write(shard.tokens.astype("<u2", copy=False).data)
