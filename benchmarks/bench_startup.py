"""What the commands that run no stage cost: ``lmprep --version``, ``status`` and a no-op ``run`` and ``make``.

    python benchmarks/bench_startup.py [--repeats 7] [--smoke]

Copies the shipped project (the tracked ``configs/`` and ``data/raw/``) under benchmarks/.data, runs it once,
then runs each command in a fresh process ``--repeats`` times, in rounds of every command in turn (so that a
slow spell of the machine hits them alike), and prints the CPU seconds (user + system, the command and every
process it waited for, from ``wait4``) and the peak RSS of each, best and median: on a shared machine the best
is the cost of the command, the median what the load made of it. The first row is the interpreter starting
with nothing to do (``python -c pass``), measured in the same rounds: this machine's speed moves by more than
half within an hour, and that row shows the spell a run was taken in. The goal is under
0.3 s of CPU for each but the last row: ``status`` with a stale ``train`` stage (``--set train.steps=…``),
whose warning reads the checkpoint (docs/performance.md). The no-op ``make`` is this checkout's Makefile on
the copy (``CONFIG=``), skipped when its install step is stale (it would reinstall, not measure a no-op).
``status (frozen tokenizer)`` is the shipped project with ``tokenizer.path`` set to a byte tokenizer of
``--frozen-vocab`` IDs (trained once on 6 MB of ``bench_native.py``'s English), its outputs beside the first's:
every command reads a frozen tokenizer's settings from its file.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import results

ROOT = results.ROOT
LMPREP = str(Path(sys.executable).with_name("lmprep"))
PROJECT = ("configs", "data/raw")  # what the shipped project is, as the checked docs copy it
GOAL_S = 0.3


def copy_project(target: Path) -> Path:
    """The tracked files of the shipped project under ``target``; returns its config."""
    shutil.rmtree(target, ignore_errors=True)
    tracked = subprocess.run(["git", "ls-files", *PROJECT], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    for name in tracked:
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target / name)
    return target / "configs" / "default.yaml"


def measured(command: list[str], cwd: Path) -> tuple[float, int]:
    """CPU seconds and peak RSS (bytes) of one run of ``command``, its waited-for children included."""
    process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    errors = process.stderr.read().decode() if process.stderr else ""
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({process.returncode}): {errors[-2000:]}")
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024


def make_is_a_no_op() -> bool:
    """Whether the Makefile's install step is up to date (``make -q`` answers without running anything)."""
    return subprocess.run(["make", "-q", "-C", str(ROOT), ".venv/.installed"], capture_output=True).returncode == 0


def frozen_config(config: Path, vocab_size: int, megabytes: float) -> Path:
    """A config beside ``config`` that extends it with a frozen tokenizer of ``vocab_size`` IDs and writes its
    outputs and state under ``frozen/``; a short training run. The tokenizer is made in a child process: a
    command forked from this one would count its memory in the peak RSS."""
    made = subprocess.run([sys.executable, __file__, "--frozen-child", f"{vocab_size},{megabytes}"],
                          capture_output=True, text=True, check=True)
    frozen = config.with_name("frozen.yaml")
    frozen.write_text(f"extends: {config.name}\noutput_root: ../frozen\nrun_cache_dir: null\n"
                      f"tokenizer: {{path: {made.stdout.strip()}, vocab_size: null}}\ntrain: {{steps: 2}}\n",
                      encoding="utf-8")
    return frozen


def frozen_tokenizer(vocab_size: int, megabytes: float) -> Path:
    import bench_native

    texts = bench_native.unique_lines(bench_native.english_documents(), megabytes)
    return bench_native.tokenizer_file("english", texts, vocab_size)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--frozen-vocab", type=int, default=65536, help="IDs of the frozen tokenizer's row")
    parser.add_argument("--frozen-child", help=argparse.SUPPRESS)
    results.add_arguments(parser)
    args = parser.parse_args()
    if args.frozen_child:
        vocab_size, megabytes = args.frozen_child.split(",")
        print(frozen_tokenizer(int(vocab_size), float(megabytes)))
        return
    if args.smoke:
        args.frozen_vocab = 300
    project = results.data_dir() / "startup"
    config = copy_project(project)
    if args.smoke:  # a short first run: the shipped config, training 2 steps
        config = config.with_name("smoke.yaml")
        config.write_text("extends: default.yaml\ntrain:\n  steps: 2\n")
    subprocess.run([LMPREP, "run", "--config", str(config)], cwd=project, check=True, capture_output=True)
    frozen = frozen_config(config, args.frozen_vocab, 0.2 if args.smoke else 6.0)
    subprocess.run([LMPREP, "run", "--config", str(frozen)], cwd=project, check=True, capture_output=True)
    commands = {
        "python -c pass (the interpreter alone)": [sys.executable, "-c", "pass"],
        "lmprep --version": [LMPREP, "--version"],
        "lmprep status (up to date)": [LMPREP, "status", "--config", str(config)],
        "lmprep run (nothing stale)": [LMPREP, "run", "--config", str(config)],
        "make (nothing stale)": ["make", "-s", "-C", str(ROOT), f"CONFIG={config}"],
        f"lmprep status (frozen tokenizer, {args.frozen_vocab:,} IDs)": [LMPREP, "status", "--config", str(frozen)],
        "lmprep status (train stale)": [LMPREP, "status", "--config", str(config), "--set", "train.steps=1000"],
    }
    if not make_is_a_no_op():
        print("make skipped: its install step (.venv/.installed) is stale, so make would reinstall")
        del commands["make (nothing stale)"]
    repeats = 1 if args.smoke else args.repeats
    print(f"{repeats} runs each; CPU s = user + system of the command and its children; goal < {GOAL_S} s CPU")
    print(f"| command | CPU s best | CPU s median | peak RSS MB | under {GOAL_S} s |")
    print("| --- | --- | --- | --- | --- |")
    runs: dict[str, list[tuple[float, int]]] = {label: [] for label in commands}
    for _ in range(repeats):
        for label, command in commands.items():
            runs[label].append(measured(command, project))
    for label, measures in runs.items():
        cpu = [seconds for seconds, _ in measures]
        rss = max(peak for _, peak in measures) / 2**20
        verdict = "" if label.startswith("python") else "yes" if min(cpu) < GOAL_S else "no"
        print(f"| {label} | {min(cpu):.3f} | {statistics.median(cpu):.3f} | {rss:.0f} | {verdict} |")


if __name__ == "__main__":
    results.run("bench_startup", main)
