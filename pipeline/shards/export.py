"""Shard sets in other tools' formats: Parquet (duckdb, pandas, Spark), nanoGPT's flat ``.bin`` and
Megatron-LM's indexed dataset (Megatron-core, NeMo, GPT-NeoX; :mod:`pipeline.shards.megatron`).

Each reads the memory-mapped shards and writes whole buffers, one shard at a
time, so memory stays at one shard whatever the corpus size. Every exported
file gets a JSON sidecar (``train.bin`` → ``train.bin.json``) with the shard
set's stamp (tokenizer fingerprint, vocabulary size, dtype, special IDs), its
counts and the file's sha256, since a ``.bin`` cannot carry metadata itself.
The nanoGPT export also writes ``meta.pkl``, which nanoGPT's ``train.py``
reads for ``vocab_size`` (without it, it silently assumes GPT-2's 50,304);
its ``.bin`` holds the shards' dtype, uint16 up to 65,536 IDs and uint32
above, which ``meta.pkl`` names as ``dtype`` (nanoGPT's ``train.py`` reads
uint16 unless told otherwise).

Whether a format can hold the vocabulary is decided before anything is
written (:func:`pipeline.config.export_formats.check_export_ids`), so an export is never half-done.
"""

from __future__ import annotations

import json
import os
import pickle
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.config.export_formats import check_export_ids
from pipeline.engine import atomic, hashing
from pipeline.errors import ShardError, TokenizerMismatchError, json_error_reason
from pipeline.shards import megatron
from pipeline.shards.format import METADATA_PREFIX, ShardSet, shard_schema
from pipeline.tokenizer import Tokenizer
from pipeline.tokenizer.layout import ids_dtype

NANOGPT_META = "meta.pkl"
DATA_SUFFIXES = (".parquet", ".bin", ".idx")  # what the formats write, each file with its sidecar
PICKLE_PROTOCOL = 4  # fixed, so the same tokenizer gives the same meta.pkl bytes on every Python


def export_shards(shard_sets: Sequence[ShardSet], tokenizer: Tokenizer, directory: str | os.PathLike[str],
                  formats: Sequence[str]) -> list[tuple[str, Path]]:
    """Write every split in every format into ``directory``, each file with its sidecar; return each data
    file with its split. Every format is checked against the vocabulary before the first file is written."""
    check_export_ids(formats, tokenizer.vocab_size, f"the tokenizer ({tokenizer.fingerprint[:12]}) has")
    directory = Path(directory)
    written = []
    for format_ in formats:
        for shard_set in shard_sets:
            for path in WRITERS[format_](shard_set, directory):
                write_sidecar(path, shard_set, format_)
                written.append((shard_set.split, path))
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


def exported_files(directory: str | os.PathLike[str]) -> list[Path]:
    """The files of ``directory`` that an export writes (``.parquet``, ``.bin``, ``.idx``), in name order."""
    return sorted(path for path in Path(directory).iterdir() if path.suffix in DATA_SUFFIXES and path.is_file())


def check_export(directory: str | os.PathLike[str], tokenizer: Tokenizer) -> list[Path]:
    """The exported files of ``directory`` if each one's sidecar names ``tokenizer`` (fingerprint and vocabulary
    size), else TokenizerMismatchError naming the first that does not or has no sidecar."""
    files = exported_files(directory)
    if not files:
        raise ShardError(f"{directory} holds no exported file ({', '.join(DATA_SUFFIXES)})")
    for path in files:
        sidecar = _read_sidecar(path)
        fingerprint, vocab_size = sidecar.get("tokenizer_fingerprint"), sidecar.get("vocab_size")
        if (fingerprint, vocab_size) != (tokenizer.fingerprint, tokenizer.vocab_size):
            size = f"{vocab_size:,}" if type(vocab_size) is int else repr(vocab_size)
            raise TokenizerMismatchError(
                f"{path} was exported with tokenizer {fingerprint} (vocab size {size}, says "
                f"{sidecar_path(path).name}), but the given tokenizer is {tokenizer.fingerprint} (vocab size "
                f"{tokenizer.vocab_size:,}); export again with `lmprep run export`, or train with that tokenizer")
    return files


def _read_sidecar(path: Path) -> dict[str, Any]:
    sidecar = sidecar_path(path)
    if not sidecar.is_file():
        raise TokenizerMismatchError(f"{path} has no sidecar {sidecar.name}, so nothing says which tokenizer its IDs "
                                     "belong to; export it with `lmprep export`")
    try:
        data = json.loads(sidecar.read_bytes())
    except (ValueError, RecursionError) as exc:
        raise ShardError(f"{sidecar} is not JSON: {json_error_reason(exc)}") from None
    if not isinstance(data, dict):
        raise ShardError(f"{sidecar} is not an lmprep export sidecar (a JSON object)")
    return data


def nanogpt_meta(tokenizer: Tokenizer) -> dict[str, Any]:
    """The ``meta.pkl`` nanoGPT reads: ``vocab_size``; for the char and word kinds also ``stoi``/``itos``.

    ``itos`` maps every ID to its text (a merged token's or a word's whole string, a special token's
    name), so nanoGPT's ``''.join(itos[i] for i in ids)`` decodes as lmprep does. Its character-by-
    character ``stoi`` encoder finds only single characters, so prompts encode without merges (or
    fail, for words): encode with lmprep. Byte-level tokens can end inside a character, so the byte
    kind has no ``itos``: decode with lmprep.
    """
    meta: dict[str, Any] = {"vocab_size": tokenizer.vocab_size, "tokenizer_fingerprint": tokenizer.fingerprint,
                            "kind": tokenizer.kind, "dtype": ids_dtype(tokenizer.vocab_size).name}
    if tokenizer.kind != "byte":
        itos = {i: tokenizer.token_bytes(i).decode("utf-8") for i in range(tokenizer.vocab_size)}
        meta["itos"] = itos
        meta["stoi"] = {text: i for i, text in itos.items() if i != tokenizer.unk_id}
    return meta


def write_nanogpt_meta(tokenizer: Tokenizer, path: str | os.PathLike[str]) -> None:
    atomic.write_bytes(path, pickle.dumps(nanogpt_meta(tokenizer), protocol=PICKLE_PROTOCOL))


def write_parquet(shard_set: ShardSet, directory: Path) -> list[Path]:
    """``<split>.parquet``: one row group per shard, with the shards' columns (``input_ids``, then each row's
    source, file and document), the set's provenance in the schema metadata."""
    path = directory / f"{shard_set.split}.parquet"
    metadata = {METADATA_PREFIX + key: atomic.dumps_json(value, indent=None)
                for key, value in shard_set.manifest.stamp.to_dict().items()}
    schema = shard_schema(shard_set.dtype, metadata)
    with atomic.atomic_path(path) as tmp, pq.ParquetWriter(str(tmp), schema, compression="zstd") as writer:
        for shard in shard_set.shards:
            writer.write_table(pa.Table.from_batches([shard.batch.replace_schema_metadata(metadata)]))
    return [path]


def write_nanogpt_bin(shard_set: ShardSet, directory: Path) -> list[Path]:
    """``<split>.bin``, nanoGPT's format: every token of the split as one flat little-endian array, no header,
    in the shards' dtype (uint16 up to 65,536 IDs, else uint32; ``meta.pkl`` says which)."""
    path = directory / f"{shard_set.split}.bin"
    dtype = shard_set.dtype.newbyteorder("<")
    with atomic.atomic_path(path) as tmp, open(tmp, "wb") as handle:
        for shard in shard_set.shards:
            handle.write(shard.tokens.astype(dtype, copy=False).data)
    return [path]


WRITERS = {"parquet": write_parquet, "nanogpt": write_nanogpt_bin, "megatron": megatron.write_indexed_dataset}
