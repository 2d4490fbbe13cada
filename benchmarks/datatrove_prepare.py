"""datatrove's side of ``bench_workers.py``: read → clean → exact de-duplication → write with its
``LocalPipelineExecutor``, in datatrove's own environment (never a dependency of lmprep).

Three executors, as datatrove's de-duplication blocks are meant to run: (1) ``JsonlReader`` → clean
→ ``ExactDedupSignature``; (2) ``ExactFindDedups``, one task per hash bucket; (3) ``JsonlReader`` →
clean → ``ExactDedupFilter`` → ``JsonlWriter`` (uncompressed). Cleaning is lmprep's own
``clean_text`` and ``drop_reason`` with the default settings, so both sides do the same work per
document. Prints one JSON line: the wall seconds of the three and the documents written.

    benchmarks/.venv-datatrove/bin/python benchmarks/datatrove_prepare.py RAW_DIR OUT_DIR \\
        --tasks 24 --workers 2 --buckets 16
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.base import PipelineStep
from datatrove.pipeline.dedup.exact_dedup import (
    ExactDedupConfig,
    ExactDedupFilter,
    ExactDedupSignature,
    ExactFindDedups,
)
from datatrove.pipeline.readers import JsonlReader
from datatrove.pipeline.writers import JsonlWriter

from pipeline.config import PrepareConfig
from pipeline.data.cleaning import clean_text, drop_reason

ROOT = Path(__file__).resolve().parents[1]


class Clean(PipelineStep):
    """lmprep's cleaning and length filters, as a datatrove step."""

    name = "clean"

    def run(self, data, rank: int = 0, world_size: int = 1):
        settings = PrepareConfig()
        for document in data:
            document.text = clean_text(document.text, normalize=settings.normalize)
            if drop_reason(document.text, min_chars=settings.min_chars, max_chars=settings.max_chars) is None:
                yield document


def text_of(document) -> str:
    return document.text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("raw", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--tasks", type=int, required=True)
    parser.add_argument("--workers", type=int, required=True)
    parser.add_argument("--buckets", type=int, default=16)
    args = parser.parse_args()
    shutil.rmtree(args.out, ignore_errors=True)
    out = args.out
    config = ExactDedupConfig(content_getter=text_of)

    def reader():
        return JsonlReader(str(args.raw), glob_pattern="*.jsonl", text_key="text")

    signatures = LocalPipelineExecutor(
        [reader(), Clean(), ExactDedupSignature(str(out / "sigs"), config, finder_workers=args.buckets)],
        tasks=args.tasks, workers=args.workers, logging_dir=str(out / "logs-1"))
    find = LocalPipelineExecutor(
        [ExactFindDedups(str(out / "sigs"), str(out / "dups"), config)],
        tasks=args.buckets, workers=args.workers, logging_dir=str(out / "logs-2"), depends=signatures)
    write = LocalPipelineExecutor(
        [reader(), Clean(), ExactDedupFilter(str(out / "dups"), config),
         JsonlWriter(str(out / "output"), output_filename="${rank}.jsonl", compression=None)],
        tasks=args.tasks, workers=args.workers, logging_dir=str(out / "logs-3"), depends=find)
    start = time.perf_counter()
    write.run()
    seconds = time.perf_counter() - start
    documents = sum(1 for path in (out / "output").glob("*.jsonl") for _ in path.open("rb"))
    print(json.dumps({"seconds": seconds, "documents": documents}))


if __name__ == "__main__":
    main()
