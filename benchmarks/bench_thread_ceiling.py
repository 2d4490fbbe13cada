"""What two threads can give on this machine: work that shares nothing, in 1 and 2 threads or processes.

    python benchmarks/bench_thread_ceiling.py [--megabytes 1024] [--repeats 5] [--smoke]
    python benchmarks/bench_thread_ceiling.py --encoder english,multilingual,code [--repeats 7]

SHA-256 of a 64 KB buffer over and over (``hashlib`` releases the GIL while it hashes, so the threads run
at once, each on a buffer of its own): the same total work in one thread, then split between two, the two
alternating, best of ``--repeats`` each. One thread's wall-clock time over two threads' is the ceiling of
scaling that the cores give to compute-bound work (on a virtual machine, what the host lets its virtual
CPUs have at the time), against which the native encoder's scaling is judged (docs/native.md).

``--encoder``: the same question for the encoder's own work, whose chunk cache and merges use memory as
SHA-256 does not. On each of ``bench_native.py``'s corpora (its 20 MB files and 32,768-ID tokenizers),
each case in fresh forked processes from a cold tokenizer, in turn within each of ``--repeats`` rounds,
best of the rounds, wall-clock seconds of the encode calls alone:

- ``one thread``: ``encode_batch_flat`` of every document;
- ``two threads``: the same with ``threads=2``: the encoder's scaling, one over this;
- ``two processes``: the first and second halves of the documents at once, each in a process of its own
  with a tokenizer of its own: nothing shared, each cache learning its own chunks;
- ``the halves in turn``: the same two processes one after the other. Over ``two processes``, what the
  cores give this very work with nothing shared: the ceiling for any way of sharing it between threads
  that does no less work than two private caches.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import threading
import time

import results

BLOCK = 64 * 1024


def hash_blocks(blocks: int) -> None:
    data = os.urandom(BLOCK)
    for _ in range(blocks):
        hashlib.sha256(data).digest()


def timed(blocks: int, threads: int) -> tuple[float, float]:
    """(wall-clock, CPU) seconds of hashing `blocks` blocks in all, shared out among `threads` threads."""
    workers = [threading.Thread(target=hash_blocks, args=(blocks // threads,)) for _ in range(threads)]
    wall, cpu = time.perf_counter(), time.process_time()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return time.perf_counter() - wall, time.process_time() - cpu


def sha_ceiling(megabytes: int, repeats: int) -> None:
    """SHA-256 of ``megabytes`` in one thread and in two, alternating, best of ``repeats``."""
    blocks = megabytes * 1024 * 1024 // BLOCK // 2 * 2
    best = {1: (float("inf"), 0.0), 2: (float("inf"), 0.0)}
    for _ in range(repeats):
        for threads in (1, 2):
            best[threads] = min(best[threads], timed(blocks, threads))
    print(f"SHA-256 of {megabytes} MB in 64 KB blocks, best of {repeats}, os.cpu_count() = {os.cpu_count()}")
    for threads, (wall, cpu) in best.items():
        print(f"  {threads} thread{'s' if threads > 1 else ''}: {wall:.3f} s wall-clock, {cpu:.3f} s CPU, "
              f"{megabytes / wall:.0f} MB/s")
    (wall_1, cpu_1), (wall_2, cpu_2) = best[1], best[2]
    print(f"1 -> 2 threads: {wall_1 / wall_2:.2f}x wall-clock, two threads' CPU time {cpu_2 / cpu_1:.2f}x one's")


def encoded(tokenizer_path: str, texts: list[str], threads: int, start, seconds) -> None:
    """In a forked process: a throwaway call first (so that what a process does once is not timed), then a
    cold tokenizer and, once every process of the case is ready, the timed encode."""
    from pipeline.tokenizer import Tokenizer

    Tokenizer.load(tokenizer_path).encode_batch_flat(["start the threads"], threads=threads)
    tokenizer = Tokenizer.load(tokenizer_path)
    tokenizer.build_encoder()
    start.wait()
    began = time.perf_counter()
    tokenizer.encode_batch_flat(texts, threads=threads)
    seconds.put(time.perf_counter() - began)


def encode_case(tokenizer_path: str, parts: list[list[str]], threads: int = 1) -> float:
    """Wall-clock seconds until the last of ``parts`` is encoded, each in a forked process, all at once."""
    context = multiprocessing.get_context("fork")
    start, seconds = context.Barrier(len(parts)), context.Queue()
    processes = [context.Process(target=encoded, args=(tokenizer_path, part, threads, start, seconds))
                 for part in parts]
    for process in processes:
        process.start()
    wall = max(seconds.get() for _ in processes)
    for process in processes:
        process.join()
    return wall


def encoder_ceiling(corpus: str, megabytes: float, vocab_size: int, repeats: int) -> None:
    import bench_native

    texts = json.loads(bench_native.corpus_file(corpus, megabytes).read_text(encoding="utf-8"))
    tokenizer = str(bench_native.tokenizer_file(corpus, texts, vocab_size))
    first, second = texts[: len(texts) // 2], texts[len(texts) // 2:]
    cases = {"one thread": lambda: encode_case(tokenizer, [texts]),
             "two threads": lambda: encode_case(tokenizer, [texts], threads=2),
             "two processes": lambda: encode_case(tokenizer, [first, second]),
             "the halves in turn": lambda: encode_case(tokenizer, [first]) + encode_case(tokenizer, [second])}
    best = dict.fromkeys(cases, float("inf"))
    for _ in range(repeats):
        for name, case in cases.items():
            best[name] = min(best[name], case())
    size = sum(len(text.encode("utf-8")) for text in texts) / 1e6
    print(f"{corpus}: {size:.1f} MB, {vocab_size:,} IDs, best of {repeats}: "
          + ", ".join(f"{name} {seconds:.3f} s" for name, seconds in best.items()))
    print(f"  the encoder, 1 -> 2 threads: {best['one thread'] / best['two threads']:.2f}x; two processes sharing "
          f"nothing: {best['one thread'] / best['two processes']:.2f}x one thread, "
          f"{best['the halves in turn'] / best['two processes']:.2f}x their halves in turn")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=1024, help="what is hashed in all, per run [%(default)s]")
    parser.add_argument("--repeats", type=int, default=5, help="runs of each case, alternating [%(default)s]")
    parser.add_argument("--encoder", help="comma-separated bench_native.py corpora: the encoder's work instead")
    results.add_arguments(parser)
    args = parser.parse_args()
    if args.smoke:  # both kinds of work, tiny
        sha_ceiling(16, 1)
        encoder_ceiling("code", 0.05, 300, 1)
    elif args.encoder:
        for corpus in args.encoder.split(","):
            encoder_ceiling(corpus, 20, 32768, args.repeats)
    else:
        sha_ceiling(args.megabytes, args.repeats)


if __name__ == "__main__":
    results.run("bench_thread_ceiling", main)
