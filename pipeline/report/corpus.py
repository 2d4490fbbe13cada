"""The corpus as the report shows it: document lengths, bytes per token, scripts, the tokenizer's pieces.

Lengths go into fixed logarithmic bins (:data:`BINS` of them, four per doubling: 0, 1, 2, 3, 4, 5, 6–7, 8–9, …),
per split and source, from one streamed pass over the prepared parts (characters, from ``utf8_length``) and the
shards' row offsets (tokens); nothing holds one number per document. Bytes per token per source are exact: the kept
documents' UTF-8 bytes over their tokens less the special tokens encode adds to each row. Bytes per token per
script come from a bounded sample (the first :data:`SCRIPT_SAMPLE` documents of each source, each cut to
:data:`SCRIPT_CHARS` characters), each document counted under its main script (or ``code``), plus a few fixed
probe texts that say what the tokenizer does to scripts the corpus may not have.
"""

from __future__ import annotations

import os
import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.data import documents
from pipeline.engine import locations, storage
from pipeline.shards.format import ShardSet
from pipeline.tokenizer import Tokenizer

EDGES = np.unique(np.ceil(2.0 ** (np.arange(0, 4 * 31) / 4)).astype(np.int64))  # four bins per doubling
BINS = len(EDGES) + 1  # bin 0 holds length 0, bin k ≥ 1 lengths [EDGES[k-1], EDGES[k]); the last, all longer
SCRIPT_SAMPLE = 100
SCRIPT_CHARS = 2_000
VIEW_CHARS = 400  # of each text shown token by token
LONGEST = 20
PROBES = {  # not from the corpus: the same texts in every report, to compare tokenizers
    "Latin": "The quick brown fox jumps over the lazy dog.",
    "Cyrillic": "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "CJK": "敏捷的棕色狐狸跳过了懒狗。素早い茶色の狐がのろまな犬を飛び越える。",
    "code": "def encode(text: str) -> list[int]:\n    return [ord(c) for c in text]\n",
    "digits": "3.14159 2026-12-01 1,234,567",
}
_SCRIPTS = {"LATIN": "Latin", "CYRILLIC": "Cyrillic", "GREEK": "Greek", "CJK": "CJK", "HIRAGANA": "CJK",
            "KATAKANA": "CJK", "HANGUL": "CJK", "ARABIC": "Arabic", "HEBREW": "Hebrew", "DEVANAGARI": "Devanagari"}
_CODE_LINE = re.compile(r"^\s*(def |class |import |from \S+ import |return\b|#include|function\b|const |let |var |"
                        r"public |private |fn |for \(|if \(|\}|\{)|[;{}]\s*$")
_CODE_SYMBOLS = frozenset("{}()[];=<>")


def length_bin(lengths: np.ndarray) -> np.ndarray:
    return np.searchsorted(EDGES, np.asarray(lengths, dtype=np.int64), side="right")


def bin_label(index: int) -> str:
    if index == 0:
        return "0"
    low = int(EDGES[index - 1])
    if index == BINS - 1:
        return f"≥{low:,}"
    high = int(EDGES[index]) - 1
    return f"{low:,}" if low == high else f"{low:,}–{high:,}"


def _add_histogram(into: dict[int, list[int]], sources: np.ndarray, lengths: np.ndarray) -> None:
    bins = length_bin(lengths)
    for source in np.unique(sources):
        counts = np.bincount(bins[sources == source], minlength=BINS)
        row = into.setdefault(int(source), [0] * BINS)
        for index, count in enumerate(counts.tolist()):
            row[index] += count


def script_of(text: str) -> str:
    """The main script of ``text``'s letters (Latin, Cyrillic, CJK, …), ``code`` for what looks like source code,
    ``no letters`` for digits and symbols only."""
    lines = [line for line in text.splitlines() if line.strip()]
    symbols = sum(ch in _CODE_SYMBOLS for ch in text)
    if len(lines) >= 2 and (sum(bool(_CODE_LINE.search(line)) for line in lines) >= 0.3 * len(lines)
                            or symbols >= 0.08 * len(text)):
        return "code"
    counts: Counter[str] = Counter()
    for ch in text:
        if ch.isalpha():
            name = unicodedata.name(ch, "")
            counts[_SCRIPTS.get(name.split(" ")[0], "other")] += 1
    return counts.most_common(1)[0][0] if counts else "no letters"


def token_view(tokenizer: Tokenizer, text: str) -> list[list[Any]]:
    """``[[piece, [id, ...]], ...]``: ``text`` token by token, each token's bytes as text. Tokens that each hold
    part of a character (bytes of a Cyrillic letter, say) are one piece with all their IDs, showing the characters
    they make together; bytes that never make a character show as ``<e2 80>``."""
    pieces: list[list[Any]] = []
    pending, ids = b"", []
    for token in tokenizer.encode_ordinary(text):
        pending += tokenizer.token_bytes(token)
        ids.append(token)
        try:
            pieces.append([pending.decode("utf-8"), ids])
        except UnicodeDecodeError:
            if len(pending) < 16:
                continue
            pieces.append([_hex(pending), ids])
        pending, ids = b"", []
    if ids:
        pieces.append([_hex(pending), ids])
    return pieces


def _hex(raw: bytes) -> str:
    return "<" + " ".join(f"{b:02x}" for b in raw) + ">"


def prepared_figures(directory: str | os.PathLike[str], sources: int, tokenizer: Tokenizer | None) -> dict[str, Any]:
    """Per split: character-length histograms, documents and UTF-8 bytes per source; the script sample. ``directory``
    is where the prepared output's committed files are (a URL's committed attempt)."""
    location = directory
    splits: dict[str, Any] = {}
    scripts: dict[str, dict[str, Any]] = {}
    taken: Counter[int] = Counter()
    for split in documents.SPLITS:
        histogram: dict[int, list[int]] = {}
        text_bytes: Counter[int] = Counter()
        count: Counter[int] = Counter()
        for part in documents.read_parts(location, split):
            with storage.local_copy(locations.join(location, part.file)) as path, pa.OSFile(str(path), "rb") as file:
                for batch in pa.ipc.open_stream(file):
                    text, source = batch.column("text"), documents.numpy_view(batch.column("source"))
                    _add_histogram(histogram, source, documents.numpy_view(pc.utf8_length(text)))
                    byte_lengths = documents.numpy_view(pc.binary_length(text))
                    for value in np.unique(source):
                        mask = source == value
                        text_bytes[int(value)] += int(byte_lengths[mask].sum())
                        count[int(value)] += int(mask.sum())
                    if tokenizer is not None:
                        _sample_scripts(scripts, taken, tokenizer, text, source)
        splits[split] = {"chars": {str(s): row for s, row in sorted(histogram.items())},
                         "documents": {str(s): n for s, n in sorted(count.items())},
                         "bytes": {str(s): n for s, n in sorted(text_bytes.items())}}
    for figures in scripts.values():
        figures["bytes_per_token"] = figures["bytes"] / figures["tokens"] if figures["tokens"] else 0.0
    return {"splits": splits, "scripts": dict(sorted(scripts.items())), "sources": sources}


def _sample_scripts(scripts: dict[str, dict[str, Any]], taken: Counter[int], tokenizer: Tokenizer,
                    text: pa.Array, source: np.ndarray) -> None:
    """Add the batch's first documents of each source still short of :data:`SCRIPT_SAMPLE` (numpy picks the rows, so
    a batch past every source's quota costs nothing in Python; only the first characters are copied out)."""
    rows: list[int] = []
    for which in np.unique(source):
        room = SCRIPT_SAMPLE - taken[int(which)]
        if room > 0:
            picked = np.flatnonzero(source == which)[:room]
            rows += picked.tolist()
            taken[int(which)] += len(picked)
    if not rows:
        return
    chosen = text.take(documents.arrow_view(np.array(sorted(rows), dtype=np.int64)))
    for value in pc.utf8_slice_codeunits(chosen, 0, SCRIPT_CHARS).to_pylist():
        if not value.strip():
            continue
        script = script_of(value)
        ids = tokenizer.encode_ordinary(value)
        figures = scripts.setdefault(script, {"documents": 0, "bytes": 0, "tokens": 0, "view": None})
        figures["documents"] += 1
        figures["bytes"] += len(value.encode("utf-8", "surrogatepass"))
        figures["tokens"] += len(ids)
        if figures["view"] is None:
            figures["view"] = token_view(tokenizer, value[:VIEW_CHARS])


def shard_figures(directory: str, splits: Sequence[str] = documents.SPLITS) -> dict[str, Any]:
    """Per split: token-length histograms, rows and tokens per source (rows' specials counted apart)."""
    figures: dict[str, Any] = {}
    for split in splits:
        shard_set = ShardSet.open(directory, split, verify=False)
        specials = sum(1 for value in shard_set.special_ids.values() if value is not None)
        histogram: dict[int, list[int]] = {}
        tokens: Counter[int] = Counter()
        rows: Counter[int] = Counter()
        for shard in shard_set.shards:
            lengths = np.diff(shard.offsets)
            sources = np.asarray(shard.sources)
            _add_histogram(histogram, sources, lengths)
            for value in np.unique(sources):
                mask = sources == value
                tokens[int(value)] += int(lengths[mask].sum())
                rows[int(value)] += int(mask.sum())
        figures[split] = {"tokens": {str(s): row for s, row in sorted(histogram.items())},
                          "source_tokens": {str(s): n for s, n in sorted(tokens.items())},
                          "rows": {str(s): n for s, n in sorted(rows.items())},
                          "specials_per_row": specials, "total_tokens": shard_set.num_tokens,
                          "fingerprint": shard_set.tokenizer_fingerprint}
    return figures


def tokenizer_figures(tokenizer: Tokenizer) -> dict[str, Any]:
    """The longest tokens (by bytes) and the probe texts token by token."""
    specials = set(tokenizer.special_tokens.values())
    widths = [(len(tokenizer.token_bytes(i)), i) for i in range(tokenizer.vocab_size) if i not in specials]
    longest = sorted(widths, key=lambda pair: (-pair[0], pair[1]))[:LONGEST]
    probes = {}
    for name, text in PROBES.items():
        view = token_view(tokenizer, text)
        raw = len(text.encode("utf-8"))
        tokens = sum(len(ids) for _, ids in view)
        probes[name] = {"text": text, "view": view, "bytes": raw, "tokens": tokens,
                        "bytes_per_token": raw / tokens if tokens else 0.0}
    return {"fingerprint": tokenizer.fingerprint, "vocab_size": tokenizer.vocab_size, "kind": tokenizer.kind,
            "merges": len(tokenizer.merges), "special_tokens": dict(tokenizer.special_tokens),
            "longest": [{"id": i, "bytes": width, "token": tokenizer.render_token(i)} for width, i in longest],
            "probes": probes}
