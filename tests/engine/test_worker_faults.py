"""A real ``lmprep run`` killed (SIGKILL) or interrupted (SIGINT) in the middle of a stage's tasks.

Its worker processes die with it, the next run starts at once, a pipe from it closes, and Ctrl-C is
one line with exit status 130. The run is made to stop inside a task: a wrapper replaces one task
function by one that says its process ID and sleeps, then starts the CLI as ``lmprep`` does.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import make_project, running

REPO = Path(__file__).resolve().parents[2]

CONFIG = """\
data:
  sources:
    - {glob: "raw/*.txt", separator: blank_line}
prepare: {output_dir: out/prepared, val_fraction: 0.2}
tokenizer: {output: out/tokenizer.json, vocab_size: 300, workers: 2}
encode: {output_dir: out/shards, workers: 2}
executor: {workers: 2}
state_dir: state
"""

# stage -> (module, task function) that the wrapper makes hang
HANGING_TASKS = {"prepare": ("pipeline.data.prepare", "_read_rows"),
                 "encode": ("pipeline.shards.corpus", "encode_part")}

WRAPPER = """\
import importlib, os, sys, time

module = importlib.import_module({module!r})

real = getattr(module, {name!r})

def hang(*args):
    if {only!r} and args[-1].prefix != {only!r}:  # the other parts run as usual
        return real(*args)
    print(f"task in pid {{os.getpid()}}", flush=True)
    time.sleep(120)

hang.__module__, hang.__qualname__ = {module!r}, {name!r}  # pickled by that name, found patched in the worker
setattr(module, {name!r}, hang)
sys.argv = ["lmprep", *sys.argv[1:]]
from stages.__main__ import main
main()
"""

DEADLINE = 10.0  # seconds for anything here to happen; a hang fails the test instead of blocking it


@pytest.fixture
def project(tmp_path) -> Path:
    make_project(tmp_path, CONFIG)
    return tmp_path


def environment() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}


def lmprep(project: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stages", *args, "--config", "lmprep.yaml"], cwd=project,
                          env=environment(), capture_output=True, text=True, timeout=60)


def workers_of(pid: int) -> list[int]:
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def files_under(directory: Path) -> dict[str, bytes]:
    return {str(path.relative_to(directory)): path.read_bytes() for path in directory.rglob("*") if path.is_file()}


def closes_within(stream, seconds: float) -> bool:
    """Whether every writer of the pipe ``stream`` reads from closes it within ``seconds`` (EOF)."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        if select.select([stream], [], [], left)[0] and not os.read(stream.fileno(), 65536):
            return True
    return False


class HangingRun:
    """``lmprep run STAGE`` in its own session, stopped inside one of STAGE's tasks."""

    def __init__(self, project: Path, stage: str, only: str = ""):
        module, name = HANGING_TASKS[stage]
        (project / "hang.py").write_text(WRAPPER.format(module=module, name=name, only=only))
        self.outputs_before = files_under(project / "out")
        self.process = subprocess.Popen([sys.executable, "hang.py", "run", stage, "--config", "lmprep.yaml"],
                                        cwd=project, env=environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True, start_new_session=True)
        self.output = self._read_until_a_task_runs()
        self.workers = workers_of(self.process.pid)

    def _read_until_a_task_runs(self) -> list[str]:
        lines: list[str] = []
        while not lines or not lines[-1].startswith("task in pid"):
            line = self.process.stdout.readline()
            assert line, f"the run ended before a task started: {lines} {self.process.stderr.read()}"
            lines.append(line)
        return lines

    def kill_group(self) -> None:
        """Whatever is left of the run, its workers included (they stay in its process group)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(DEADLINE)
        self.process.stdout.close()
        self.process.stderr.close()


@pytest.fixture
def hanging_run(project):
    runs: list[HangingRun] = []

    def start(stage: str, only: str = "") -> HangingRun:
        if stage == "encode":
            done = lmprep(project, "run", "tokenizer")
            assert done.returncode == 0, done.stderr
        runs.append(HangingRun(project, stage, only))
        return runs[-1]

    yield start
    for run in runs:
        run.kill_group()


def wait_until(condition, what: str) -> float:
    """Seconds until ``condition()`` held; fails after DEADLINE."""
    start = time.monotonic()
    while not condition():
        assert time.monotonic() - start < DEADLINE, f"{what} after {DEADLINE:g} s"
        time.sleep(0.05)
    return time.monotonic() - start


@pytest.mark.parametrize("stage", ["prepare", "encode"])
def test_workers_die_with_a_killed_run_and_the_next_run_starts_at_once(project, hanging_run, stage):
    run = hanging_run(stage)
    assert run.workers, "the stage started no worker process"
    run.process.send_signal(signal.SIGKILL)
    assert run.process.wait(DEADLINE) == -signal.SIGKILL
    wait_until(lambda: not any(running(pid) for pid in run.workers), "worker processes still run")
    assert closes_within(run.process.stdout, DEADLINE), "the run's output pipe is still open"
    rerun = lmprep(project, "run", stage, "--no-wait")
    assert rerun.returncode == 0, rerun.stderr
    assert "waiting for" not in rerun.stdout and f"running '{stage}'" in rerun.stdout


@pytest.mark.parametrize("stage", ["prepare", "encode"])
def test_ctrl_c_is_one_line_and_exit_130_from_every_process(project, hanging_run, stage):
    run = hanging_run(stage)
    os.killpg(run.process.pid, signal.SIGINT)  # as a terminal does: the driver and its workers
    assert run.process.wait(DEADLINE) == 130
    assert run.process.stderr.read() == "interrupted; the previous outputs are intact\n"
    assert "Traceback" not in run.process.stdout.read()
    wait_until(lambda: not any(running(pid) for pid in run.workers), "worker processes still run")
    assert files_under(project / "out") == run.outputs_before  # and the staging output is gone


SEVERAL_PARTS = CONFIG.replace("separator: blank_line", "separator: line").replace(
    "{output_dir: out/prepared,", "{output_dir: out/prepared, partition_bytes: 200,")


def test_ctrl_c_with_partitions_still_queued_ends_at_once(project, hanging_run):
    """Cancelling queued tasks while the pool cleans up after its killed workers once hung the driver."""
    (project / "lmprep.yaml").write_text(SEVERAL_PARTS)
    run = hanging_run("encode")
    os.killpg(run.process.pid, signal.SIGINT)
    assert run.process.wait(DEADLINE) == 130
    assert run.process.stderr.read() == "interrupted; the previous outputs are intact\n"


def test_a_killed_encode_resumes_with_the_parts_its_tasks_finished(project, hanging_run):
    (project / "lmprep.yaml").write_text(SEVERAL_PARTS)
    run = hanging_run("encode", only="train-00000")
    records = project / "out" / "shards.partial"
    wait_until(lambda: len(list(records.glob("*.done.json"))) >= 3, "no other part finished")
    run.process.send_signal(signal.SIGKILL)
    assert run.process.wait(DEADLINE) == -signal.SIGKILL
    finished = len(list(records.glob("*.done.json")))
    rerun = lmprep(project, "run", "encode", "--no-wait")
    assert rerun.returncode == 0, rerun.stderr
    assert f"encode: reusing {finished} of " in rerun.stderr
    resumed = files_under(project / "out" / "shards")
    assert lmprep(project, "run", "encode", "--force").returncode == 0
    assert files_under(project / "out" / "shards") == resumed
