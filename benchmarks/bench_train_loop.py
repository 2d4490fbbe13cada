"""Training-loop benchmark: tokens/s, the share of step time spent loading batches, user vs system time.

Builds a synthetic shard set (Zipf-distributed IDs, like text, over several
shards) for a byte-level tokenizer of each vocabulary size, then runs the real
training loop (``pipeline.model.training.train``, validation off) for a few model
shapes on the CPU and prints throughput, the data-loading share (target < 10 %),
and from ``getrusage`` the user and system (kernel) CPU time as shares of the
wall time of the steps, with the minor page faults per step. System time is
the allocator asking the kernel for fresh pages; its target is < 10 %.

    python benchmarks/bench_train_loop.py [--tokens 4000000] [--steps 200] [--vocab-sizes 2048,8192,32768] [--smoke]
"""

from __future__ import annotations

import argparse
import dataclasses
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
import results

from pipeline.config import TrainConfig
from pipeline.shards.format import ShardSet, ShardWriter
from pipeline.shards.manifest import ShardStamp
from pipeline.shards.origins import Origins
from pipeline.tokenizer import Tokenizer

ROOT = Path(__file__).resolve().parents[1]

SHAPES = [  # (dim, context, batch_size): the default config first
    (64, 64, 32),
    (64, 256, 64),
    (256, 256, 64),
]
LETTERS = list("abcdefghijklmnopqrstuvwxyz")


def build_tokenizer(vocab_size: int, least_words: int = 40_000) -> Tokenizer:
    """A byte-level tokenizer trained on made-up words, enough of them to fill ``vocab_size``."""
    rng = np.random.default_rng(1)
    words = ["".join(rng.choice(LETTERS, size=rng.integers(2, 7))) for _ in range(max(least_words, 8 * vocab_size))]
    texts = [" ".join(words[i : i + 100]) for i in range(0, len(words), 100)]
    return Tokenizer.train(texts, vocab_size=vocab_size, special_tokens=("<|endoftext|>",), min_frequency=1)


def build_shards(directory: Path, tokenizer: Tokenizer, tokens: int, seed: int = 0) -> ShardSet:
    """``tokens`` Zipf-like IDs in documents of ~500 tokens, cut into shards of 1M tokens."""
    rng = np.random.default_rng(seed)
    ids = (rng.zipf(1.2, size=tokens) - 1) % tokenizer.vocab_size
    offsets = np.arange(0, tokens + 1, 500, dtype=np.int64)
    offsets[-1] = tokens
    stamp = ShardStamp(split="train", tokenizer_fingerprint=tokenizer.fingerprint,
                       vocab_size=tokenizer.vocab_size, special_ids={"bos": None, "eos": None},
                       prepared_fingerprint="0" * 64)
    writer = ShardWriter(directory, stamp, shard_tokens=1_000_000)
    writer.write(ids.astype(np.uint32), offsets, Origins.numbered(len(offsets) - 1))
    writer.close()
    return ShardSet.open(directory, "train", tokenizer=tokenizer)


def bench_shape(train_set: ShardSet, tokenizer: Tokenizer, shape: tuple[int, int, int], steps: int,
                work: Path) -> dict[str, float]:
    from pipeline.model import training

    dim, context, batch_size = shape
    settings = dataclasses.replace(TrainConfig(), dim=dim, context=context, batch_size=batch_size, steps=steps)
    before, began = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    summary = training.train(settings, tokenizer=tokenizer, train_set=train_set, val_set=None,
                             output_dir=work / f"d{dim}-c{context}-b{batch_size}")
    after, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter() - began
    return {"tokens_per_s": summary.tokens_per_second, "data_share": summary.data_share,
            "ms_per_step": 1000 * summary.seconds / steps, "loss": summary.train_loss or 0.0,
            "user_share": (after.ru_utime - before.ru_utime) / wall,
            "system_share": (after.ru_stime - before.ru_stime) / wall,
            "faults_per_step": (after.ru_minflt - before.ru_minflt) / steps}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=4_000_000)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--vocab-sizes", default="2048,8192,32768",
                        help="Comma-separated vocabulary sizes to measure.")
    results.add_arguments(parser)
    args = parser.parse_args()
    shapes, warm_up, least_words = SHAPES, 20, 40_000
    if args.smoke:
        args.tokens, args.steps, args.vocab_sizes = 20_000, 2, "300"
        shapes, warm_up, least_words = SHAPES[:1], 1, 0
    import torch

    print(f"torch {torch.__version__}, 1 thread (the training loop pins it), {args.steps} steps per shape; "
          "user and system: CPU time as a share of the run's wall time (it includes saving the checkpoint)")
    print(f"{'vocab':>6} {'dim':>5} {'context':>7} {'batch':>5} {'tokens/s':>12} {'ms/step':>8} {'data share':>10} "
          f"{'user':>6} {'system':>6} {'faults/step':>11} {'loss':>7}")
    for vocab_size in map(int, args.vocab_sizes.split(",")):
        tokenizer = build_tokenizer(vocab_size, least_words)
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            train_set = build_shards(work / "shards", tokenizer, args.tokens)
            bench_shape(train_set, tokenizer, shapes[0], warm_up, work)  # warm up torch's kernels and allocator
            for shape in shapes:
                r = bench_shape(train_set, tokenizer, shape, args.steps, work)
                print(f"{tokenizer.vocab_size:>6} {shape[0]:>5} {shape[1]:>7} {shape[2]:>5} "
                      f"{r['tokens_per_s']:>12,.0f} {r['ms_per_step']:>8.2f} {r['data_share']:>10.1%} "
                      f"{r['user_share']:>6.1%} {r['system_share']:>6.1%} {r['faults_per_step']:>11,.0f} "
                      f"{r['loss']:>7.3f}", flush=True)


if __name__ == "__main__":
    results.run("bench_train_loop", main)
