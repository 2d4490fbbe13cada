"""Kill ``lmprep run`` at random times (SIGKILL, or SIGINT to its process group as Ctrl-C does) and check
what the next run finds: no orphan process, no wait for a dead run, no traceback, and byte-identical
outputs once it has finished.

    python benchmarks/fault_injection.py [--trials 12] [--copies 6] [--seed 0] [--smoke]
    python benchmarks/fault_injection.py --cluster [--trials 2] [--copies 1] [--seed 0] [--smoke]
    python benchmarks/fault_injection.py --state [--copies 1] [--seed 0]

``--smoke``: one trial on a corpus of a few dozen documents per file (with ``--cluster``: the first Dask
and the first object-store scenario).

The corpus is ``--copies`` corpora like the shipped data/raw/, each generated with its own seed (so that
de-duplication keeps them all), with partitions small enough that prepare and encode run several tasks
on two workers. A reference run gives the outputs' hashes and when
each stage starts and ends; trial i then cleans the outputs, starts a run, kills it at a uniform random
time within stage i mod 4 (prepare, tokenizer, encode, train), checks the kill, runs again to the end
and compares every output with the reference. Everything happens in a temporary directory.

With ``--cluster`` the faults are those of a Dask cluster and of an object store instead
(benchmarks/cluster_faults.py): addresses that are no scheduler, a scheduler without workers, workers
and the scheduler killed at random times of a run, a store that freezes, throttles or denies access.

With ``--state`` the faults are of state and input (benchmarks/state_faults.py): forged completion records,
damaged or deleted checkpoint companions, FIFOs and links to /dev/zero among outputs and inputs, a link
loop under ``**``, runaway settings (a glob of the whole file system among them), a duplicated config section,
a hash cache holding ``[]``, a run cache inside an output through a link, a gzip bomb under an address-space
limit, and Ctrl-C as the command starts. (S3 behind a keep-alive endpoint is tests/engine/test_s3_keep_alive.py.)
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import results

REPO = Path(__file__).resolve().parents[1]
CONFIG = """\
data:
  sources:
    - {glob: "raw/**/questions.txt", separator: blank_line}
    - {glob: "raw/**/facts.txt", separator: line}
    - {glob: "raw/**/stories.txt", separator: "<|endoftext|>"}
    - {glob: "raw/**/*.jsonl.gz", field: text}
    - {glob: "raw/**/*.parquet", field: text}
prepare: {output_dir: out/prepared, partition_bytes: 200000}
tokenizer: {output: out/tokenizer/tokenizer.json, vocab_size: 1024, workers: 2}
encode: {output_dir: out/shards, shard_tokens: 100000, workers: 2}
train: {output_dir: out/ckpt, steps: 60, checkpoint_every: 20, eval_every: 20}
executor: {workers: 2}
state_dir: state
"""
STAGES = ("prepare", "tokenizer", "encode", "train")
# A training run continued from its periodic checkpoint ends with the same checkpoint, bytes and all, but
# its metrics and plot mark where it resumed: they differ from an uninterrupted run's by design.
RESUMED_TRAINING_RECORDS = ("out/ckpt/metrics.jsonl", "out/ckpt/loss.png")


def write_corpus(directory: Path, copy: int, smoke: bool) -> None:
    """One corpus like the shipped data/raw/ (``data/generate_corpus.py`` with seed ``copy``), or for a smoke
    run the same five files with a few dozen documents each."""
    if not smoke:
        subprocess.run([sys.executable, str(REPO / "data" / "generate_corpus.py"), "--out", str(directory),
                        "--seed", str(copy)], check=True)
        return
    import gzip
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    for name in ("qa", "facts", "stories", "dialogues", "glossary"):
        (directory / name).mkdir(parents=True)
    texts = [f"copy {copy}, item {i}: the walrus number {i} yodels beside jukebox {i * 7}." for i in range(40)]
    (directory / "qa" / "questions.txt").write_text("\n\n".join(f"Q: what is {t}?\nA: {t}" for t in texts))
    (directory / "facts" / "facts.txt").write_text("\n".join(texts))
    (directory / "stories" / "stories.txt").write_text("<|endoftext|>".join(f"Once, {t} The end." for t in texts))
    lines = "".join(json.dumps({"text": f"A said: {t}"}) + "\n" for t in texts)
    (directory / "dialogues" / "dialogues.jsonl.gz").write_bytes(gzip.compress(lines.encode(), mtime=0))
    pq.write_table(pa.table({"text": [f"term: {t}" for t in texts]}), directory / "glossary" / "glossary.parquet")


def lmprep(project: Path, *args: str, **options) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "stages", *args, "--config", "lmprep.yaml"], cwd=project,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, **options)


def finish(project: Path, *args: str) -> subprocess.CompletedProcess:
    process = lmprep(project, *args)
    out, err = process.communicate(timeout=600)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def timed_run(project: Path) -> dict[str, tuple[float, float]]:
    """Run the whole pipeline; return each stage's start and end, in seconds from the start of the run."""
    began, starts = time.monotonic(), {}
    process = lmprep(project, "run")
    for line in process.stdout:
        for stage in STAGES:
            if line.startswith(f"running '{stage}'"):
                starts[stage] = time.monotonic() - began
    assert process.wait() == 0, process.stderr.read()
    ends = [*(starts[stage] for stage in STAGES[1:]), time.monotonic() - began]
    return {stage: (starts[stage], end) for stage, end in zip(STAGES, ends)}


def outputs(project: Path) -> dict[str, str]:
    return {str(path.relative_to(project)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted((project / "out").rglob("*")) if path.is_file()}


def session_processes(session: int) -> list[int]:
    """Processes still running in the killed run's session (its workers, if they outlived it)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[3]) == session and fields[0] not in ("Z", "X"):
            found.append(int(stat.parent.name))
    return found


def trial(project: Path, how: str, after: float, reference: dict[str, str]) -> dict[str, object]:
    assert finish(project, "clean", "--checkpoints").returncode == 0
    shutil.rmtree(project / "out" / "ckpt.partial", ignore_errors=True)
    run = lmprep(project, "run")
    time.sleep(after)
    if how == "SIGKILL":
        os.kill(run.pid, signal.SIGKILL)
    else:
        os.killpg(run.pid, signal.SIGINT)
    try:
        out, err = run.communicate(timeout=60)
        hung = False
    except subprocess.TimeoutExpired:
        os.killpg(run.pid, signal.SIGKILL)
        out, err = run.communicate()
        hung = True
    stage = next((name for name in reversed(STAGES) if f"running '{name}'" in out), "before prepare")
    deadline = time.monotonic() + 5
    while session_processes(run.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    orphans = session_processes(run.pid)
    for pid in orphans:
        os.kill(pid, signal.SIGKILL)
    again = finish(project, "run", "--no-wait")
    now = outputs(project)
    waited = "another lmprep run" in again.stderr or "waiting for" in again.stdout
    if "Traceback" in err + again.stderr or run.returncode not in (-signal.SIGKILL, 130, 0):
        print(f"--- stderr of the killed run:\n{err[-3000:]}\n--- of the next run:\n{again.stderr[-3000:]}", flush=True)
    return {"how": how, "after": round(after, 1), "stage": stage if run.returncode != 0 else "finished",
            "hung": hung, "returncode": run.returncode, "orphans": len(orphans),
            "traceback": "Traceback" in err or "Traceback" in again.stderr, "next_run": again.returncode,
            "waited": waited, "identical": now == reference,
            "resumed": "reusing" in again.stderr or "continuing" in again.stderr,
            "differ": sorted(name for name in {*now, *reference} if now.get(name) != reference.get(name)),
            "interrupt_line": err.strip().endswith("interrupted; the previous outputs are intact")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--copies", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cluster", action="store_true", help="Dask and object-store faults instead of kills")
    parser.add_argument("--state", action="store_true", help="faults of state and input instead of kills")
    results.add_arguments(parser)
    options = parser.parse_args()
    if options.state:
        import state_faults

        state_faults.main(options.copies, options.seed)
        return
    if options.smoke:
        options.trials, options.copies = 1, 1
    if options.cluster:
        import cluster_faults

        cluster_faults.main(options.trials, options.copies, options.seed, smoke=options.smoke)
        return
    randomness = random.Random(options.seed)
    with tempfile.TemporaryDirectory(prefix="lmprep-faults-") as scratch:
        project = Path(scratch)
        for copy in range(options.copies):
            write_corpus(project / "raw" / f"copy-{copy}", copy, options.smoke)
        config = CONFIG.replace("steps: 60, checkpoint_every: 20, eval_every: 20",
                                "steps: 4, checkpoint_every: 2, eval_every: 2") if options.smoke else CONFIG
        (project / "lmprep.yaml").write_text(config)
        spans = timed_run(project)
        reference = outputs(project)
        print(f"reference run: {spans}, {len(reference)} output files", flush=True)
        outcomes = []
        for index in range(options.trials):
            how = "SIGKILL" if index % 8 < 4 else "SIGINT"
            start, end = spans[STAGES[index % len(STAGES)]]
            result = trial(project, how, randomness.uniform(start, end), reference)
            outcomes.append(result)
            print(result, flush=True)
    bad = Counter()
    for result in outcomes:
        bad["hangs"] += result["hung"]
        bad["tracebacks"] += result["traceback"]
        bad["orphan processes"] += result["orphans"]
        bad["waits for a dead run"] += result["waited"]
        bad["failed next runs"] += result["next_run"] != 0
        bad["outputs not identical"] += any(name not in RESUMED_TRAINING_RECORDS or not result["resumed"]
                                            for name in result["differ"])
        bad["SIGINT without exit 130 and its line"] += (result["how"] == "SIGINT" and result["stage"] != "finished"
                                                         and not (result["returncode"] == 130
                                                                  and result["interrupt_line"]))
    print(f"{len(outcomes)} kills, by stage: {dict(Counter(r['stage'] for r in outcomes))}")
    print(", ".join(f"{count} {name}" for name, count in bad.items()))


if __name__ == "__main__":
    mode = next((f"_{name}" for name in ("cluster", "state") if f"--{name}" in sys.argv), "")
    results.run("fault_injection" + mode, main)
