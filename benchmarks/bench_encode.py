"""Encoding throughput (MB of UTF-8 text → IDs per second): lmprep vs tiktoken vs HF tokenizers.

All three use the same vocabulary (lmprep's tokenizer trained on the corpus, GPT-4 pattern;
tiktoken is built from its exported ranks, HF loads its tokenizer.json) on the same documents,
with 1 and 2 workers (processes for lmprep, threads for tiktoken and HF; ``lmprep-lists`` is
``Tokenizer.encode_batch`` in one process, lists of IDs as tiktoken returns them), on both corpora of
``build_corpus.py`` (each with a tokenizer trained on it): ``full`` and ``unique-lines``, the same
text without its repeated lines, where lmprep's chunk cache helps least. Each measurement runs in
a fresh process, so lmprep starts with a cold chunk cache; the IDs of every engine are checked to
be identical. Runs alternate between engines ``--repeats`` times; the table shows each one's best
wall-clock throughput and its CPU time (process plus workers), which a busy machine disturbs less.

    python benchmarks/build_corpus.py            # once: benchmarks/.data/corpus*.jsonl
    python benchmarks/bench_encode.py [--vocab-size 32768] [--limit-mb 100] [--corpus full,unique-lines] [--repeats 2]

``--smoke``: a 0.2 MB corpus built in a temporary directory, 300 IDs, each engine once with one worker.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import resource
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import build_corpus
import numpy as np
import results
from build_corpus import CORPORA, DATA, corpus_path

from pipeline.tokenizer import Tokenizer

ROOT = Path(__file__).resolve().parents[1]

BATCH = 256
RUNS = [("lmprep", 1), ("lmprep", 2), ("lmprep-lists", 1), ("tiktoken", 1), ("tiktoken", 2), ("hf", 1), ("hf", 2)]
_TEXTS: list[str] = []


def load_texts(corpus: str, limit_mb: float) -> list[str]:
    texts, size = [], 0
    with open(corpus_path(corpus), encoding="utf-8") as handle:
        for line in handle:
            texts.append(json.loads(line)["text"])
            size += len(texts[-1].encode("utf-8"))
            if size >= limit_mb * 1e6:
                break
    return texts


def tokenizer_path(corpus: str, vocab_size: int, texts: list[str]) -> Path:
    megabytes = round(sum(map(len, texts)) / 1e6)
    path = DATA / f"tokenizer-{corpus}-{vocab_size}-{megabytes}M.json"
    if not path.exists():
        start = time.perf_counter()
        Tokenizer.train(texts, vocab_size=vocab_size, workers=2).save(path)
        print(f"trained {path.name} in {time.perf_counter() - start:.1f} s", file=sys.stderr)
    return path


# ---- one measurement (runs in its own process) ----------------------------------------------------


def clocks() -> tuple[float, float]:
    """Wall time and the CPU time of this process and its finished workers."""
    usages = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.perf_counter(), sum(usage.ru_utime + usage.ru_stime for usage in usages)


def since(start: tuple[float, float]) -> tuple[float, float]:
    now = clocks()
    return now[0] - start[0], now[1] - start[1]


def encode_lmprep(path: Path, texts: list[str], workers: int) -> tuple[np.ndarray, tuple[float, float]]:
    """Processes are forked after loading, so they share the texts and the (cold) tokenizer."""
    global _TEXTS, _WORKER_TOKENIZER
    _TEXTS = texts
    _WORKER_TOKENIZER = tokenizer = Tokenizer.load(path)
    batches = [(i, min(i + BATCH, len(texts))) for i in range(0, len(texts), BATCH)]
    start = clocks()
    if workers == 1:
        parts = [_encode_range(tokenizer, span) for span in batches]
    else:
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            parts = pool.map(_encode_range_in_worker, batches, chunksize=4)
    ids = np.frombuffer(b"".join(parts), dtype=np.uint32)
    return ids, since(start)


_WORKER_TOKENIZER: Tokenizer | None = None


def _encode_range_in_worker(span: tuple[int, int]) -> bytes:
    return _encode_range(_WORKER_TOKENIZER, span)


def _encode_range(tokenizer: Tokenizer, span: tuple[int, int]) -> bytes:
    ids, _ = tokenizer.encode_batch_flat(_TEXTS[span[0]:span[1]])
    return ids.tobytes()


def encode_lmprep_lists(path: Path, texts: list[str], workers: int) -> tuple[np.ndarray, tuple[float, float]]:
    """``Tokenizer.encode_batch``: one list of IDs per text, as tiktoken's ``encode_ordinary_batch`` gives."""
    tokenizer = Tokenizer.load(path)
    start = clocks()
    ids = [part for i in range(0, len(texts), BATCH) for part in tokenizer.encode_batch(texts[i:i + BATCH])]
    elapsed = since(start)
    return _flatten(ids), elapsed


def encode_tiktoken(path: Path, texts: list[str], workers: int) -> tuple[np.ndarray, tuple[float, float]]:
    import tiktoken

    from pipeline.tokenizer.tiktoken_export import mergeable_ranks, tiktoken_pattern

    tokenizer = Tokenizer.load(path)
    encoding = tiktoken.Encoding("bench", pat_str=tiktoken_pattern(tokenizer),
                                 mergeable_ranks=mergeable_ranks(tokenizer), special_tokens={})
    start = clocks()
    ids = encoding.encode_ordinary_batch(texts, num_threads=workers)
    elapsed = since(start)
    return _flatten(ids), elapsed


def encode_hf(path: Path, texts: list[str], workers: int) -> tuple[np.ndarray, tuple[float, float]]:
    import tokenizers

    hf = tokenizers.Tokenizer.from_file(str(path))
    start = clocks()
    encodings = hf.encode_batch_fast(texts, add_special_tokens=False)
    elapsed = since(start)
    return _flatten([e.ids for e in encodings]), elapsed


def _flatten(lists: list[list[int]]) -> np.ndarray:
    return np.fromiter((i for ids in lists for i in ids), dtype=np.uint32)


def measure(corpus: str, engine: str, workers: int, vocab_size: int, limit_mb: float) -> dict:
    texts = load_texts(corpus, limit_mb)
    path = tokenizer_path(corpus, vocab_size, texts)
    megabytes = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    encode = {"lmprep": encode_lmprep, "lmprep-lists": encode_lmprep_lists, "tiktoken": encode_tiktoken,
              "hf": encode_hf}[engine]
    ids, (elapsed, cpu) = encode(path, texts, workers)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss + resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return {"corpus": corpus, "engine": engine, "workers": workers, "megabytes": megabytes, "seconds": elapsed,
            "cpu_seconds": cpu, "mb_per_s": megabytes / elapsed, "tokens": int(ids.size),
            "ids_sha256": hashlib.sha256(ids.tobytes()).hexdigest(), "peak_rss_mb": rss / 1024}


# ---- driver ---------------------------------------------------------------------------------------


def run_isolated(corpus: str, engine: str, workers: int, args: argparse.Namespace) -> dict:
    env = dict(os.environ, RAYON_NUM_THREADS=str(workers), TOKENIZERS_PARALLELISM="true")
    command = [sys.executable, __file__, "--one", engine, "--corpus", corpus, "--workers", str(workers),
               "--vocab-size", str(args.vocab_size), "--limit-mb", str(args.limit_mb)]
    output = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(output.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab-size", type=int, default=32768)
    parser.add_argument("--limit-mb", type=float, default=1e9, help="Use only the first N MB of each corpus.")
    parser.add_argument("--corpus", default=",".join(CORPORA), help="comma-separated corpora (default: all)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--one", choices=["lmprep", "lmprep-lists", "tiktoken", "hf"], help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, default=1, help=argparse.SUPPRESS)
    results.add_arguments(parser)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.corpus, args.one, args.workers, args.vocab_size, args.limit_mb)))
        return
    runs = RUNS
    if args.smoke:
        args.vocab_size, args.corpus, args.repeats = 300, "full", 1
        runs = [(engine, workers) for engine, workers in RUNS if workers == 1]
        build_corpus.build(build_corpus.SMOKE_MEGABYTES)
    corpora = args.corpus.split(",")
    for corpus in corpora:
        tokenizer_path(corpus, args.vocab_size, load_texts(corpus, args.limit_mb))
    measured = [run_isolated(corpus, engine, workers, args)
                for _ in range(args.repeats) for engine, workers in runs for corpus in corpora]
    report(measured, corpora, runs)


def report(measured: list[dict], corpora: list[str], runs_made: list[tuple[str, int]] = RUNS) -> None:
    """One row per engine and worker count, one group of columns per corpus: best throughput, CPU of each run."""
    runs = defaultdict(list)
    for r in measured:
        runs[(r["corpus"], r["engine"], r["workers"])].append(r)
    for corpus in corpora:
        first = runs[(corpus, *RUNS[0])][0]
        print(f"{corpus}: {first['megabytes']:.1f} MB, {first['tokens']:,} tokens")
    columns = "MB/s | vs tiktoken | CPU s | peak RSS MB | same IDs"
    print("| engine | workers | " + " | ".join(f"{c}: {columns}" for c in corpora) + " |")
    print("| --- | --- |" + " --- | --- | --- | --- | --- |" * len(corpora))
    for engine, workers in runs_made:
        cells = []
        for corpus in corpora:
            mine, reference = runs[(corpus, engine, workers)], runs[(corpus, "tiktoken", workers)]
            best = max(r["mb_per_s"] for r in mine)
            same = all(r["ids_sha256"] == runs[(corpus, *RUNS[0])][0]["ids_sha256"] for r in mine)
            cpu = ", ".join(f"{r['cpu_seconds']:.1f}" for r in mine)
            cells.append(f"{best:.2f} | {best / max(r['mb_per_s'] for r in reference):.2f}x | {cpu} | "
                         f"{max(r['peak_rss_mb'] for r in mine):.0f} | {'yes' if same else 'NO'}")
        print(f"| {engine} | {workers} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    results.run("bench_encode", main, children=("--one",))
