"""Scaling benchmark: prepare and encode throughput with 1 and 2 local processes and a 2-worker Dask
cluster, and the driver's peak RSS as the corpus grows.

The corpus of ``build_corpus.py`` is cut into ``--files`` JSON Lines files (``--scale`` × repeats it for
the memory figure, which then holds mostly duplicates). Each configuration runs in a fresh interpreter:
prepare (read → clean → exact de-duplication → split → write) then encode (32,768-ID byte-level BPE
trained once on the first 20 MB). The Dask cluster is a ``LocalCluster`` of processes on this machine,
started before the clock starts. Peak RSS is the driver's own (``RUSAGE_SELF``), workers excluded.

    python benchmarks/build_corpus.py
    python benchmarks/bench_scale.py [--files 24] [--scale 4]
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline import documents  # noqa: E402
from pipeline.config import ExecutorConfig, PrepareConfig, SourceConfig  # noqa: E402
from pipeline.encoding import encode_corpus  # noqa: E402
from pipeline.executor import open_tasks  # noqa: E402
from pipeline.prepare import prepare_corpus  # noqa: E402
from pipeline.sources import expand_sources  # noqa: E402
from pipeline.tokenizer import Tokenizer  # noqa: E402

DATA = ROOT / "benchmarks" / ".data"
CORPUS = DATA / "corpus.jsonl"
WORK = DATA / "bench_scale"
EOT = "<|endoftext|>"
MODES = {"local-1": ExecutorConfig(kind="local", workers=1), "local-2": ExecutorConfig(kind="local", workers=2),
         "dask-2": ExecutorConfig(kind="dask", address="local", workers=2)}


def raw_files(files: int, scale: int) -> Path:
    """``files`` JSON Lines files holding the corpus ``scale`` times, in order."""
    directory = WORK / f"raw-x{scale}"
    if not directory.exists():
        lines = CORPUS.read_bytes().splitlines(keepends=True) * scale
        size = -(-len(lines) // files)
        directory.mkdir(parents=True)
        for index, start in enumerate(range(0, len(lines), size)):
            (directory / f"part-{index:03d}.jsonl").write_bytes(b"".join(lines[start : start + size]))
    return directory


def tokenizer_file() -> Path:
    path = WORK / "tokenizer.json"
    if not path.exists():
        sample, size = [], 0
        with open(CORPUS, encoding="utf-8") as lines:
            for line in lines:
                sample.append(json.loads(line)["text"])
                size += len(sample[-1])
                if size > 20_000_000:
                    break
        Tokenizer.train(sample, vocab_size=32768, special_tokens=[EOT], workers=2).save(path)
    return path


def child(mode: str, files: int, scale: int) -> None:
    raw, tokenizer_path = raw_files(files, scale), tokenizer_file()
    sources = expand_sources([SourceConfig(glob="*.jsonl")], root=raw)
    raw_mb = sum(file.path.stat().st_size for file in sources) / 1e6
    out = WORK / f"out-{mode}-x{scale}"
    with open_tasks(MODES[mode]) as tasks:
        start = time.perf_counter()
        prepare_corpus(sources, PrepareConfig(), out / "prepared", tasks=tasks)
        prepare_s = time.perf_counter() - start
        eos = Tokenizer.load(tokenizer_path).special_tokens[EOT]
        start = time.perf_counter()
        encode_corpus(out / "prepared", out / "shards", tokenizer_path=tokenizer_path, tasks=tasks,
                      shard_tokens=1_000_000, eos_id=eos)
        encode_s = time.perf_counter() - start
    prepared_mb = sum(part.bytes for split in documents.SPLITS
                      for part in documents.read_parts(out / "prepared", split)) / 1e6
    print(json.dumps({"raw_mb": raw_mb, "prepare_s": prepare_s, "prepared_mb": prepared_mb, "encode_s": encode_s,
                      "driver_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def run(mode: str, files: int, scale: int) -> dict:
    command = [sys.executable, __file__, "--child", mode, "--files", str(files), "--scale", str(scale)]
    return json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout.splitlines()[-1])


def same_outputs(a: Path, b: Path) -> bool:
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    return files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file()) and all(
        (a / f).read_bytes() == (b / f).read_bytes() for f in files)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=24)
    parser.add_argument("--scale", type=int, default=4, help="second corpus size for the memory figure, ×")
    parser.add_argument("--child", choices=sorted(MODES), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.files, args.scale)
    raw_files(args.files, 1), raw_files(args.files, args.scale), tokenizer_file()
    for mode in MODES:
        figures = run(mode, args.files, 1)
        print(f"{mode}: prepare {figures['raw_mb']:.0f} MB in {figures['prepare_s']:.1f} s "
              f"({figures['raw_mb'] / figures['prepare_s']:.1f} MB/s), encode {figures['prepared_mb']:.0f} MB in "
              f"{figures['encode_s']:.1f} s ({figures['prepared_mb'] / figures['encode_s']:.1f} MB/s), "
              f"driver peak RSS {figures['driver_rss_mb']:.0f} MB", flush=True)
    print(f"outputs identical across modes: "
          f"{all(same_outputs(WORK / 'out-local-1-x1', WORK / f'out-{m}-x1') for m in MODES)}")
    figures = run("local-2", args.files, args.scale)
    print(f"local-2 at {figures['raw_mb']:.0f} MB: driver peak RSS {figures['driver_rss_mb']:.0f} MB")
    shutil.rmtree(WORK / f"out-local-2-x{args.scale}")


if __name__ == "__main__":
    main()
