"""Shard sets in other tools' formats: Parquet (duckdb, pandas, Spark) and nanoGPT's flat ``.bin``.

Both read the memory-mapped shards and write whole buffers, one shard at a
time, so memory stays at one shard whatever the corpus size. Every exported
file gets a JSON sidecar (``train.bin`` → ``train.bin.json``) with the shard
set's stamp (tokenizer fingerprint, vocabulary size, dtype, special IDs), its
counts and the file's sha256, since a ``.bin`` cannot carry metadata itself.
The nanoGPT export also writes ``meta.pkl``, which nanoGPT's ``train.py``
reads for ``vocab_size`` (without it, it silently assumes GPT-2's 50,304).
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.engine import atomic, hashing
from pipeline.errors import ShardError
from pipeline.shards.format import COLUMN, METADATA_PREFIX, ShardSet, shard_schema
from pipeline.tokenizer import Tokenizer

SUFFIXES = {"parquet": ".parquet", "nanogpt": ".bin"}
NANOGPT_META = "meta.pkl"
PICKLE_PROTOCOL = 4  # fixed, so the same tokenizer gives the same meta.pkl bytes on every Python


def export_shards(shard_sets: Sequence[ShardSet], tokenizer: Tokenizer, directory: str | os.PathLike[str],
                  formats: Sequence[str]) -> list[Path]:
    """Write every split in every format into ``directory``, each file with its sidecar; return the data files."""
    directory = Path(directory)
    written = []
    for format_ in formats:
        for shard_set in shard_sets:
            path = directory / f"{shard_set.split}{SUFFIXES[format_]}"
            (write_parquet if format_ == "parquet" else write_nanogpt_bin)(shard_set, path)
            write_sidecar(path, shard_set, format_)
            written.append(path)
        if format_ == "nanogpt":
            write_nanogpt_meta(tokenizer, directory / NANOGPT_META)
    return written


def sidecar_path(path: str | os.PathLike[str]) -> Path:
    path = Path(path)
    return path.with_name(path.name + ".json")


def write_sidecar(path: Path, shard_set: ShardSet, format_: str) -> None:
    """``<file>.json``: what the exported file holds and which tokenizer its IDs belong to."""
    atomic.write_json(sidecar_path(path), {
        **shard_set.manifest.stamp.to_dict(),
        "export_format": format_,
        "file": path.name,
        "sha256": hashing.sha256_file(path),
        "documents": shard_set.num_documents,
        "tokens": shard_set.num_tokens,
        "shard_set_fingerprint": shard_set.fingerprint,
    })


def nanogpt_meta(tokenizer: Tokenizer) -> dict[str, Any]:
    """The ``meta.pkl`` nanoGPT reads: ``vocab_size``; for the char and word kinds also ``stoi``/``itos``.

    ``itos`` maps every ID to its text (a merged token's or a word's whole string, a special token's
    name), so nanoGPT's ``''.join(itos[i] for i in ids)`` decodes as lmprep does. Its character-by-
    character ``stoi`` encoder finds only single characters, so prompts encode without merges (or
    fail, for words): encode with lmprep. Byte-level tokens can end inside a character, so the byte
    kind has no ``itos``: decode with lmprep.
    """
    meta: dict[str, Any] = {"vocab_size": tokenizer.vocab_size, "tokenizer_fingerprint": tokenizer.fingerprint,
                            "kind": tokenizer.kind}
    if tokenizer.kind != "byte":
        itos = {i: tokenizer.token_bytes(i).decode("utf-8") for i in range(tokenizer.vocab_size)}
        meta["itos"] = itos
        meta["stoi"] = {text: i for i, text in itos.items() if i != tokenizer.unk_id}
    return meta


def write_nanogpt_meta(tokenizer: Tokenizer, path: str | os.PathLike[str]) -> None:
    atomic.write_bytes(path, pickle.dumps(nanogpt_meta(tokenizer), protocol=PICKLE_PROTOCOL))


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
