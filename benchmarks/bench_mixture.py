"""Mixture sampling benchmark: CPU time per batch of the train stage's window sampling, and the shares reached.

On an encoded shard directory (the shipped project's by default, after ``lmprep run encode``), times
``ShardSet.sample_batch`` (the windows alone), the natural mixture with its count of tokens per source,
and the weighted mixture (``--weights``, one per source; equal weights by default), then prints the
shares the weighted sampler reached against the targets.

    python benchmarks/bench_mixture.py [--shards data/shards] [--weights 0.4,0.1,0.1,0.2,0.2]
        [--batches 300] [--batch-size 32] [--context 64] [--smoke]

``--smoke`` encodes a tiny project of two sources in a temporary directory and samples a few batches.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import results

from pipeline.shards.format import ShardSet
from pipeline.shards.mixture import MixtureSampler, mixture_report

ROOT = Path(__file__).resolve().parents[1]


def per_batch_ms(draw, batches: int) -> float:
    began = time.process_time()
    for _ in range(batches):
        draw()
    return (time.process_time() - began) / batches * 1e3


def smoke_shards() -> str:
    """The shards of a tiny project of two sources, encoded in a temporary directory."""
    import os

    from click.testing import CliRunner

    from stages.cli.main import cli

    root = results.smoke_directory("bench_mixture")
    (root / "a.txt").write_text("\n\n".join(f"Q: what is {i}?\nA: it is {i}." for i in range(60)))
    (root / "b.txt").write_text("\n\n".join(f"The number {i} follows {i - 1}." for i in range(60)))
    (root / "lmprep.yaml").write_text("""\
data: {sources: [{glob: a.txt, separator: blank_line}, {glob: b.txt, separator: blank_line}]}
prepare: {output_dir: out/prepared, val_fraction: 0.2}
tokenizer: {output: out/tokenizer.json, vocab_size: 300, workers: 1}
encode: {output_dir: out/shards, workers: 1}
state_dir: state
""")
    here = os.getcwd()
    os.chdir(root)
    try:
        result = CliRunner().invoke(cli, ["run", "encode", "--config", "lmprep.yaml"])
    finally:
        os.chdir(here)
    if result.exit_code != 0:
        raise SystemExit(result.output)
    return str(root / "out" / "shards")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", default="data/shards")
    parser.add_argument("--weights", default=None, help="comma-separated, one per source [default: equal]")
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--context", type=int, default=64)
    results.add_arguments(parser)
    args = parser.parse_args()
    if args.smoke:
        args.shards, args.batches, args.batch_size, args.context = smoke_shards(), 5, 4, 8
    shard_set = ShardSet.open(args.shards, "train")
    sources = len(shard_set.manifest.sources)
    weights = tuple(float(w) for w in args.weights.split(",")) if args.weights else (1.0,) * sources
    natural, weighted = (MixtureSampler(shard_set, None, args.context),
                         MixtureSampler(shard_set, weights, args.context))
    rng = np.random.default_rng(0)
    print(f"{shard_set.num_tokens:,} tokens, {sources} sources; batches of {args.batch_size} windows of "
          f"{args.context + 1} tokens, CPU ms per batch:")
    draws = {"windows alone (sample_batch)": lambda: shard_set.sample_batch(rng, args.batch_size, args.context),
             "natural mixture, counted by source": lambda: natural.sample(rng, args.batch_size),
             "weighted mixture": lambda: weighted.sample(rng, args.batch_size)}
    for name, draw in draws.items():
        print(f"  {name:<36} {per_batch_ms(draw, args.batches):.3f}")
    totals = np.zeros(weighted.sources, dtype=np.int64)
    for _ in range(args.batches):
        totals += weighted.sample(rng, args.batch_size)[1]
    for row in mixture_report(totals.tolist(), weighted.shares):
        print(f"  data.sources[{row['source']}]: {row['tokens']:,} tokens, {row['share']:.1%} "
              f"(target {row['target']:.1%})")

if __name__ == "__main__":
    results.run("bench_mixture", main)
