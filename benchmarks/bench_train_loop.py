"""Training-loop benchmark: tokens/s and the share of step time spent loading batches.

Builds a synthetic shard set (Zipf-distributed IDs, like text, over several
shards) for a small byte-level tokenizer, then runs the real training loop
(``pipeline.training.train``, validation off) for a few model shapes on the CPU
and prints throughput and the data-loading share, whose target is < 10 %.

    python benchmarks/bench_train_loop.py [--tokens 4000000] [--steps 200]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline.config import TrainConfig  # noqa: E402
from pipeline.shards import ShardSet, ShardStamp, ShardWriter  # noqa: E402
from pipeline.tokenizer import Tokenizer  # noqa: E402

SHAPES = [  # (dim, context, batch_size): the default config first
    (64, 64, 32),
    (64, 256, 64),
    (256, 256, 64),
]
SYLLABLES = "ka ri to ne su ma lo pe di gu an el or is um".split()


def build_tokenizer(vocab_size: int) -> Tokenizer:
    """A byte-level tokenizer trained on made-up words, large enough to fill ``vocab_size``."""
    rng = np.random.default_rng(1)
    words = ["".join(rng.choice(SYLLABLES, size=rng.integers(1, 5))) for _ in range(40_000)]
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
    writer.write(ids.astype(np.uint32), offsets)
    writer.close()
    return ShardSet.open(directory, "train", tokenizer=tokenizer)


def bench_shape(train_set: ShardSet, tokenizer: Tokenizer, shape: tuple[int, int, int], steps: int,
                work: Path) -> dict[str, float]:
    from pipeline import training

    dim, context, batch_size = shape
    settings = dataclasses.replace(TrainConfig(), dim=dim, context=context, batch_size=batch_size, steps=steps)
    summary = training.train(settings, tokenizer=tokenizer, train_set=train_set, val_set=None,
                             output_dir=work / f"d{dim}-c{context}-b{batch_size}")
    return {"tokens_per_s": summary.tokens_per_second, "data_share": summary.data_share,
            "ms_per_step": 1000 * summary.seconds / steps, "loss": summary.train_loss or 0.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=4_000_000)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--vocab-size", type=int, default=2048)
    args = parser.parse_args()
    import torch

    tokenizer = build_tokenizer(args.vocab_size)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        train_set = build_shards(work / "shards", tokenizer, args.tokens)
        print(f"torch {torch.__version__}, 1 thread (the training loop pins it), vocab {tokenizer.vocab_size}, "
              f"{train_set.num_tokens:,} tokens in {len(train_set.shards)} shards, {args.steps} steps")
        print(f"{'dim':>5} {'context':>7} {'batch':>5} {'tokens/s':>12} {'ms/step':>8} {'data share':>10} {'loss':>7}")
        bench_shape(train_set, tokenizer, SHAPES[0], 20, work)  # warm up torch's kernels and allocator
        for shape in SHAPES:
            result = bench_shape(train_set, tokenizer, shape, args.steps, work)
            print(f"{shape[0]:>5} {shape[1]:>7} {shape[2]:>5} {result['tokens_per_s']:>12,.0f} "
                  f"{result['ms_per_step']:>8.2f} {result['data_share']:>10.1%} {result['loss']:>7.3f}")


if __name__ == "__main__":
    main()
