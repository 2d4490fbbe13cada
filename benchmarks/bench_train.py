"""Training benchmark: lmprep's BPE trainer against rustbpe and HF tokenizers, side by side.

Each trainer runs in a fresh subprocess on the same corpus, the same GPT-4 split pattern, the same
vocabulary size and the same number of threads/processes; by default on both corpora of
``build_corpus.py`` (``full`` and ``unique-lines``), one table each. The figures: wall time of training
alone (reading the corpus file is excluded for everyone), CPU time of the process and its workers
(steadier than wall time on a busy machine), peak RSS of the main process, and peak RSS of the largest
worker process (lmprep counts chunks in forked worker processes, whose resident size includes the pages
they share with the main one, the loaded corpus among them; the Rust trainers use threads, so their
figure is in the main process). lmprep's merges are checked to be identical to rustbpe's.

    python benchmarks/build_corpus.py
    python benchmarks/bench_train.py [--corpus full|unique-lines|PATH]... [--vocab-size 32768] [--threads 2] \
        [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.build_corpus import CORPORA  # noqa: E402

DATA = ROOT / "benchmarks" / ".data"
GPT4_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+"""
)
TRAINERS = ("lmprep", "rustbpe", "hf")


def load_texts(path: Path) -> list[str]:
    with open(path, encoding="utf-8") as lines:
        return [json.loads(line)["text"] for line in lines]


def train_lmprep(texts: list[str], vocab_size: int, threads: int) -> list[bytes]:
    from pipeline.tokenizer.trainer import train_merges

    result = train_merges(texts, kind="byte", pattern=GPT4_PATTERN, num_merges=vocab_size - 256, workers=threads)
    vocab = [bytes([i]) for i in range(256)]
    for left, right in result.merges:
        vocab.append(vocab[left] + vocab[right])
    return vocab


def train_rustbpe(texts: list[str], vocab_size: int, threads: int) -> list[bytes]:
    import rustbpe

    tokenizer = rustbpe.Tokenizer()
    tokenizer.train_from_iterator(iter(texts), vocab_size, pattern=GPT4_PATTERN)
    return [token for token, _rank in sorted(tokenizer.get_mergeable_ranks(), key=lambda item: item[1])]


def train_hf(texts: list[str], vocab_size: int, threads: int) -> list[bytes]:
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(GPT4_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return []


def run_one(name: str, corpus: Path, vocab_size: int, threads: int) -> None:
    """Child mode: train once, print one JSON line of figures, save the vocabulary for the parity check."""
    texts = load_texts(corpus)
    train = {"lmprep": train_lmprep, "rustbpe": train_rustbpe, "hf": train_hf}[name]
    start, start_cpu = time.perf_counter(), cpu_seconds()
    vocab = train(texts, vocab_size, threads)
    wall, cpu = time.perf_counter() - start, cpu_seconds() - start_cpu
    if vocab:
        vocab_file(corpus, name).write_text(json.dumps([token.hex() for token in vocab]))
    print(json.dumps({
        "wall": wall,
        "cpu": cpu,
        "rss_main_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "rss_worker_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
    }))


def cpu_seconds() -> float:
    """CPU time of this process (all its threads) and of its finished worker processes."""
    usages = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return sum(usage.ru_utime + usage.ru_stime for usage in usages)


def measure(name: str, corpus: Path, vocab_size: int, threads: int) -> dict:
    env = {**os.environ, "RAYON_NUM_THREADS": str(threads)}
    command = [sys.executable, __file__, "--one", name, "--corpus", str(corpus), "--vocab-size", str(vocab_size),
               "--threads", str(threads)]
    output = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(output.strip().splitlines()[-1])


def report(figures: dict[str, list[dict]]) -> None:
    base = min(run["wall"] for run in figures["rustbpe"])
    print(f"{'trainer':<10} {'wall s (each run)':<22} {'vs rustbpe':>10} {'CPU s (each run)':<18} "
          f"{'RSS main MB':>12} {'RSS worker MB':>14}")
    for name, runs in figures.items():
        walls = " ".join(f"{run['wall']:.1f}" for run in runs)
        best = min(run["wall"] for run in runs)
        cpus = " ".join(f"{run['cpu']:.1f}" for run in runs)
        main_rss = max(run["rss_main_mb"] for run in runs)
        worker_rss = max(run["rss_worker_mb"] for run in runs)
        print(f"{name:<10} {walls:<22} {best / base:>9.2f}x {cpus:<18} {main_rss:>12.0f} {worker_rss:>14.0f}")


def vocab_file(corpus: Path, trainer: str) -> Path:
    return DATA / f"vocab-{corpus.stem}-{trainer}.json"


def check_parity(corpus: Path) -> None:
    ours = json.loads(vocab_file(corpus, "lmprep").read_text())
    theirs = json.loads(vocab_file(corpus, "rustbpe").read_text())
    if ours == theirs:
        print(f"merges identical to rustbpe ({len(ours) - 256} merges)")
        return
    first = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
    print(f"MERGES DIFFER from rustbpe: sizes {len(ours)} vs {len(theirs)}, first difference at id {first}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", action="append",
                        help="full, unique-lines or the path of a JSON Lines file "
                             "(one {\"text\": ...} per document); repeatable [default: both]")
    parser.add_argument("--vocab-size", type=int, default=32768)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--trainers", default=",".join(TRAINERS))
    parser.add_argument("--corpus", choices=list(CORPORA), default="full")
    parser.add_argument("--one", choices=TRAINERS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    corpora = [Path(CORPORA.get(corpus, corpus)) for corpus in args.corpus or CORPORA]
    if args.one:
        return run_one(args.one, corpora[0], args.vocab_size, args.threads)
    for corpus in corpora:
        if not corpus.exists():
            raise SystemExit(f"{corpus} is missing; run benchmarks/build_corpus.py first")
    names = args.trainers.split(",")
    for corpus in corpora:
        figures: dict[str, list[dict]] = {name: [] for name in names}
        for _ in range(args.repeats):
            for name in names:
                figures[name].append(measure(name, corpus, args.vocab_size, args.threads))
        print(f"corpus {corpus.name} ({corpus.stat().st_size / 1e6:.0f} MB), vocab {args.vocab_size}, "
              f"{args.threads} threads/processes")
        report(figures)
        if "lmprep" in names and "rustbpe" in names:
            check_parity(corpus)


if __name__ == "__main__":
    main()
