"""A prepare that fails or is killed keeps what its tasks finished; the next run redoes only the unfinished
partitions (and what depends on them) and writes the same bytes as a run never interrupted."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import ONE_A_LINE, files_under, lmprep_process, tiny_config, wait_until
from conftest import lmprep_in_cwd as lmprep

from pipeline.data import prepare
from pipeline.errors import DataError
from stages.cli.main import cli

FAILING = 3  # the partition whose task fails


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    (tmp_path / "raw").mkdir()
    for name in ("a", "b"):  # b repeats some of a's documents: the de-duplication step marks them
        lines = (f"Q: what is {i % 40}? A: it is {i}." for i in range(60))
        (tmp_path / "raw" / f"{name}.txt").write_text("\n".join(lines))
    config = tiny_config(data=ONE_A_LINE, prepare={"partition_bytes": 300}, tokenizer={"workers": 1},
                         encode={"shard_tokens": 50, "workers": 1}, executor={"workers": 2}, train=None)
    (tmp_path / "lmprep.yaml").write_text(config)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def prepared(project: Path) -> dict[str, bytes]:
    return files_under(project / "out" / "prepared")


def reused(stderr: str) -> list[tuple[int, int, str]]:
    """(reused, of, round) for each 'reusing N of M partitions' line."""
    return [(int(found[1]), int(found[2]), found[3]) for found in
            re.finditer(r"prepare: reusing (\d+) of (\d+) partitions( of round \d of \d)?", stderr)]


def fail_partition(monkeypatch, method: str) -> None:
    """Make ``Round.<method>`` fail for partition FAILING (in the forked workers too)."""
    real = getattr(prepare.Round, method)

    def failing(self, index, *args):
        if index == FAILING:
            raise DataError("the disk went away")
        return real(self, index, *args)

    monkeypatch.setattr(prepare.Round, method, failing)


@pytest.fixture
def reference(project) -> dict[str, bytes]:
    """The prepared files of a run never interrupted (the project is left as if it never ran)."""
    assert lmprep("run", "prepare").exit_code == 0
    files = prepared(project)
    assert lmprep("clean").exit_code == 0
    return files


def kept_the_first_round_alone(project: Path, partitions: int = 12) -> bool:
    """Whether a finished run left in the scratch only the first round's records (and their files)."""
    records = {path.name for path in (project / "out" / "prepared.partial").glob("*.done.json")}
    return records == {f"r0-{index:05d}.done.json" for index in range(partitions)}


def finished(project: Path, round_: int) -> int:
    """The partitions of a round (counted from 0) whose completion record the scratch holds."""
    return len(list((project / "out" / "prepared.partial").glob(f"r{round_}-0*.done.json")))


@pytest.mark.parametrize("method, round_", [("_write_candidates", 0), ("_write_rejected", 1)])
def test_a_failed_prepare_redoes_only_the_unfinished_partitions(project, reference, monkeypatch, method, round_):
    """A task fails in the first round (the de-duplication step never ran) or in the last; the tasks
    running beside it finish, those not started are cancelled."""
    with monkeypatch.context() as patch:
        fail_partition(patch, method)
        failed = lmprep("run", "prepare")
    assert failed.exit_code == 2 and "the disk went away" in failed.stderr, failed.output
    assert not (project / "out" / "prepared").exists()  # nothing was swapped in
    kept = finished(project, round_)
    assert 0 < kept < 12
    resumed = lmprep("run", "prepare")
    assert resumed.exit_code == 0, resumed.output
    expected = [(12, 12, " of round 1 of 2")] if round_ else []
    assert reused(resumed.stderr) == [*expected, (kept, 12, f" of round {round_ + 1} of 2")], resumed.stderr
    assert ("reusing the marks of exact_dedup" in resumed.stderr) == (round_ == 1)
    assert prepared(project) == reference
    assert kept_the_first_round_alone(project)


def test_an_edited_raw_file_redoes_its_partitions_and_every_round_after_the_dedup_step(project, monkeypatch):
    with monkeypatch.context() as patch:
        fail_partition(patch, "_write_rejected")
        assert lmprep("run", "prepare").exit_code == 2
    raw = project / "raw" / "b.txt"
    raw.write_text(raw.read_text().replace("it is 59.", "it is fifty-nine."))
    resumed = lmprep("run", "prepare")
    assert resumed.exit_code == 0, resumed.output
    counts = reused(resumed.stderr)  # b.txt's partitions are read again, a.txt's taken
    assert len(counts) == 1 and counts[0][2] == " of round 1 of 2" and 0 < counts[0][0] < 12, resumed.stderr
    assert "marks" not in resumed.stderr  # the step read b.txt's new keys
    edited = prepared(project)
    assert lmprep("clean").exit_code == 0
    assert lmprep("run", "prepare").exit_code == 0
    assert prepared(project) == edited


def test_other_settings_reuse_nothing_and_clean_removes_the_scratch(project, monkeypatch):
    with monkeypatch.context() as patch:
        fail_partition(patch, "_write_rejected")
        assert lmprep("run", "prepare").exit_code == 2
    assert list((project / "out" / "prepared.partial").glob("*.done.json"))
    assert lmprep("clean").exit_code == 0
    assert not (project / "out" / "prepared.partial").exists()
    with monkeypatch.context() as patch:
        fail_partition(patch, "_write_rejected")
        assert lmprep("run", "prepare").exit_code == 2
    other = lmprep("run", "prepare", "--set", "prepare.seed=7")
    assert other.exit_code == 0, other.output
    assert "reusing" not in other.stderr and kept_the_first_round_alone(project)


def test_a_damaged_work_file_is_written_again(project, reference, monkeypatch):
    with monkeypatch.context() as patch:
        fail_partition(patch, "_write_candidates")
        assert lmprep("run", "prepare").exit_code == 2
    kept = finished(project, 0)
    candidates = sorted((project / "out" / "prepared.partial" / "work").glob("r0-candidates-*.arrow"))[0]
    candidates.write_bytes(candidates.read_bytes()[:-10])
    resumed = lmprep("run", "prepare")
    assert resumed.exit_code == 0, resumed.output
    assert reused(resumed.stderr) == [(kept - 1, 12, " of round 1 of 2")], resumed.stderr
    assert prepared(project) == reference


def test_a_killed_prepare_resumes_with_the_partitions_its_tasks_finished(project, reference, hanging_runs):
    records = project / "out" / "prepared.partial"
    run = hanging_runs(project, "pipeline.data.prepare", "_read_documents", "run", "prepare",
                       condition="args[0].index == 5")
    wait_until(lambda: len(list(records.glob("r0-*.done.json"))) == 11, "the other partitions did not finish")
    run.kill()
    rerun = lmprep_process(project, "run", "prepare", "--no-wait")
    assert rerun.returncode == 0, rerun.stderr
    assert reused(rerun.stderr) == [(11, 12, " of round 1 of 2")], rerun.stderr
    assert prepared(project) == reference


def forge_a_digit(record: Path) -> None:
    """Change one digit of what a completion record says its task returned (its files keep their checksums)."""
    text = record.read_text()
    start = text.index('"result"')
    at = next(i for i in range(start, len(text)) if text[i] in "123456789")
    record.write_text(text[:at] + str(int(text[at]) % 9 + 1) + text[at + 1:])


@pytest.mark.parametrize("method, round_", [("_write_candidates", 0), ("_write_rejected", 1)])
def test_a_forged_completion_record_is_not_reused(project, reference, monkeypatch, method, round_):
    """One digit changed in a record's result would go into parts.json and stats.json unchecked: the
    record's own checksum fails, and its partition runs again."""
    with monkeypatch.context() as patch:
        fail_partition(patch, method)
        assert lmprep("run", "prepare").exit_code == 2
    kept = finished(project, round_)
    record = sorted((project / "out" / "prepared.partial").glob(f"r{round_}-0*.done.json"))[0]
    forge_a_digit(record)
    resumed = lmprep("run", "prepare")
    assert resumed.exit_code == 0, resumed.output
    assert reused(resumed.stderr)[-1] == (kept - 1, 12, f" of round {round_ + 1} of 2"), resumed.stderr
    assert prepared(project) == reference


@pytest.mark.parametrize("steps", [None, []], ids=["exact_dedup", "no_steps"])
def test_a_finished_prepare_keeps_its_first_round_and_an_edit_reads_only_the_edited_files_partitions(project,
                                                                                                     steps):
    """With a de-duplication step the step and the round after it run again for every partition; without
    one the unchanged partitions' parts are taken as they are. Either way, the bytes of a run from scratch."""
    if steps is not None:
        (project / "lmprep.yaml").write_text(tiny_config(
            data=ONE_A_LINE, prepare={"partition_bytes": 300, "steps": steps}, tokenizer={"workers": 1},
            encode={"shard_tokens": 50, "workers": 1}, executor={"workers": 2}, train=None))
    rounds = " of round 1 of 2" if steps is None else None
    assert lmprep("run", "prepare").exit_code == 0
    assert kept_the_first_round_alone(project)
    assert "interrupted run left" not in lmprep("status").output  # kept for the next run: no leftover
    raw = project / "raw" / "b.txt"
    raw.write_text(raw.read_text().replace("it is 59.", "it is fifty-nine."))
    rerun = lmprep("run", "prepare")
    assert rerun.exit_code == 0, rerun.output
    [(taken, of, round_)] = reused(rerun.stderr)  # a.txt's partitions taken, b.txt's read again
    assert 0 < taken < of == 12 and round_ == rounds, rerun.stderr
    assert "that an earlier run finished (out/prepared.partial)" in rerun.stderr
    edited = prepared(project)
    assert lmprep("clean").exit_code == 0 and not (project / "out" / "prepared.partial").exists()
    assert lmprep("run", "prepare").exit_code == 0
    assert prepared(project) == edited


def test_a_small_corpus_is_cut_for_every_worker_and_the_same_whatever_their_number(tiny_project, tmp_path):
    """Three files of 1.5 MB each with the default partition_bytes (64 MB), which made them one partition on one
    core: partitions of 2 MiB, so a task for each of a few cores, and the outputs of one worker and of two are
    the same bytes."""
    outputs = []
    for workers in (1, 2):
        root = tiny_project(tmp_path / f"w{workers}", data=ONE_A_LINE, executor={"workers": workers})
        (root / "raw" / "a.txt").unlink()
        for name in "abc":
            lines = (f"{name} {i}: a line of text, {i * 7 % 1000} and {i % 13}." for i in range(37_000))
            (root / "raw" / f"{name}.txt").write_text("\n".join(lines))
        result = CliRunner().invoke(cli, ["run", "prepare", "--config", str(root / "lmprep.yaml")])
        assert result.exit_code == 0, result.output
        outputs.append(files_under(root / "out" / "prepared"))
    parts = json.loads(outputs[0]["parts.json"])
    assert len(parts["train"]) >= 2 and outputs[0] == outputs[1]
