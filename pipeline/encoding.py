"""Encode prepared documents into token shards with a pool of worker processes.

The main process streams a prepared file's record batches from a memory map
and cuts them into tasks of about 1 MB of UTF-8 (raw bytes and offsets, so it
never decodes text itself); a worker decodes a task, encodes it with the
tokenizer it loaded once from ``tokenizer.json``, adds the BOS/EOS IDs and
returns flat IDs of the shard dtype. Results are consumed in submission
order, so the shards are byte-identical for any number of workers, and at most
``max_in_flight`` tasks exist at once, so memory stays flat as the corpus grows.

The workers are plain module-level functions handed to any
:class:`concurrent.futures.Executor`: a process pool here, a cluster executor
later, a thread pool in tests.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
from tqdm import tqdm

from pipeline import atomic, documents, hashing
from pipeline.errors import TokenizerError, TokenizerMismatchError
from pipeline.parallel import ordered_map
from pipeline.shards import Manifest, ShardStamp, ShardWriter, ids_dtype
from pipeline.tokenizer import Tokenizer
from pipeline.tokenizer.encode import DEFAULT_CACHE_BYTES

TASK_BYTES = 1 << 20


@dataclass(frozen=True)
class EncodeTask:
    """A run of documents as UTF-8 bytes plus byte offsets: cheap to pickle, no text decoding in the parent."""

    tokenizer_path: str
    tokenizer_fingerprint: str
    data: bytes
    offsets: np.ndarray
    bos_id: int | None
    eos_id: int | None
    cache_bytes: int = DEFAULT_CACHE_BYTES


@dataclass(frozen=True)
class EncodedBatch:
    ids: np.ndarray
    offsets: np.ndarray
    text_bytes: int


def add_special_ids(
    ids: np.ndarray, offsets: np.ndarray, *, bos_id: int | None, eos_id: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """Put ``bos_id`` before and ``eos_id`` after every document, by ID, without a loop per document.

    >>> ids, offsets = add_special_ids(np.array([5, 6, 7]), np.array([0, 2, 2, 3]), bos_id=None, eos_id=9)
    >>> ids.tolist(), offsets.tolist()
    ([5, 6, 9, 9, 7, 9], [0, 3, 4, 6])
    """
    extra = (bos_id is not None) + (eos_id is not None)
    offsets = offsets - offsets[0]
    if extra == 0:
        return ids, offsets
    documents_count = len(offsets) - 1
    new_offsets = offsets + np.arange(documents_count + 1) * extra
    lead = np.arange(documents_count) * extra + (bos_id is not None)
    out = np.empty(new_offsets[-1], dtype=ids.dtype)
    out[np.arange(len(ids)) + np.repeat(lead, np.diff(offsets))] = ids
    if bos_id is not None:
        out[new_offsets[:-1]] = bos_id
    if eos_id is not None:
        out[new_offsets[1:] - 1] = eos_id
    return out, new_offsets


_TOKENIZERS: dict[str, Tokenizer] = {}
_TOKENIZER_DIGESTS: dict[str, str] = {}


def load_tokenizer_cached(path: str, fingerprint: str) -> Tokenizer:
    """The worker's tokenizer: loaded once per process, reloaded if the file changed since."""
    tokenizer = _TOKENIZERS.get(path)
    if tokenizer is None or tokenizer.fingerprint != fingerprint:
        tokenizer = _TOKENIZERS[path] = Tokenizer.load(path)
    if tokenizer.fingerprint != fingerprint:
        raise TokenizerMismatchError(
            f"{path}: tokenizer changed during encoding (fingerprint {tokenizer.fingerprint}, "
            f"expected {fingerprint}); re-run 'lmprep run encode'"
        )
    return tokenizer


def share_tokenizer(path: str) -> Tokenizer:
    """Load the tokenizer into this process's cache before the pool starts its workers.

    Forked workers inherit it and skip their own load (0.26 s of CPU each for
    32k IDs, on a corpus that takes ~4 s per worker); spawned ones load it once.
    A file with the same sha256 as at the last call (2 ms to hash) is not parsed
    again: the stage and each split share one load of ~0.2 s.
    """
    try:
        digest = hashing.sha256_file(path)  # before loading: a file replaced meanwhile is loaded again next time
    except OSError:
        digest = None  # Tokenizer.load reports it
    if digest is None or path not in _TOKENIZERS or _TOKENIZER_DIGESTS.get(path) != digest:
        _TOKENIZERS[path] = Tokenizer.load(path)
        _TOKENIZER_DIGESTS[path] = digest
    return _TOKENIZERS[path]


def encode_task(task: EncodeTask) -> EncodedBatch:
    """Worker: decode the task's documents, encode them and add the special IDs."""
    tokenizer = load_tokenizer_cached(task.tokenizer_path, task.tokenizer_fingerprint)
    tokenizer.bound_cache(task.cache_bytes)
    count = len(task.offsets) - 1
    column = pa.LargeStringArray.from_buffers(count, pa.py_buffer(task.offsets), pa.py_buffer(task.data))
    ids, offsets = tokenizer.encode_batch_flat(column.to_pylist())
    ids, offsets = add_special_ids(ids, offsets, bos_id=task.bos_id, eos_id=task.eos_id)
    return EncodedBatch(ids.astype(ids_dtype(tokenizer.vocab_size)), offsets, len(task.data))


def iter_tasks(source: Path, tokenizer: Tokenizer, tokenizer_path: str, *, bos_id: int | None,
               eos_id: int | None, task_bytes: int = TASK_BYTES,
               cache_bytes: int = DEFAULT_CACHE_BYTES) -> Iterator[EncodeTask]:
    """Cut a prepared file into tasks of about ``task_bytes`` of text (at least one document each)."""
    for column in _text_columns(source):
        offsets = documents.text_offsets(column)
        data = column.buffers()[2]
        for start, end in _task_bounds(offsets, task_bytes):
            chunk = data[int(offsets[start]) : int(offsets[end])].to_pybytes()
            yield EncodeTask(tokenizer_path, tokenizer.fingerprint, chunk, offsets[start : end + 1] - offsets[start],
                             bos_id, eos_id, cache_bytes)


def _text_columns(source: Path) -> Iterator[pa.LargeStringArray]:
    """The ``text`` column of each record batch, undecoded.

    Read, not memory-mapped: mapped pages stay in the resident set until the
    file is closed, which would make peak RSS grow with the corpus.
    """
    next(documents.iter_document_batches(source), None)  # validates the file, naming it on error
    for batch in pa.ipc.open_stream(pa.OSFile(str(source))):
        yield batch.column(0)


def _task_bounds(offsets: np.ndarray, task_bytes: int) -> Iterator[tuple[int, int]]:
    start, count = 0, len(offsets) - 1
    while start < count:
        end = int(np.searchsorted(offsets, offsets[start] + task_bytes, side="right")) - 1
        end = min(max(end, start + 1), count)
        yield start, end
        start = end


def encode_split(source: str | os.PathLike[str], directory: str | os.PathLike[str], split: str, *,
                 tokenizer_path: str | os.PathLike[str], executor: Executor, shard_tokens: int,
                 bos_id: int | None = None, eos_id: int | None = None, max_in_flight: int = 8,
                 task_bytes: int = TASK_BYTES, cache_bytes: int = DEFAULT_CACHE_BYTES,
                 progress: bool = False) -> Manifest:
    """Encode one prepared split file into ``directory``'s shard set for ``split``; return its manifest.

    ``cache_bytes`` bounds each worker's chunk cache (see :class:`~pipeline.tokenizer.encode.ChunkCache`).
    """
    source, path = Path(source), str(tokenizer_path)
    tokenizer = share_tokenizer(path)
    _check_special_ids(tokenizer, path, bos_id=bos_id, eos_id=eos_id)
    stamp = ShardStamp(split=split, tokenizer_fingerprint=tokenizer.fingerprint, vocab_size=tokenizer.vocab_size,
                       special_ids={"bos": bos_id, "eos": eos_id}, prepared_fingerprint=hashing.sha256_file(source))
    writer = ShardWriter(directory, stamp, shard_tokens=shard_tokens)
    tasks = iter_tasks(source, tokenizer, path, bos_id=bos_id, eos_id=eos_id, task_bytes=task_bytes,
                       cache_bytes=cache_bytes)
    tokens = 0
    with _progress_bar(source, split, enabled=progress) as bar:
        for batch in ordered_map(executor, encode_task, tasks, max_in_flight=max_in_flight):
            writer.write(batch.ids, batch.offsets)
            tokens += len(batch.ids)
            _advance(bar, batch.text_bytes, tokens)
    return writer.close()


def encode_corpus(prepared_dir: str | os.PathLike[str], output_dir: str | os.PathLike[str], *,
                  splits: Iterable[str] = documents.SPLITS, **options) -> list[Manifest]:
    """Encode every split into a fresh shard directory swapped in atomically.

    An exception or a kill mid-way leaves the previous ``output_dir`` intact
    (``options`` are :func:`encode_split`'s keywords).
    """
    with atomic.atomic_dir(output_dir) as staging:
        return [encode_split(documents.prepared_path(prepared_dir, split), staging, split, **options)
                for split in splits]


def _check_special_ids(tokenizer: Tokenizer, path: str, *, bos_id: int | None, eos_id: int | None) -> None:
    for role, token_id in (("bos", bos_id), ("eos", eos_id)):
        if token_id is not None and not 0 <= token_id < tokenizer.vocab_size:
            raise TokenizerError(f"{role} ID {token_id} is outside the vocabulary of {path} ({tokenizer.vocab_size})")


def _progress_bar(source: Path, split: str, *, enabled: bool) -> tqdm:
    return tqdm(total=documents.count_bytes(source), desc=f"encode {split}", unit="B", unit_scale=True,
                unit_divisor=1000, disable=not enabled, dynamic_ncols=True)


def _advance(bar: tqdm, text_bytes: int, tokens: int) -> None:
    """Bytes drive the bar (its rate is MB/s); the postfix adds the tokens so far and tokens/s."""
    bar.update(text_bytes)
    elapsed = bar.format_dict["elapsed"] or 1e-9
    bar.set_postfix_str(f"{tokens:,} tokens, {tokens / elapsed / 1e6:.2f} Mtok/s", refresh=False)
