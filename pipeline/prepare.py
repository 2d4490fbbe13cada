"""The prepare step: raw files → cleaned, de-duplicated train/val document files plus stats.

Reading, cleaning, filtering and writing stream one document at a time; the
only state that grows is the de-duplication digest set. The output directory
is built in a staging directory and swapped in whole, so an error (bad UTF-8,
a bad JSON line, no document left for the train split) or an interrupt leaves
the previous output untouched.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from pipeline import atomic
from pipeline.cleaning import Deduplicator, PrepareStats, clean_text, drop_reason, split_of
from pipeline.config import PrepareConfig
from pipeline.documents import SPLITS, DocumentWriter, prepared_path
from pipeline.errors import DataError
from pipeline.sources import SourceFile, TextDecoder, read_documents

STATS_FILE = "stats.json"


def prepare_corpus(files: Sequence[SourceFile], settings: PrepareConfig, out_dir: str | os.PathLike[str], *,
                   progress: bool = False) -> PrepareStats:
    """Write ``out_dir/train.arrow``, ``val.arrow`` and ``stats.json`` from ``files``; return the stats."""
    stats = PrepareStats(files=len(files))
    decoder = TextDecoder(settings.on_decode_error)
    with atomic.atomic_dir(out_dir) as staging:
        writers = {split: DocumentWriter(prepared_path(staging, split)) for split in SPLITS}
        try:
            for text in _kept_documents(_raw_documents(files, decoder, progress), settings, stats):
                split = split_of(text, seed=settings.seed, val_fraction=settings.val_fraction)
                writers[split].write(text)
                stats.count_kept(split, text)
        finally:
            for writer in writers.values():
                writer.close()
        stats.documents_read += decoder.skipped
        stats.count_drop("decode_error", decoder.skipped)
        _refuse_empty_train_split(stats, files, settings.val_fraction)
        atomic.write_json(Path(staging) / STATS_FILE, stats.to_dict())
    return stats


def _refuse_empty_train_split(stats: PrepareStats, files: Sequence[SourceFile], val_fraction: float) -> None:
    """An empty train split is an error here, where its cause is known, not later in the tokenizer or train."""
    if stats.documents["train"]:
        return
    if stats.documents_kept:
        raise DataError(f"0 of the {stats.documents_kept:,} documents kept fell in the train split "
                        f"(prepare.val_fraction={val_fraction}); add data or lower prepare.val_fraction; "
                        "the previous prepared data is left as it was")
    raise DataError(f"0 documents kept from {_name_files(files)} (read {stats.documents_read:,}, dropped: "
                    f"{stats.describe_drops()}); check data.sources and the prepare filters; "
                    "the previous prepared data is left as it was")


def _name_files(files: Sequence[SourceFile], shown: int = 3) -> str:
    names = ", ".join(str(file.path) for file in files[:shown])
    return names + (f" and {len(files) - shown} more files" if len(files) > shown else "")


def _kept_documents(texts: Iterator[str], settings: PrepareConfig, stats: PrepareStats) -> Iterator[str]:
    """Clean, filter and de-duplicate, counting every document read and why any was dropped."""
    seen = Deduplicator()
    for raw in texts:
        stats.documents_read += 1
        stats.characters_read += len(raw)
        text = clean_text(raw, normalize=settings.normalize)
        reason = drop_reason(text, min_chars=settings.min_chars, max_chars=settings.max_chars)
        if reason is None and not seen.is_new(text):
            reason = "duplicate"
        if reason is None:
            yield text
        else:
            stats.count_drop(reason)


def _raw_documents(files: Sequence[SourceFile], decoder: TextDecoder, progress: bool) -> Iterator[str]:
    from tqdm import tqdm

    total = sum(file.path.stat().st_size for file in files)
    with tqdm(total=total, unit="B", unit_scale=True, desc="prepare", disable=not progress,
              leave=False) as bar:
        for file in files:
            yield from read_documents(file, decoder, progress=bar.update)
