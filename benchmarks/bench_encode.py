"""Encoding throughput (MB of UTF-8 text → IDs per second): lmprep vs tiktoken vs HF tokenizers.

All three use the same vocabulary (lmprep's tokenizer trained on the corpus, GPT-4 pattern;
tiktoken is built from its exported ranks, HF loads its tokenizer.json) on the same documents,
with 1 and 2 workers (processes for lmprep, threads for tiktoken and HF). Each measurement
runs in a fresh process, so lmprep starts with a cold chunk cache; the IDs of every engine are
checked to be identical.

    python benchmarks/build_corpus.py            # once: benchmarks/.data/corpus.jsonl
    python benchmarks/bench_encode.py [--vocab-size 32768] [--limit-mb 100]
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
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline.tokenizer import Tokenizer  # noqa: E402

DATA = ROOT / "benchmarks" / ".data"
CORPUS = DATA / "corpus.jsonl"
BATCH = 256
RUNS = [("lmprep", 1), ("lmprep", 2), ("tiktoken", 1), ("tiktoken", 2), ("hf", 1), ("hf", 2)]
_TEXTS: list[str] = []


def load_texts(limit_mb: float) -> list[str]:
    texts, size = [], 0
    with open(CORPUS, encoding="utf-8") as handle:
        for line in handle:
            texts.append(json.loads(line)["text"])
            size += len(texts[-1].encode("utf-8"))
            if size >= limit_mb * 1e6:
                break
    return texts


def tokenizer_path(vocab_size: int, texts: list[str]) -> Path:
    megabytes = round(sum(map(len, texts)) / 1e6)
    path = DATA / f"tokenizer-{vocab_size}-{megabytes}M.json"
    if not path.exists():
        start = time.perf_counter()
        Tokenizer.train(texts, vocab_size=vocab_size, workers=2).save(path)
        print(f"trained {path.name} in {time.perf_counter() - start:.1f} s", file=sys.stderr)
    return path


# ---- one measurement (runs in its own process) ----------------------------------------------------


def encode_lmprep(path: Path, texts: list[str], workers: int) -> tuple[np.ndarray, float]:
    """Processes are forked after loading, so they share the texts and the (cold) tokenizer."""
    global _TEXTS, _WORKER_TOKENIZER
    _TEXTS = texts
    _WORKER_TOKENIZER = tokenizer = Tokenizer.load(path)
    batches = [(i, min(i + BATCH, len(texts))) for i in range(0, len(texts), BATCH)]
    start = time.perf_counter()
    if workers == 1:
        parts = [_encode_range(tokenizer, span) for span in batches]
    else:
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            parts = pool.map(_encode_range_in_worker, batches, chunksize=4)
    ids = np.frombuffer(b"".join(parts), dtype=np.uint32)
    return ids, time.perf_counter() - start


_WORKER_TOKENIZER: Tokenizer | None = None


def _encode_range_in_worker(span: tuple[int, int]) -> bytes:
    return _encode_range(_WORKER_TOKENIZER, span)


def _encode_range(tokenizer: Tokenizer, span: tuple[int, int]) -> bytes:
    ids, _ = tokenizer.encode_batch_flat(_TEXTS[span[0]:span[1]])
    return ids.tobytes()


def encode_tiktoken(path: Path, texts: list[str], workers: int) -> tuple[np.ndarray, float]:
    import tiktoken

    from pipeline.tokenizer.tiktoken_export import mergeable_ranks, tiktoken_pattern

    tokenizer = Tokenizer.load(path)
    encoding = tiktoken.Encoding("bench", pat_str=tiktoken_pattern(tokenizer),
                                 mergeable_ranks=mergeable_ranks(tokenizer), special_tokens={})
    start = time.perf_counter()
    ids = encoding.encode_ordinary_batch(texts, num_threads=workers)
    return _flatten(ids), time.perf_counter() - start


def encode_hf(path: Path, texts: list[str], workers: int) -> tuple[np.ndarray, float]:
    import tokenizers

    hf = tokenizers.Tokenizer.from_file(str(path))
    start = time.perf_counter()
    encodings = hf.encode_batch_fast(texts, add_special_tokens=False)
    elapsed = time.perf_counter() - start
    return _flatten([e.ids for e in encodings]), elapsed


def _flatten(lists: list[list[int]]) -> np.ndarray:
    return np.fromiter((i for ids in lists for i in ids), dtype=np.uint32)


def measure(engine: str, workers: int, vocab_size: int, limit_mb: float) -> dict:
    texts = load_texts(limit_mb)
    path = tokenizer_path(vocab_size, texts)
    megabytes = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    encode = {"lmprep": encode_lmprep, "tiktoken": encode_tiktoken, "hf": encode_hf}[engine]
    ids, elapsed = encode(path, texts, workers)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss + resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return {"engine": engine, "workers": workers, "megabytes": megabytes, "seconds": elapsed,
            "mb_per_s": megabytes / elapsed, "tokens": int(ids.size),
            "ids_sha256": hashlib.sha256(ids.tobytes()).hexdigest(), "peak_rss_mb": rss / 1024}


# ---- driver ---------------------------------------------------------------------------------------


def run_isolated(engine: str, workers: int, args: argparse.Namespace) -> dict:
    env = dict(os.environ, RAYON_NUM_THREADS=str(workers), TOKENIZERS_PARALLELISM="true")
    command = [sys.executable, __file__, "--one", engine, "--workers", str(workers),
               "--vocab-size", str(args.vocab_size), "--limit-mb", str(args.limit_mb)]
    output = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(output.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab-size", type=int, default=32768)
    parser.add_argument("--limit-mb", type=float, default=1e9, help="Use only the first N MB of the corpus.")
    parser.add_argument("--one", choices=["lmprep", "tiktoken", "hf"], help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args.workers, args.vocab_size, args.limit_mb)))
        return
    if not CORPUS.exists():
        sys.exit(f"no corpus at {CORPUS}; run benchmarks/build_corpus.py first")
    tokenizer_path(args.vocab_size, load_texts(args.limit_mb))
    results = [run_isolated(engine, workers, args) for engine, workers in RUNS]
    report(results)


def report(results: list[dict]) -> None:
    reference = {r["workers"]: r["mb_per_s"] for r in results if r["engine"] == "tiktoken"}
    print(f"corpus: {results[0]['megabytes']:.1f} MB, {results[0]['tokens']:,} tokens")
    print("| engine | workers | MB/s | vs tiktoken | peak RSS MB | same IDs |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in results:
        same = r["ids_sha256"] == results[0]["ids_sha256"]
        print(f"| {r['engine']} | {r['workers']} | {r['mb_per_s']:.2f} | {r['mb_per_s'] / reference[r['workers']]:.2f}x "
              f"| {r['peak_rss_mb']:.0f} | {'yes' if same else 'NO'} |")


if __name__ == "__main__":
    main()
