"""Two runs at once: the second waits for the first (saying so), or with --no-wait fails with one line."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipeline.engine.runner import Pipeline, Stage
from stages.cli.main import cli

WAITING = re.compile(r"^waiting for the run of PID (\d+) \(started \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\) to finish$", re.M)


@pytest.fixture
def project(tiny_project) -> Path:
    return tiny_project(tokenizer=None, encode=None, train=None)


@pytest.fixture
def holder(project):
    """Another process in the middle of a run in the project's state dir, until its stdin closes."""
    script = textwrap.dedent("""
        import sys
        from pathlib import Path
        from pipeline.engine.runner import Pipeline, Stage

        def hold():
            print("running", flush=True)
            sys.stdin.read()
            Path("held.txt").write_text("done")

        Pipeline([Stage("hold", (), ("held.txt",), (), hold)], param_value=lambda key: None, state_dir="state").run()
    """)
    process = subprocess.Popen([sys.executable, "-c", script], cwd=project, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline() == "running\n"
    yield process
    process.stdin.close()
    process.stdout.close()
    assert process.wait() == 0


def lmprep_process(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "stages", *args, "--config", "lmprep.yaml"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_no_wait_fails_at_once_naming_the_running_process(project, holder):
    result = CliRunner().invoke(cli, ["run", "--no-wait", "--config", "lmprep.yaml"])
    assert result.exit_code == 2
    assert re.fullmatch(rf"error: another lmprep run \(PID {holder.pid} \(started [0-9: -]+\)\) is running in "
                        r"this directory; wait for it to finish \(the lock state/run.lock is released when that "
                        r"process exits\)\n", result.stderr), result.stderr
    assert not (project / "out").exists()


def test_a_run_waits_for_the_one_in_progress(project, holder):
    log: list[str] = []

    def note(line: str) -> None:
        log.append(line)
        if line.startswith("waiting for"):
            holder.stdin.close()  # the first run ends once the second is waiting for it

    stage = Stage("upper", ("raw/a.txt",), ("upper.txt",), (),
                  lambda: (project / "upper.txt").write_text((project / "raw" / "a.txt").read_text().upper()))
    assert Pipeline([stage], param_value=lambda key: None, state_dir="state", log=note).run() == ["upper"]
    assert WAITING.match(log[0]) and WAITING.match(log[0])[1] == str(holder.pid)
    assert holder.wait() == 0 and (project / "held.txt").read_text() == "done"


def test_two_concurrent_runs_both_succeed(project, holder):
    """Both start while a third holds the lock, so both wait; then one runs prepare, the other finds it done."""
    runs = [lmprep_process("run", "prepare") for _ in range(2)]
    for run in runs:
        waiting = run.stdout.readline()
        assert WAITING.match(waiting) and WAITING.match(waiting)[1] == str(holder.pid)
    holder.stdin.close()
    outputs = [run.communicate() for run in runs]
    assert [run.returncode for run in runs] == [0, 0], outputs
    stdouts = sorted(stdout for stdout, _ in outputs)
    assert "running 'prepare': never run" in stdouts[1] and "'prepare' is up to date" in stdouts[0]
    assert (project / "out" / "prepared" / "stats.json").exists()
