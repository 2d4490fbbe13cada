"""Encoding one tokenizer's text: the native core's encoder, or the Python fallback.

The algorithm is ``reference.encode`` (read it first): split, then merge each chunk's base IDs lowest rank
first. Real text repeats its chunks (words with their leading space), so both paths encode each distinct
chunk once and keep its IDs in a cache bounded in bytes (the native one counts its UTF-8 keys, 4 bytes
per ID and its slots; the Python one what ``sys.getsizeof`` says of its keys and ID lists, and
``ENTRY_OVERHEAD`` for the dict's slot): an entry that would pass the bound empties the cache first, and
chunks over ``CACHE_MAX_CHUNK`` characters are encoded but never kept.

- :class:`NativeEncoder`: ``_native.Encoder`` splits, looks up and merges in one pass per call, without the
  GIL, in as many threads as asked (docs/native.md). A custom pattern is split here with ``regex`` and the
  chunks go to an encoder that takes each as a whole.
- :class:`PythonEncoder`: ``reference.encode_chunk`` behind the cache, where there is no native core (and
  for the word kind, which has no merges: its chunks are looked up whole).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import chain

import numpy as np

from pipeline.tokenizer import backend, patterns, reference

MergeTable = Mapping[tuple[int, int], int]
DEFAULT_CACHE_BYTES = 256 * 10**6  # per process; the cache starts over when full
CACHE_MAX_CHUNK = 256  # longer chunks (a whole document, with pattern none) are encoded but not cached
ENTRY_OVERHEAD = 64  # bytes a dict entry costs beyond its key and value objects (slot, index, growth slack)


class PythonEncoder:
    """Text -> IDs in plain Python: split, then each distinct chunk merged once by ``reference.encode_chunk``."""

    def __init__(self, split: Callable[[str], list[str]], base_ids: Callable[[str], list[int]], rank_of: MergeTable,
                 result_of: Sequence[int], *, max_bytes: int = DEFAULT_CACHE_BYTES):
        """``base_ids`` maps a chunk to the IDs merging starts from (its bytes, its characters, or a word's one
        ID); ``rank_of`` gives each merged pair its rank, ``result_of[rank]`` the ID it makes."""
        self._split = split
        self._base_ids = base_ids
        self._rank_of = rank_of
        self._result_of = result_of
        self._cache: dict[str, list[int]] = {}
        self.max_bytes = max_bytes
        self.nbytes = 0

    def __len__(self) -> int:
        return len(self._cache)

    def bound_cache(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        if self.nbytes > max_bytes:
            self._cache.clear()
            self.nbytes = 0

    def ids(self, text: str) -> list[int]:
        with _refusals_in_whole_texts([text]):
            return [i for chunk in self._split(text) for i in self._chunk_ids(chunk)]

    def array(self, text: str) -> np.ndarray:
        return np.array(self.ids(text), dtype=np.uint32)

    def lists(self, texts: Sequence[str], threads: int = 1) -> list[list[int]]:
        """Each text's IDs; one thread whatever ``threads`` says: Python holds the GIL, more would take turns."""
        return list(map(self.ids, texts))

    def flat(self, texts: Sequence[str], threads: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """All texts' IDs concatenated (``uint32``) and ``len(texts) + 1`` offsets (``int64``)."""
        lists = self.lists(texts)
        offsets = np.zeros(len(lists) + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, lists), dtype=np.int64, count=len(lists)), out=offsets[1:])
        return np.fromiter(chain.from_iterable(lists), dtype=np.uint32, count=int(offsets[-1])), offsets

    def _chunk_ids(self, chunk: str) -> list[int]:
        ids = self._cache.get(chunk)
        if ids is None:
            ids = reference.encode_chunk(self._base_ids(chunk), self._rank_of, self._result_of)
            self._keep(chunk, ids)
        return ids

    def _keep(self, chunk: str, ids: list[int]) -> None:
        if len(chunk) > CACHE_MAX_CHUNK:
            return
        size = sys.getsizeof(chunk) + sys.getsizeof(ids) + ENTRY_OVERHEAD  # the IDs' ints are the merge table's
        if self.nbytes + size > self.max_bytes:
            self._cache.clear()
            self.nbytes = 0
        if size <= self.max_bytes:
            self._cache[chunk] = ids
            self.nbytes += size


class NativeEncoder:
    """Text -> IDs by the native core (``_native.Encoder``): split, its own chunk cache and the merges of the
    misses in one pass per call, without the GIL. ``split`` is None for the patterns the core splits; for a
    custom pattern it cuts each text here, and the encoder (built with the whole-text mode) takes the chunks."""

    def __init__(self, encoder, split: Callable[[str], list[str]] | None = None):
        self._encoder = encoder
        self._split = split

    def __len__(self) -> int:
        return len(self._encoder)

    @property
    def max_bytes(self) -> int:
        return self._encoder.max_bytes

    @property
    def nbytes(self) -> int:
        return self._encoder.nbytes

    def bound_cache(self, max_bytes: int) -> None:
        self._encoder.max_bytes = max_bytes

    def ids(self, text: str) -> list[int]:
        return self.array(text).tolist()

    def array(self, text: str) -> np.ndarray:
        if self._split is not None:
            return self.flat([text])[0]
        return np.frombuffer(self._encoder.encode(text), dtype=np.uint32)

    def flat(self, texts: Sequence[str], threads: int = 1) -> tuple[np.ndarray, np.ndarray]:
        if self._split is None:
            ids, offsets = self._encoder.encode_flat(texts, threads)
            return np.frombuffer(ids, dtype=np.uint32), np.frombuffer(offsets, dtype=np.int64).copy()
        chunk_lists = list(map(self._split, texts))
        with _refusals_in_whole_texts(texts):
            ids, chunk_offsets = self._encoder.encode_flat(list(chain.from_iterable(chunk_lists)), threads)
        ends = np.zeros(len(chunk_lists) + 1, dtype=np.int64)  # where each text's chunks end among all chunks
        np.cumsum(np.fromiter(map(len, chunk_lists), dtype=np.int64, count=len(chunk_lists)), out=ends[1:])
        return np.frombuffer(ids, dtype=np.uint32), np.frombuffer(chunk_offsets, dtype=np.int64)[ends]

    def lists(self, texts: Sequence[str], threads: int = 1) -> list[list[int]]:
        if self._split is None:
            return self._encoder.encode_lists(texts, threads)
        ids, offsets = self.flat(texts, threads)
        flat, bounds = ids.tolist(), offsets.tolist()
        return [flat[start:end] for start, end in zip(bounds, bounds[1:])]


@contextlib.contextmanager
def _refusals_in_whole_texts(texts: Sequence[str]) -> Iterator[None]:
    """The byte kind's refusal of a lone surrogate in a chunk, raised again for the first text that holds one,
    so that its position is in the text, as the native core gives it."""
    try:
        yield
    except UnicodeEncodeError:
        for text in texts:
            text.encode("utf-8")
        raise


def native_encoder(pattern: str, base: Sequence[int] | Mapping[str, int], unknown: int | None, rank_of: MergeTable,
                   result_of: Sequence[int]) -> NativeEncoder | None:
    """The native encoder of a byte (``base``: the 256 base IDs by byte value) or char tokenizer (``base``:
    character -> ID), or None without the native core."""
    if backend.native is None:
        return None
    mode = patterns.native_mode(pattern)
    split = None if mode is not None else patterns.splitter(pattern)
    pairs = sorted(rank_of, key=rank_of.__getitem__)
    encoder = backend.native.Encoder([a for a, _ in pairs], [b for _, b in pairs],
                                     [result_of[rank_of[pair]] for pair in pairs],
                                     backend.native.SPLIT_MODES["none"] if mode is None else mode,
                                     dict(base) if isinstance(base, Mapping) else list(base), unknown or 0)
    return NativeEncoder(encoder, split)
