"""datatrove's side of ``bench_curation.py``, in an environment that has datatrove (never a dependency of
lmprep's library): its MinHash de-duplication in its four stages, or its Gopher repetition and quality
filters, with ``LocalPipelineExecutor`` on the JSON Lines files of RAW_DIR (one task per file).

``minhash``: (1) ``JsonlReader`` → ``MinhashDedupSignature``; (2) ``MinhashDedupBuckets``, one task per
band; (3) ``MinhashDedupCluster``; (4) ``JsonlReader`` → ``MinhashDedupFilter`` → ``JsonlWriter``, all with
datatrove's default ``MinhashConfig`` (5-word shingles, 14 bands × 8 hashes) and word tokenizer (spaCy's
blank English). ``gopher``: ``JsonlReader`` → ``GopherRepetitionFilter`` → ``GopherQualityFilter`` →
``JsonlWriter``, the defaults. Prints one JSON line: the wall seconds and the IDs of the documents kept.

    python benchmarks/datatrove_curation.py minhash RAW_DIR OUT_DIR --workers 2
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import datatrove.utils.hashes.xxhash as datatrove_xxhash
import xxhash
from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.dedup.minhash import (
    MinhashConfig,
    MinhashDedupBuckets,
    MinhashDedupCluster,
    MinhashDedupFilter,
    MinhashDedupSignature,
)
from datatrove.pipeline.filters import GopherQualityFilter, GopherRepetitionFilter
from datatrove.pipeline.readers import JsonlReader
from datatrove.pipeline.writers import JsonlWriter


def accept_text_in_xxhash() -> None:
    """datatrove 0.10.1 hashes shingles as ``str``, which xxhash 4 refuses (3.x encoded them as UTF-8): encode
    them first, as xxhash 3 did, where lmprep's environment has xxhash 4."""
    for name, digest in (("xxhash32", xxhash.xxh32_intdigest), ("xxhash64", xxhash.xxh64_intdigest)):
        setattr(datatrove_xxhash, name, lambda data, digest=digest: digest(
            data.encode("utf-8") if isinstance(data, str) else data))


def minhash(raw: Path, out: Path, tasks: int, workers: int) -> LocalPipelineExecutor:
    config = MinhashConfig()
    signatures = LocalPipelineExecutor(
        [reader(raw), MinhashDedupSignature(str(out / "signatures"), config=config)],
        tasks=tasks, workers=workers, logging_dir=str(out / "logs-1"))
    buckets = LocalPipelineExecutor(
        [MinhashDedupBuckets(str(out / "signatures"), str(out / "buckets"), config=config)],
        tasks=config.num_buckets, workers=workers, logging_dir=str(out / "logs-2"), depends=signatures)
    clusters = LocalPipelineExecutor(
        [MinhashDedupCluster(str(out / "buckets"), str(out / "remove"), config=config)],
        tasks=1, workers=1, logging_dir=str(out / "logs-3"), depends=buckets)
    return LocalPipelineExecutor(
        [reader(raw), MinhashDedupFilter(str(out / "remove")), writer(out)],
        tasks=tasks, workers=workers, logging_dir=str(out / "logs-4"), depends=clusters)


def gopher(raw: Path, out: Path, tasks: int, workers: int) -> LocalPipelineExecutor:
    return LocalPipelineExecutor([reader(raw), GopherRepetitionFilter(), GopherQualityFilter(), writer(out)],
                                 tasks=tasks, workers=workers, logging_dir=str(out / "logs"))


def reader(raw: Path) -> JsonlReader:
    return JsonlReader(str(raw), glob_pattern="*.jsonl", text_key="text", id_key="id")


def writer(out: Path) -> JsonlWriter:
    return JsonlWriter(str(out / "output"), output_filename="${rank}.jsonl", compression=None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pipeline", choices=["minhash", "gopher"])
    parser.add_argument("raw", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--workers", type=int, required=True)
    args = parser.parse_args()
    shutil.rmtree(args.out, ignore_errors=True)
    tasks = len(list(args.raw.glob("*.jsonl")))
    accept_text_in_xxhash()
    executor = {"minhash": minhash, "gopher": gopher}[args.pipeline](args.raw, args.out, tasks, args.workers)
    start = time.perf_counter()
    executor.run()
    seconds = time.perf_counter() - start
    kept = [json.loads(line)["id"] for path in sorted((args.out / "output").glob("*.jsonl")) for line in path.open()]
    print(json.dumps({"seconds": seconds, "kept": kept}))


if __name__ == "__main__":
    main()
