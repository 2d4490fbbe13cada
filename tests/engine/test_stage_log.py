"""Each stage's log file, ``{state_dir}/logs/<stage>.log``: every finished partition once, and a failed
task's traceback as its worker saw it, on the local pool and on Dask; the console keeps its one line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipeline.engine import stage_log
from stages.cli.main import cli


@pytest.fixture
def project(tmp_path, tiny_project) -> Path:
    tiny_project(prepare={"partition_bytes": 400}, executor={"workers": 2}, train=None)
    (tmp_path / "raw" / "b.txt").write_text("\n\n".join(f"Q: who is {i}?\nA: {i} is." for i in range(40)))
    return tmp_path


def lmprep(*args: str):
    return CliRunner().invoke(cli, ["run", *args, "--config", "lmprep.yaml"])


def task_lines(project: Path, stage: str) -> list[str]:
    return [line for line in (project / "state" / "logs" / f"{stage}.log").read_text().splitlines()
            if line.startswith("task ")]


def break_a_file(project: Path) -> None:
    (project / "raw" / "c.txt").write_bytes(b"fine\n\nbroken \xfe\n")


def assert_traceback_in_the_log_only(project: Path, result) -> None:
    """The one console line names the log; the log holds the worker's traceback down to the frame that raised."""
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if not line.startswith("prepare: reusing ")]  # kept ones
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.rstrip().endswith(f"(details in {Path('state/logs/prepare.log')})"), result.stderr
    log = (project / "state" / "logs" / "prepare.log").read_text()
    failed = [line for line in log.splitlines() if line.startswith("task ") and ": FAILED: " in line]
    assert len(failed) == 1 and "c.txt: invalid UTF-8 at byte offset 13" in failed[0], log
    assert "    Traceback (most recent call last):" in log
    assert re.search(r'File ".*reading\.py", line \d+, in decode\n', log), log
    assert log.rstrip().splitlines()[-1].startswith("failed after "), log


def test_a_successful_run_logs_every_partition_once(project):
    assert lmprep("encode").exit_code == 0
    parts = json.loads((project / "out" / "prepared" / "parts.json").read_text())
    expected = sorted(f"{split}-{part['index']:05d}" for split, listed in parts.items() for part in listed
                      if part["documents"])
    encoded = task_lines(project, "encode")
    assert sorted(line.split()[1] for line in encoded) == expected
    assert all(re.search(r": done on \S+ pid \d+ in \d+\.\d\d s; \d+ documents?, [\d,]+ tokens?, \d+ shards?$", line)
               for line in encoded), encoded
    counted = task_lines(project, "tokenizer")
    assert sorted(line.split()[1].rstrip(":") for line in counted) == sorted(
        str(project / "out" / "prepared" / "train" / f"part-{part['index']:05d}.arrow") for part in parts["train"]
        if part["documents"])
    log = (project / "state" / "logs" / "encode.log").read_text().splitlines()
    assert log[0].startswith("# lmprep: stage 'encode', started ")
    assert "config: lmprep.yaml" in log and "reason: never run" in log
    assert "executor: local process pool of 2 workers" in log
    assert log[-1].startswith("finished after ") and log[-1].endswith(
        f"({len(expected)} tasks done, 0 failed, 0 storage requests retried)")


def test_the_tokenizer_stage_logs_the_seconds_of_its_phases(project):
    assert lmprep("tokenizer").exit_code == 0
    log = (project / "state" / "logs" / "tokenizer.log").read_text()
    phases = re.findall(r"^phase: (\w+) .* in \d+\.\d\d s \(\d+\.\d\d s CPU in the driver\)$", log, flags=re.MULTILINE)
    assert phases == ["counting", "merging", "writing"], log


def test_a_timed_block_that_fails_logs_no_phase(tmp_path):
    path = tmp_path / "stage.log"
    with pytest.raises(ValueError), stage_log.recording(path, stage="s", header={}, warn=print):
        with stage_log.timed("done"):
            pass
        with stage_log.timed("broken"):
            raise ValueError("no")
    lines = path.read_text().splitlines()
    assert [line.split(" in ")[0] for line in lines if line.startswith("phase: ")] == ["phase: done"], lines


def test_a_failed_task_on_the_local_pool_has_its_traceback_in_the_log_not_on_the_console(project):
    break_a_file(project)
    assert_traceback_in_the_log_only(project, lmprep("prepare"))


def test_a_failure_outside_the_tasks_names_no_log(project):
    (project / "raw" / "a.txt").write_text("")
    (project / "raw" / "b.txt").write_text("")
    result = lmprep("prepare")
    assert result.exit_code == 2 and "details in" not in result.stderr, result.stderr
    log = (project / "state" / "logs" / "prepare.log").read_text()
    assert "FAILED" not in log and "\nerror: 0 documents kept" in log, log


def test_on_dask_a_map_reduce_logs_every_partition_and_a_failed_task_its_traceback(project):
    pytest.importorskip("distributed")
    dask = ("--executor", "dask", "--set", "executor.address=local")
    assert lmprep("tokenizer", *dask).exit_code == 0
    parts = json.loads((project / "out" / "prepared" / "parts.json").read_text())
    counted = task_lines(project, "tokenizer")  # a map-reduce: its leaves' results stay on the cluster
    assert len(counted) == sum(1 for part in parts["train"] if part["documents"]) > 1
    assert len({line.split()[1] for line in counted}) == len(counted)
    assert all(re.search(r": done on worker tcp://127\.0\.0\.1:\d+ in \d+\.\d\d s; [\d,]+ entries$", line)
               for line in counted), counted
    break_a_file(project)
    assert_traceback_in_the_log_only(project, lmprep("prepare", *dask))


def test_a_log_that_cannot_be_written_is_a_warning_and_the_stage_goes_on(project):
    (project / "state").mkdir()
    (project / "state" / "logs").write_text("a file where the logs' directory belongs")
    break_a_file(project)
    result = lmprep("prepare")
    assert result.exit_code == 2 and "details in" not in result.stderr, result.stderr
    assert "warning: could not write the stage log state/logs/prepare.log (" in result.stdout, result.stdout
    (project / "raw" / "c.txt").unlink()
    result = lmprep("prepare")
    assert result.exit_code == 0 and "warning: could not write the stage log" in result.stdout, result.output
