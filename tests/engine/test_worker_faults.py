"""A real ``lmprep run`` killed (SIGKILL) or interrupted (SIGINT) in the middle of a stage's tasks.

Its worker processes die with it, the next run starts at once, a pipe from it closes, and Ctrl-C is
one line with exit status 130. The run is made to stop inside a task: a wrapper replaces one task
function by one that says its process ID and sleeps, then starts the CLI as ``lmprep`` does.
"""

from __future__ import annotations

import os
import select
import signal
import time
from pathlib import Path

import pytest
from conftest import DEADLINE, files_under, running, tiny_config, wait_until
from conftest import lmprep_process as lmprep

# stage -> (module, task function) that the wrapper makes hang
HANGING_TASKS = {"prepare": ("pipeline.data.prepare", "_read_documents"),
                 "encode": ("pipeline.shards.corpus", "encode_part")}


WORKERS = dict(tokenizer={"workers": 2}, encode={"workers": 2}, executor={"workers": 2}, train=None)


@pytest.fixture
def project(tiny_project) -> Path:
    return tiny_project(**WORKERS)


def closes_within(stream, seconds: float) -> bool:
    """Whether every writer of the pipe ``stream`` reads from closes it within ``seconds`` (EOF)."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        if select.select([stream], [], [], left)[0] and not os.read(stream.fileno(), 65536):
            return True
    return False


def outputs_under(directory: Path) -> dict[str, bytes]:
    """The files of the outputs, without the finished tasks' scratch (``<output>.partial``), which a stopped
    run keeps for the next one."""
    return {name: data for name, data in files_under(directory).items() if ".partial/" not in name}


@pytest.fixture
def hanging_run(project, hanging_runs):
    def start(stage: str, only: str = ""):
        if stage == "encode":
            done = lmprep(project, "run", "tokenizer")
            assert done.returncode == 0, done.stderr
        condition = f"args[-1].prefix == {only!r}" if only else "True"
        return hanging_runs(project, *HANGING_TASKS[stage], "run", stage, condition=condition)

    return start


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
    before = {name: data for name, data in run.outputs_before.items() if ".partial/" not in name}
    assert outputs_under(project / "out") == before  # and the staging output is gone


SEVERAL_PARTS = tiny_config(**{**WORKERS, "data": {"sources": [{"glob": "raw/*.txt", "separator": "line"}]},
                                "prepare": {"partition_bytes": 200}})


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
