"""Shard benchmark: lmprep's encode stage against nanoGPT's way, batch sampling, and peak memory.

On each corpus of ``build_corpus.py`` (``full`` and ``unique-lines``, the same text without its repeated
lines), same tokenizer for both sides (lmprep's, trained on that corpus, exported to tiktoken ranks):

1. end-to-end encode, prepared text (in 24 parts) → files on disk: lmprep's ``encode_corpus`` over a process pool
   against nanoGPT's recipe (tiktoken ``encode_ordinary_batch`` → EOT appended → numpy uint16 → ``.bin``);
   the two token streams are checked to be identical;
2. random batches (64 × 256): ``ShardSet.sample_batch`` against vectorised fancy indexing of an
   ``np.memmap`` of the ``.bin`` file;
3. peak RSS of the encode (main process and largest worker) at 1× and N× the corpus, each in a fresh
   subprocess started while this process is still small (a Linux child's peak RSS starts from its
   parent's), so the figure is the encoder's own; memory-mapped input pages count in it;
4. the chunk cache's memory bound: a char tokenizer without pre-split (each document one chunk) on
   distinct 250-character documents cut from the corpus, which the encoder caches whole (~780 bytes
   each), encoded with several ``encode.chunk_cache_mb`` bounds: peak RSS per worker.

    python benchmarks/build_corpus.py
    python benchmarks/bench_shards.py [--workers 2] [--scale 4] [--repeats 2] [--corpus full,unique-lines]
                                      [--cache-case-mb 200] [--cache-bounds 256,64] [--smoke]

``--smoke``: a 0.2 MB corpus built in a temporary directory, 300 IDs, 4 parts, one repeat of each case.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import build_corpus
import numpy as np
import results
from build_corpus import CORPORA, DATA, corpus_path, read_corpus

from pipeline.data import documents
from pipeline.engine.executor import Tasks
from pipeline.shards.corpus import encode_corpus
from pipeline.shards.format import ShardSet
from pipeline.tokenizer import Tokenizer

ROOT = Path(__file__).resolve().parents[1]

WORK = DATA / "bench_shards"
EOT = "<|endoftext|>"
VOCAB_SIZE = 300 if results.SMOKE else 32768
TRAIN_SAMPLE_BYTES = 20_000_000
CHAR_DOCUMENT = 250
PARTS = 4 if results.SMOKE else 24
CHAR_VOCAB_SIZE = 1000 if results.SMOKE else 4096


def write_parts(path: Path, texts: list[str]) -> None:
    """``texts`` as a prepared directory of ``PARTS`` train parts, as the prepare stage writes it."""
    size = -(-len(texts) // PARTS)
    documents.write_prepared(path, {"train": [texts[i : i + size] for i in range(0, len(texts), size)]})


def prepared_file(corpus: str, scale: int) -> Path:
    """The corpus as a prepared directory, repeated ``scale`` times (for the memory figure)."""
    path = WORK / corpus / f"prepared-x{scale}"
    if not (path / documents.PARTS_FILE).exists():
        write_parts(path, list(read_corpus(corpus_path(corpus))) * scale)
    return path


def prepared_texts(source: Path) -> list[str]:
    parts = documents.read_parts(source, "train")
    return [text for part in parts for text in documents.iter_documents(source / part.file)]


def prepared_megabytes(source: Path) -> float:
    return sum(part.bytes for part in documents.read_parts(source, "train")) / 1e6


def tokenizer_file(corpus: str) -> Path:
    """A GPT-4-pattern byte-level BPE of 32,768 IDs trained on the first 20 MB (cached between runs)."""
    path = WORK / corpus / "tokenizer.json"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        sample, size = [], 0
        for text in read_corpus(corpus_path(corpus)):
            sample.append(text)
            size += len(text)
            if size > TRAIN_SAMPLE_BYTES:
                break
        Tokenizer.train(sample, vocab_size=VOCAB_SIZE, special_tokens=[EOT], workers=2).save(path)
    return path


def char_documents_file(megabytes: int) -> Path:
    """Distinct 250-character documents cut from the unique-lines corpus at shifting offsets, as a prepared file."""
    path = WORK / "char-250" / f"prepared-{megabytes}MB"
    if not (path / documents.PARTS_FILE).exists():
        text = "".join(read_corpus(corpus_path("unique-lines")))
        count = megabytes * 10**6 // CHAR_DOCUMENT
        starts = (start for shift in range(0, CHAR_DOCUMENT, 37)
                  for start in range(shift, len(text) - CHAR_DOCUMENT, CHAR_DOCUMENT))
        write_parts(path, [text[start:start + CHAR_DOCUMENT] for start, _ in zip(starts, range(count))])
    return path


def char_tokenizer_file(source: Path) -> Path:
    path = WORK / "char-250" / "tokenizer.json"
    if not path.exists():
        sample = prepared_texts(source)[:8000]
        Tokenizer.train(sample, vocab_size=CHAR_VOCAB_SIZE, kind="char", special_tokens=[EOT], workers=2).save(path)
    return path


def encode_lmprep(source: Path, tokenizer_path: Path, out: Path, workers: int, **options) -> float:
    tokenizer = Tokenizer.load(tokenizer_path)
    start = time.perf_counter()
    with ProcessPoolExecutor(workers) as executor:
        encode_corpus(source, out, tokenizer_path=tokenizer_path, tasks=Tasks(executor), splits=("train",),
                      shard_tokens=1_000_000, eos_id=tokenizer.special_tokens[EOT], **options)
    return time.perf_counter() - start


def tiktoken_encoding(tokenizer: Tokenizer):
    import tiktoken

    from pipeline.tokenizer.tiktoken_export import mergeable_ranks, tiktoken_pattern

    return tiktoken.Encoding("lmprep", pat_str=tiktoken_pattern(tokenizer), mergeable_ranks=mergeable_ranks(tokenizer),
                             special_tokens=dict(tokenizer.special_tokens))


def encode_nanogpt(source: Path, tokenizer_path: Path, out: Path, threads: int) -> float:
    """nanoGPT's prepare.py: encode_ordinary per document, append EOT, uint16 array, one flat .bin."""
    encoding = tiktoken_encoding(Tokenizer.load(tokenizer_path))
    start = time.perf_counter()
    with open(out, "wb") as handle:
        for texts in (batch for part in documents.read_parts(source, "train")
                      for batch in documents.iter_document_batches(source / part.file)):
            batch = encoding.encode_ordinary_batch(texts, num_threads=threads)
            for ids in batch:
                ids.append(encoding.eot_token)
            handle.write(np.concatenate([np.array(ids, dtype=np.uint16) for ids in batch]).tobytes())
    return time.perf_counter() - start


def batches_per_second(sample, seconds: float = 2.0) -> float:
    rng = np.random.default_rng(0)
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        sample(rng)
        count += 1
    return count / (time.perf_counter() - start)


def sampling(shard_dir: Path, bin_path: Path, batch: int = 64, context: int = 256) -> dict[str, float]:
    shard_set = ShardSet.open(shard_dir, "train")
    data = np.memmap(bin_path, dtype=np.uint16, mode="r")
    window = np.arange(context + 1)

    def memmap_batch(rng):
        starts = rng.integers(0, len(data) - context - 1, size=batch)
        return data[starts[:, None] + window].astype(np.int64)

    return {
        "shards": batches_per_second(lambda rng: shard_set.sample_batch(rng, batch, context)),
        "memmap": batches_per_second(memmap_batch),
    }


def peak_rss(corpus: str, scale: int, workers: int) -> dict[str, float]:
    """Run one encode in a fresh interpreter and read its peak RSS (MB) and its workers'."""
    command = [sys.executable, __file__, "--child-rss", str(scale), "--corpus", corpus, "--workers", str(workers)]
    return json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)


def child_rss(corpus: str, scale: int, workers: int) -> None:
    source = prepared_file(corpus, scale)
    wall = encode_lmprep(source, tokenizer_file(corpus), WORK / corpus / f"shards-x{scale}", workers)
    main = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    worker = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    megabytes = prepared_megabytes(source)
    print(json.dumps({"corpus_mb": megabytes, "wall_s": wall, "main_mb": main, "worker_mb": worker}))


def child_cache(megabytes: int, bound_mb: int, workers: int) -> None:
    source = char_documents_file(megabytes)
    wall = encode_lmprep(source, char_tokenizer_file(source), WORK / "char-250" / "shards", workers,
                         cache_bytes=bound_mb * 10**6)
    main = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    worker = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(json.dumps({"wall_s": wall, "main_mb": main, "worker_mb": worker}))


def cache_case(args: argparse.Namespace) -> None:
    """Peak RSS per worker on distinct 250-character documents (each one chunk) for each cache bound."""
    command = [sys.executable, __file__, "--child-cache-prepare", "--cache-case-mb", str(args.cache_case_mb)]
    subprocess.run(command, check=True, capture_output=True)  # builds the documents and the tokenizer
    count = args.cache_case_mb * 10**6 // CHAR_DOCUMENT
    print(f"char kind (vocab {CHAR_VOCAB_SIZE}), no pre-split, {count:,} distinct {CHAR_DOCUMENT}-character "
          f"documents ({args.cache_case_mb} MB), {args.workers} workers:")
    for bound in args.cache_bounds.split(","):
        command = [sys.executable, __file__, "--child-cache", bound, "--cache-case-mb", str(args.cache_case_mb),
                   "--workers", str(args.workers)]
        figures = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
        print(f"  chunk_cache_mb {bound}: peak RSS main {figures['main_mb']:.0f} MB, largest worker "
              f"{figures['worker_mb']:.0f} MB (encode {figures['wall_s']:.1f} s)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--scale", type=int, default=4, help="second corpus size for the memory figure, ×")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--corpus", default=",".join(CORPORA), help="comma-separated corpora (default: all)")
    parser.add_argument("--cache-case-mb", type=int, default=200, help="MB of 250-character documents (0: skip)")
    parser.add_argument("--cache-bounds", default="256,64", help="encode.chunk_cache_mb values to measure")
    parser.add_argument("--child-rss", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--child-prepare", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--child-cache", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--child-cache-prepare", action="store_true", help=argparse.SUPPRESS)
    results.add_arguments(parser)
    args = parser.parse_args()
    if args.smoke:
        args.scale, args.repeats, args.corpus, args.cache_case_mb, args.cache_bounds = 2, 1, "full", 1, "8"
        build_corpus.build(build_corpus.SMOKE_MEGABYTES)
    if args.child_cache_prepare:
        return print(char_tokenizer_file(char_documents_file(args.cache_case_mb)))
    if args.child_cache is not None:
        return child_cache(args.cache_case_mb, args.child_cache, args.workers)
    if args.child_rss:
        return child_rss(args.corpus, args.child_rss, args.workers)
    if args.child_prepare:
        return print(prepared_file(args.corpus, args.child_prepare), tokenizer_file(args.corpus))
    corpora = args.corpus.split(",")
    # memory first, while this process is small: Linux children start from the parent's peak RSS
    if args.cache_case_mb:
        cache_case(args)
    rows = {corpus: memory(corpus, args) for corpus in corpora}
    for corpus in corpora:
        rows[corpus] |= speed(corpus, args)
    print(f"\n{args.workers} workers/threads")
    print("| | " + " | ".join(corpora) + " |")
    print("| --- |" + " --- |" * len(corpora))
    for label in rows[corpora[0]]:
        print(f"| {label} | " + " | ".join(rows[corpus][label] for corpus in corpora) + " |")


def memory(corpus: str, args: argparse.Namespace) -> dict[str, str]:
    row = {}
    for scale in (1, args.scale):
        command = [sys.executable, __file__, "--child-prepare", str(scale), "--corpus", corpus]
        subprocess.run(command, check=True, capture_output=True)
        figures = peak_rss(corpus, scale, args.workers)
        label = f"peak RSS at {scale}× (main / largest worker)"
        row[label] = f"{figures['corpus_mb']:.0f} MB prepared: {figures['main_mb']:.0f} / {figures['worker_mb']:.0f} MB"
        print(f"{corpus}: {label}: {row[label]}", flush=True)
    return row


def speed(corpus: str, args: argparse.Namespace) -> dict[str, str]:
    """Encode to files, lmprep vs nanoGPT's recipe, in alternation; then batch sampling from both outputs."""
    source, tokenizer_path, work = prepared_file(corpus, 1), tokenizer_file(corpus), WORK / corpus
    megabytes = prepared_megabytes(source)
    ours, theirs = [], []
    for _ in range(args.repeats):
        ours.append(encode_lmprep(source, tokenizer_path, work / "shards", args.workers))
        theirs.append(encode_nanogpt(source, tokenizer_path, work / "train.bin", args.workers))
        print(f"{corpus}: lmprep {ours[-1]:.1f} s, nanoGPT/tiktoken {theirs[-1]:.1f} s", flush=True)
    stream = np.concatenate([shard.tokens for shard in ShardSet.open(work / "shards", "train").shards])
    same = np.array_equal(stream, np.fromfile(work / "train.bin", np.uint16))
    rates = [sampling(work / "shards", work / "train.bin") for _ in range(args.repeats)]
    return {
        "prepared text": f"{megabytes:.1f} MB, {len(stream):,} tokens",
        "lmprep → Arrow shards": ", ".join(f"{t:.1f} s ({megabytes / t:.1f} MB/s)" for t in ours),
        "nanoGPT's way (tiktoken → uint16 .bin)": ", ".join(f"{t:.1f} s ({megabytes / t:.1f} MB/s)" for t in theirs),
        "lmprep speed vs nanoGPT's (each run)": ", ".join(f"{b / a:.2f}×" for a, b in zip(ours, theirs)),
        "token streams identical": "yes" if same else "NO",
        "batches 64 × 256 per s: ShardSet.sample_batch": ", ".join(f"{r['shards']:,.0f}" for r in rates),
        "batches 64 × 256 per s: np.memmap fancy indexing": ", ".join(f"{r['memmap']:,.0f}" for r in rates),
    }


if __name__ == "__main__":
    results.run("bench_shards", main)
