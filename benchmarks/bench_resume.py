"""Resume per partition: kill a stage (SIGKILL to ``lmprep``) once half of its tasks have finished, run it
again, and compare that run with a whole one: its time, the partitions it took from the killed run and
whether the output is byte-identical. Then the same for prepare after an edit of one of its four raw files
(a line added to the second): the run after the edit, which takes the first round a finished run kept for
the other files, against a whole run (what every edit cost before prepare kept it). Needs ``lmprep[test]``
for the S3 case (moto's server on 127.0.0.1).

    python benchmarks/bench_resume.py [--documents 6000] [--repeats 3] [--smoke]

Cases: encode to a local directory, encode to S3 (the shards in a bucket), prepare killed in its first
round, prepare killed in its last round (after the de-duplication step), prepare after an edit. The
project is generated in a temporary directory: distinct question/answer documents cut into 12
partitions, two workers. Times are the medians over ``--repeats``, each including the command's start-up,
as a user sees them, with the CPU seconds of the command and its workers. ``--smoke``: 600 documents, once,
the local encode and the edit cases.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import results

ROOT = Path(__file__).resolve().parents[1]
CONFIG = """\
data:
  sources:
    - {{glob: "{raw}/*.txt", separator: line}}
prepare: {{output_dir: out/prepared, val_fraction: 0.1, partition_bytes: {partition_bytes}}}
tokenizer: {{output: out/tokenizer.json, vocab_size: 2048, workers: 2}}
encode: {{output_dir: {shards}, shard_tokens: 20000, workers: 2}}
executor: {{workers: 2}}
state_dir: state
"""
PARTITIONS = 12
REUSED = re.compile(r"reusing (\d+) of (\d+) (?:parts|partitions)")


def lmprep(project: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "stages", *args, "--config", "lmprep.yaml"], cwd=project,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish(project: Path, *args: str) -> tuple[float, float, str]:
    """Seconds the command took, the CPU seconds of its processes (its workers included), and its stderr."""
    start, cpu = time.perf_counter(), _children_cpu()
    process = lmprep(project, *args)
    _, err = process.communicate(timeout=600)
    assert process.returncode == 0, err
    return time.perf_counter() - start, _children_cpu() - cpu, err


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def make_project(root: Path, documents: int, shards: str) -> Path:
    raw, project = root / "raw", root / "project"
    raw.mkdir()
    project.mkdir()
    lines = [f"Q: what is {i} times {i % 97}? A: it is {i * (i % 97)}, said {i % 13}." for i in range(documents)]
    for index in range(4):
        (raw / f"part-{index}.txt").write_text("\n".join(lines[index::4]) + "\n")
    size = sum(path.stat().st_size for path in raw.iterdir())
    (project / "lmprep.yaml").write_text(CONFIG.format(raw=raw, shards=shards,
                                                       partition_bytes=-(-size // PARTITIONS)))
    finish(project, "run", "tokenizer")
    return project


def kill_at_half(project: Path, stage: str, records: Callable[[], int], total: int) -> None:
    """Start ``lmprep run STAGE --force`` and SIGKILL it once ``records()`` reaches half of ``total``."""
    process = lmprep(project, "run", stage, "--force")
    while records() < total // 2:
        assert process.poll() is None, f"{stage} ended before half of its tasks finished"
        time.sleep(0.005)
    process.send_signal(signal.SIGKILL)
    process.wait()


def counts(prepared: Path) -> tuple[int, int]:
    """Prepare's partitions, and encode's parts (those with documents), from ``parts.json``."""
    parts = json.loads((prepared / "parts.json").read_text())
    return len(parts["train"]), sum(1 for split in parts.values() for part in split if part["documents"])


def tree_digest(files: dict[str, bytes]) -> str:
    return hashlib.sha256(repr(sorted((name, hashlib.sha256(data).digest()) for name, data in files.items()))
                          .encode()).hexdigest()


def local_files(directory: Path) -> dict[str, bytes]:
    return {str(path.relative_to(directory)): path.read_bytes() for path in directory.rglob("*") if path.is_file()}


def case(name: str, project: Path, stage: str, records: Callable[[], int], total: int,
         output: Callable[[], dict[str, bytes]], repeats: int) -> None:
    whole, resumed, reused = [], [], set()
    for _ in range(repeats):
        forget_kept(project)
        *seconds, _ = finish(project, "run", stage, "--force")
        whole.append(seconds)
        reference = tree_digest(output())
        forget_kept(project)
        kill_at_half(project, stage, records, total)
        *seconds, err = finish(project, "run", stage, "--force")
        resumed.append(seconds)
        reused.add(tuple(REUSED.findall(err)))
        assert tree_digest(output()) == reference, f"{name}: the resumed output differs"
    print(f"| {name} | {_median(whole)} | {_median(resumed)} | "
          f"{'; '.join(', '.join(f'{n} of {m}' for n, m in found) for found in sorted(reused))} | identical |",
          flush=True)


def forget_kept(project: Path) -> None:
    """Remove what a finished prepare keeps for the next run (its first round), so that a run does it all."""
    shutil.rmtree(project / "out" / "prepared.partial", ignore_errors=True)


def edit_case(project: Path, raw: Path, output: Callable[[], dict[str, bytes]], repeats: int) -> None:
    """A line added to one of the four raw files: the run after it against a whole run of the same data."""
    whole, edited, reused = [], [], set()
    finish(project, "run", "prepare", "--force")  # a finished run, which keeps its first round
    for repeat in range(repeats):
        with (raw / "part-1.txt").open("a") as file:
            file.write(f"Q: what was edited? A: line {repeat}.\n")
        *seconds, err = finish(project, "run", "prepare")
        edited.append(seconds)
        reused.add(tuple(REUSED.findall(err)))
        after_edit = tree_digest(output())
        forget_kept(project)
        *seconds, _ = finish(project, "run", "prepare", "--force")
        whole.append(seconds)
        assert tree_digest(output()) == after_edit, "prepare after an edit: the output differs from a whole run's"
    print(f"| prepare, 1 of 4 raw files edited | {_median(whole)} | {_median(edited)} (after the edit) | "
          f"{'; '.join(', '.join(f'{n} of {m}' for n, m in found) for found in sorted(reused))} | identical |",
          flush=True)


def _median(times: list[list[float]]) -> str:
    wall, cpu = (statistics.median(column) for column in zip(*times))
    return f"{wall:.2f} s ({cpu:.2f} s CPU)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=6000)
    parser.add_argument("--repeats", type=int, default=3)
    results.add_arguments(parser)
    options = parser.parse_args()
    if options.smoke:
        options.documents, options.repeats = 600, 1
    print("| case | whole run | after a kill at ~50 % | reused (partitions) | output |", "|---|---|---|---|---|",
          sep="\n", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench_resume-") as scratch:
        root = Path(scratch) / "local"
        root.mkdir()
        project = make_project(root, options.documents, "out/shards")
        prepared, shards = project / "out" / "prepared", project / "out" / "shards"
        finish(project, "run", "encode")

        def done(directory: Path, pattern: str) -> Callable[[], int]:
            return lambda: len(list(directory.glob(pattern)))

        partitions, encode_parts = counts(prepared)
        case("encode, local", project, "encode", done(project / "out" / "shards.partial", "*.done.json"),
             encode_parts, lambda: local_files(shards), options.repeats)
        edit_case(project, root / "raw", lambda: local_files(prepared), options.repeats)
        if options.smoke:
            print("(smoke run: the killed prepare and S3 cases are left out)")
            return
        case("prepare, killed in round 1 of 2", project, "prepare",
             done(project / "out" / "prepared.partial", "r0-0*.done.json"), partitions,
             lambda: local_files(prepared), options.repeats)
        case("prepare, killed in round 2 of 2", project, "prepare",
             done(project / "out" / "prepared.partial", "r1-0*.done.json"), partitions,
             lambda: local_files(prepared), options.repeats)
        s3_case(Path(scratch) / "s3", options)


def s3_case(root: Path, options: argparse.Namespace) -> None:
    from moto.server import ThreadedMotoServer

    from pipeline.engine import storage

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1",
                          AWS_ENDPOINT_URL=f"http://{host}:{port}")
        import s3fs

        fs = s3fs.S3FileSystem()
        fs.mkdir("resume")
        root.mkdir()
        project = make_project(root, options.documents, "s3://resume/shards")
        finish(project, "run", "encode")
        _, encode_parts = counts(project / "out" / "prepared")

        def records() -> int:
            fs.invalidate_cache()
            return len(fs.glob("resume/shards.partial/*.done.json"))

        def committed() -> dict[str, bytes]:
            attempt = storage.committed("s3://resume/shards")
            return {name: storage.read_bytes(f"{attempt}/{name}") for name in storage.list_files(attempt)}

        case("encode, S3 (moto)", project, "encode", records, encode_parts, committed, options.repeats)
    finally:
        server.stop()


if __name__ == "__main__":
    results.run("bench_resume", main)
