"""What two threads can give on this machine: compute-bound work that shares nothing, in 1 and 2 threads.

    python benchmarks/bench_thread_ceiling.py [--megabytes 1024] [--repeats 5] [--smoke]

SHA-256 of a 64 KB buffer over and over (``hashlib`` releases the GIL while it hashes, so the threads run
at once, each on a buffer of its own): the same total work in one thread, then split between two, the two
alternating, best of ``--repeats`` each. One thread's wall-clock time over two threads' is the ceiling of
scaling that the cores give (on a virtual machine, what the host lets its virtual CPUs have at the time),
against which the native encoder's scaling is judged (docs/native.md).
"""

from __future__ import annotations

import argparse
import hashlib
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=1024, help="what is hashed in all, per run [%(default)s]")
    parser.add_argument("--repeats", type=int, default=5, help="runs of each thread count, alternating [%(default)s]")
    results.add_arguments(parser)
    args = parser.parse_args()
    megabytes, repeats = (16, 1) if args.smoke else (args.megabytes, args.repeats)
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


if __name__ == "__main__":
    results.run("bench_thread_ceiling", main)
