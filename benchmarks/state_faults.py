"""Faults of state and input rather than of processes: forged completion records, damaged checkpoint companions,
non-regular files among inputs and outputs, link loops, runaway settings, a duplicated config section, a
hash cache that is not one, a glob of the whole file system, a run cache inside an output through a link, a
gzip bomb (under an address-space limit), and Ctrl-C as the command starts.

    python benchmarks/fault_injection.py --state [--copies 1] [--seed 0]

A reference run of the whole pipeline gives every output's hash; each case then starts from a copy of that
project, applies its fault, runs its commands (each with a deadline of 120 s: past it, a hang) and, for
faults lmprep should recover from, a plain ``lmprep run`` whose outputs must be the reference's (else a
silent wrong output). Every command must exit 0, or 2 with one ``error:`` line, print no traceback and not be
killed for memory.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONFIG = """\
data:
  sources:
    - {glob: "raw/**/questions.txt", separator: blank_line}
    - {glob: "raw/**/facts.txt", separator: line}
    - {glob: "raw/**/*.jsonl.gz", field: text}
prepare: {output_dir: out/prepared, partition_bytes: 100000}
tokenizer: {output: out/tokenizer/tokenizer.json, vocab_size: 512, workers: 2}
encode: {output_dir: out/shards, shard_tokens: 50000, workers: 2}
train: {output_dir: out/ckpt, steps: 10, eval_every: 10, batch_size: 4, context: 32, dim: 16}
executor: {workers: 2}
state_dir: state
"""
DEADLINE = 120


def command(project: Path, *args: str, timeout: float = DEADLINE, memory: int | None = None) -> dict[str, object]:
    """``lmprep ARGS`` in ``project``; ``memory``: the address space each of its processes may take, in bytes."""
    limit = None if memory is None else (lambda: resource.setrlimit(resource.RLIMIT_AS, (memory, memory)))
    process = subprocess.Popen([sys.executable, "-m", "stages", *args, "--config", "lmprep.yaml"], cwd=project,
                               env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True, preexec_fn=limit)
    try:
        out, err = process.communicate(timeout=timeout)
        hung = False
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        hung = True
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    clean_exit = process.returncode == 0 or (process.returncode == 2 and len(errors) == 1)
    killed = process.returncode == -signal.SIGKILL and not hung
    return {"args": args, "hung": hung, "returncode": process.returncode, "traceback": "Traceback" in err,
            "clean_exit": clean_exit and not hung, "error": errors[-1] if errors else "", "stderr": err,
            "memory": killed or "MemoryError" in err or "out of memory" in err}


BOMB_MEMORY = 3 << 30  # the address space of each process of a bomb's run: a 2 GiB document held whole passed 8 GB


def add_bomb(project: Path) -> None:
    """A .txt.gz of 3 MB inflating to one document of 2 GiB, as a source of its own, with prepare.max_chars."""
    (project / "raw" / "bomb").mkdir()
    member = gzip.compress(b"bomb " * ((1 << 20) // 5), mtime=0)
    (project / "raw" / "bomb" / "bomb.txt.gz").write_bytes(member * 2048)
    config = (project / "lmprep.yaml").read_text().replace(
        "prepare: {", "prepare: {max_chars: 1000000, ").replace(
        "    - {glob: \"raw/**/*.jsonl.gz\", field: text}\n",
        "    - {glob: \"raw/**/*.jsonl.gz\", field: text}\n    - {glob: \"raw/bomb/*.txt.gz\"}\n")
    (project / "lmprep.yaml").write_text(config)


def outputs(project: Path) -> dict[str, str]:
    return {str(path.relative_to(project)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted((project / "out").rglob("*")) if path.is_file() and not path.is_symlink()
            and ".partial" not in str(path.relative_to(project)) and "-unreadable" not in path.parent.name}


def forge(record: Path) -> None:
    """One digit of what the record says its task returned, changed."""
    text = record.read_text()
    at = next(i for i in range(text.index('"result"'), len(text)) if text[i] in "123456789")
    record.write_text(text[:at] + str(int(text[at]) % 9 + 1) + text[at + 1:])


def killed_with_records(project: Path, stage: str, scratch: str) -> None:
    """``run STAGE --force`` killed once its scratch holds a completion record."""
    process = subprocess.Popen([sys.executable, "-m", "stages", "run", stage, "--force", "--config", "lmprep.yaml"],
                               cwd=project, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + DEADLINE
    while not list((project / "out" / scratch).rglob("*.done.json")) and time.monotonic() < deadline:
        time.sleep(0.02)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def odd(path: Path, kind: str) -> None:
    path.unlink()
    if kind == "FIFO":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")


def ctrl_c_at_start(project: Path) -> list[dict[str, object]]:
    found = []
    for delay in (0.0, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3):
        process = subprocess.Popen([sys.executable, "-m", "stages", "status", "--config", "lmprep.yaml"],
                                   cwd=project, env={**os.environ, "PYTHONPATH": str(REPO)},
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(delay)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
        frames = re.findall(r'^  File "([^"]*)"', err, re.MULTILINE)  # Python's own start-up: site, runpy
        interpreter = err.startswith("Fatal Python error: init_import_site") or (
            bool(frames) and all(frame.startswith("<frozen ") for frame in frames))
        found.append({"args": ("status", f"SIGINT at {delay} s"), "hung": False, "returncode": process.returncode,
                      "traceback": "Traceback" in err and not interpreter, "error": "", "stderr": err,
                      "clean_exit": interpreter or process.returncode in (0, 130, -signal.SIGINT),
                      "interpreter": interpreter})
    return found


def cases() -> dict[str, tuple[Callable[[Path], object], tuple[tuple[str, ...], ...], bool]]:
    """name: (fault, commands to run after it, whether a plain run must then give the reference outputs)."""
    found: dict[str, tuple[Callable[[Path], object], tuple[tuple[str, ...], ...], bool]] = {}
    run, status = ("run",), ("status",)
    found["forged prepare record"] = (lambda p: (killed_with_records(p, "prepare", "prepared.partial"), [
        forge(r) for r in (p / "out" / "prepared.partial").glob("*.done.json")]), (run,), True)
    found["forged encode record"] = (lambda p: (killed_with_records(p, "encode", "shards.partial"), [
        forge(r) for r in (p / "out" / "shards.partial").glob("*.done.json")]), (run,), True)
    ckpt = Path("out/ckpt")

    def flip(path: Path) -> None:
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 1
        path.write_bytes(bytes(data))

    found["flipped checkpoint tokenizer.json"] = (lambda p: flip(p / ckpt / "tokenizer.json"),
                                                  (("sample", "--prompt", "the"), run, ("sample", "--prompt", "the")),
                                                  True)
    found["deleted checkpoint tokenizer.json"] = (lambda p: (p / ckpt / "tokenizer.json").unlink(), (run,), True)
    found["truncated metrics.jsonl"] = (lambda p: (p / ckpt / "metrics.jsonl").write_bytes(
        (p / ckpt / "metrics.jsonl").read_bytes()[:-10]), (run,), True)
    for kind in ("FIFO", "link to /dev/zero"):
        for output in ("out/shards/train-00000.arrow", "out/shards/train.manifest.json", "out/prepared/parts.json",
                       "out/ckpt/checkpoint.safetensors"):
            found[f"{kind} as {output}"] = (lambda p, o=output, k=kind: odd(p / o, k), (status, run), True)
        found[f"{kind} matching a glob"] = (lambda p, k=kind: (p / "raw" / "odd").mkdir() or (
            os.mkfifo(p / "raw" / "odd" / "facts.txt") if k == "FIFO"
            else (p / "raw" / "odd" / "facts.txt").symlink_to("/dev/zero")), (status, run), False)
    found["link loop under **"] = (lambda p: (p / "raw" / "loop").symlink_to("."), (status, run), False)
    found["duplicated config section"] = (lambda p: (p / "lmprep.yaml").write_text(
        (p / "lmprep.yaml").read_text() + "train: {steps: 3}\n"), (status,), False)
    found["hash cache holding []"] = (lambda p: (p / "state" / "hashes.json").write_text("[]"), (status, run), True)
    found["prepare.partition_bytes=1"] = (lambda p: None, (("run", "--set", "prepare.partition_bytes=1"),), False)
    buckets = "prepare.steps.0.exact_dedup.buckets=65536"
    found[buckets] = (lambda p: None, (("run", "--set", buckets),), False)
    whole_disk = "data.sources=[{glob: /**/*.txt}]"
    found["a glob of the whole file system"] = (lambda p: None, (("status", "--set", whole_disk),
                                                               ("run", "--set", whole_disk)), False)
    linked = "run_cache_dir=linked/runs"
    found["a run cache inside an output through a link"] = (lambda p: (p / "linked").symlink_to("out/prepared"), (
        ("status", "--set", linked), ("run", "--set", linked)), True)
    found["bomb: a .txt.gz inflating to one 2 GiB document"] = (add_bomb, (("run", "prepare"),), False)
    return found


def main(copies: int, seed: int) -> None:
    with tempfile.TemporaryDirectory(prefix="lmprep-state-faults-") as scratch:
        base = Path(scratch) / "reference"
        for copy in range(copies):
            subprocess.run([sys.executable, str(REPO / "data" / "generate_corpus.py"), "--out",
                            str(base / "raw" / f"copy-{copy}"), "--seed", str(seed + copy)], check=True)
        (base / "lmprep.yaml").write_text(CONFIG)
        first = command(base, "run", timeout=1800)
        assert first["returncode"] == 0, first["stderr"]
        reference = outputs(base)
        print(f"reference run: {len(reference)} output files", flush=True)
        results = []
        for name, (fault, commands, recovers) in cases().items():
            project = Path(scratch) / "case"
            shutil.rmtree(project, ignore_errors=True)
            shutil.copytree(base, project, symlinks=True)
            fault(project)
            memory = BOMB_MEMORY if name.startswith("bomb") else None
            ran = [command(project, *args, memory=memory) for args in commands]
            wrong = False
            if recovers:
                ran.append(command(project, "run"))
                wrong = outputs(project) != reference
            results.append({"name": name, "ran": ran, "wrong": wrong})
            print({"case": name, "wrong output": wrong,
                   "commands": [(" ".join(r["args"]), r["returncode"], r["error"][:100]) for r in ran]}, flush=True)
            for r in ran:
                if r["traceback"] or r["hung"] or not r["clean_exit"]:
                    print(f"--- {name}: {' '.join(r['args'])}:\n{r['stderr'][-2000:]}", flush=True)
        start = ctrl_c_at_start(base)
        results.append({"name": "Ctrl-C at start-up", "ran": start, "wrong": False})
        print({"case": "Ctrl-C at start-up", "outcomes": Counter(r["returncode"] for r in start),
               "in the interpreter's own start-up": sum(r["interpreter"] for r in start)}, flush=True)
    bad = Counter()
    for result in results:
        bad["hangs"] += sum(r["hung"] for r in result["ran"])
        bad["tracebacks"] += sum(r["traceback"] for r in result["ran"])
        bad["exits other than 0, 130 or 2 with one error line"] += sum(not r["clean_exit"] for r in result["ran"])
        bad["silent wrong outputs"] += result["wrong"]
        bad["memory kills"] += sum(bool(r.get("memory")) for r in result["ran"])
    print(f"{len(results)} cases, {sum(len(r['ran']) for r in results)} commands")
    print(", ".join(f"{count} {name}" for name, count in bad.items()))
