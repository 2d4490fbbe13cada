"""Shard benchmark: lmprep's encode stage against nanoGPT's way, batch sampling, and peak memory.

Same corpus (``build_corpus.py``), same tokenizer for both sides (lmprep's, exported to tiktoken ranks):

1. end-to-end encode, prepared text (in 24 parts) → files on disk: lmprep's ``encode_corpus`` over a process pool
   against nanoGPT's recipe (tiktoken ``encode_ordinary_batch`` → EOT appended → numpy uint16 → ``.bin``);
   the two token streams are checked to be identical;
2. random batches (64 × 256): ``ShardSet.sample_batch`` against vectorised fancy indexing of an
   ``np.memmap`` of the ``.bin`` file;
3. peak RSS of the encode (main process and largest worker) at 1× and N× the corpus, each in a fresh
   subprocess started while this process is still small (a Linux child's peak RSS starts from its
   parent's), so the figure is the encoder's own; memory-mapped input pages count in it.

    python benchmarks/build_corpus.py
    python benchmarks/bench_shards.py [--workers 2] [--scale 4] [--repeats 2]
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

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline import documents  # noqa: E402
from pipeline.encoding import encode_corpus  # noqa: E402
from pipeline.executor import Tasks  # noqa: E402
from pipeline.shards import ShardSet  # noqa: E402
from pipeline.tokenizer import Tokenizer  # noqa: E402

DATA = ROOT / "benchmarks" / ".data"
CORPUS = DATA / "corpus.jsonl"
WORK = DATA / "bench_shards"
EOT = "<|endoftext|>"
VOCAB_SIZE = 32768
TRAIN_SAMPLE_BYTES = 20_000_000
PARTS = 24


def load_texts(path: Path) -> list[str]:
    with open(path, encoding="utf-8") as lines:
        return [json.loads(line)["text"] for line in lines]


def prepared_file(scale: int) -> Path:
    """The corpus as a prepared directory of ``PARTS`` train parts, repeated ``scale`` times (memory figure)."""
    path = WORK / f"prepared-x{scale}"
    if not (path / documents.PARTS_FILE).exists():
        texts = load_texts(CORPUS) * scale
        size = -(-len(texts) // PARTS)
        documents.write_prepared(path, {"train": [texts[i : i + size] for i in range(0, len(texts), size)]})
    return path


def prepared_megabytes(source: Path) -> float:
    return sum(part.bytes for part in documents.read_parts(source, "train")) / 1e6


def tokenizer_file() -> Path:
    """A GPT-4-pattern byte-level BPE of 32,768 IDs trained on the first 20 MB (cached between runs)."""
    path = WORK / "tokenizer.json"
    if not path.exists():
        sample, size = [], 0
        for text in load_texts(CORPUS):
            sample.append(text)
            size += len(text)
            if size > TRAIN_SAMPLE_BYTES:
                break
        Tokenizer.train(sample, vocab_size=VOCAB_SIZE, special_tokens=[EOT], workers=2).save(path)
    return path


def encode_lmprep(source: Path, tokenizer_path: Path, out: Path, workers: int) -> float:
    tokenizer = Tokenizer.load(tokenizer_path)
    start = time.perf_counter()
    with ProcessPoolExecutor(workers) as executor:
        encode_corpus(source, out, tokenizer_path=tokenizer_path, tasks=Tasks(executor), splits=("train",),
                      shard_tokens=1_000_000, eos_id=tokenizer.special_tokens[EOT])
    return time.perf_counter() - start


def tiktoken_encoding(tokenizer: Tokenizer):
    import tiktoken

    from pipeline.tokenizer.tiktoken_export import mergeable_ranks, tiktoken_pattern

    return tiktoken.Encoding("lmprep", pat_str=tiktoken_pattern(tokenizer), mergeable_ranks=mergeable_ranks(tokenizer),
                             special_tokens=tokenizer.special_tokens)


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


def peak_rss(scale: int, workers: int) -> dict[str, float]:
    """Run one encode in a fresh interpreter and read its peak RSS (MB) and its workers'."""
    command = [sys.executable, __file__, "--child-rss", str(scale), "--workers", str(workers)]
    return json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)


def child_rss(scale: int, workers: int) -> None:
    source = prepared_file(scale)
    wall = encode_lmprep(source, tokenizer_file(), WORK / f"shards-x{scale}", workers)
    main = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    worker = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    megabytes = prepared_megabytes(source)
    print(json.dumps({"corpus_mb": megabytes, "wall_s": wall, "main_mb": main, "worker_mb": worker}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--scale", type=int, default=4, help="second corpus size for the memory figure, ×")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--child-rss", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--child-prepare", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_rss:
        return child_rss(args.child_rss, args.workers)
    if args.child_prepare:
        return print(prepared_file(args.child_prepare), tokenizer_file())
    memory(args)  # first, while this process is small: Linux children start from the parent's peak RSS
    source, tokenizer_path = prepared_file(1), tokenizer_file()
    megabytes = prepared_megabytes(source)
    print(f"corpus: {megabytes:.1f} MB of text, {args.workers} workers/threads")
    for repeat in range(args.repeats):
        ours = encode_lmprep(source, tokenizer_path, WORK / "shards", args.workers)
        theirs = encode_nanogpt(source, tokenizer_path, WORK / "train.bin", args.workers)
        print(f"encode #{repeat + 1}: lmprep {ours:.1f} s ({megabytes / ours:.1f} MB/s), "
              f"nanoGPT/tiktoken {theirs:.1f} s ({megabytes / theirs:.1f} MB/s), ratio {theirs / ours:.2f}×")
    stream = np.concatenate([shard.tokens for shard in ShardSet.open(WORK / "shards", "train").shards])
    print(f"token streams identical: {np.array_equal(stream, np.fromfile(WORK / 'train.bin', np.uint16))} "
          f"({len(stream):,} tokens)")
    for repeat in range(args.repeats):
        rates = sampling(WORK / "shards", WORK / "train.bin")
        print(f"sampling #{repeat + 1} (64 × 256): shards {rates['shards']:,.0f}/s, "
              f"memmap fancy indexing {rates['memmap']:,.0f}/s")


def memory(args: argparse.Namespace) -> None:
    for scale in (1, args.scale):
        subprocess.run([sys.executable, __file__, "--child-prepare", str(scale)], check=True, capture_output=True)
        figures = peak_rss(scale, args.workers)
        print(f"peak RSS at {figures['corpus_mb']:.0f} MB prepared: main {figures['main_mb']:.0f} MB, "
              f"largest worker {figures['worker_mb']:.0f} MB (encode {figures['wall_s']:.1f} s)", flush=True)


if __name__ == "__main__":
    main()
