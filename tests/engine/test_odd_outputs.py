"""A FIFO or a link to /dev/zero in place of an output or a scratch file: ``status`` and ``run`` never block on
it. Hashing it would (a FIFO's ``open`` waits for a writer, /dev/zero never ends): it is never read, the
output counts as modified, and ``run`` writes it again."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from conftest import lmprep_environment, make_project
from conftest import lmprep_in_cwd as lmprep

from pipeline.engine import hashing
from pipeline.engine.completion import Scratch

CONFIG = """\
data: {sources: [{glob: "raw/*.txt", separator: blank_line}]}
prepare: {output_dir: out/prepared, val_fraction: 0.2}
tokenizer: {output: out/tokenizer.json, vocab_size: 300}
encode: {output_dir: out/shards}
train: {output_dir: out/ckpt, steps: 2, eval_every: 2, eval_batches: 1, batch_size: 2, context: 8, dim: 8}
state_dir: state
"""


def odd(path, kind: str) -> None:
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")


def lmprep_bounded(project, *args: str) -> subprocess.CompletedProcess:
    """``lmprep ARGS`` as its own process, failing the test if it takes a minute (it would block for ever)."""
    return subprocess.run([sys.executable, "-m", "stages", *args, "--config", "lmprep.yaml"], cwd=project,
                          env=lmprep_environment(), capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def every_stage_ran(tmp_path_factory):
    """The project after a run of every stage, made once for the module: each test changes a copy of it."""
    project = make_project(tmp_path_factory.mktemp("every-stage-ran"), CONFIG)
    ran = lmprep_bounded(project, "run")
    assert ran.returncode == 0, ran
    return project


@pytest.mark.slow  # eight runs of the whole pipeline's stages, about 50 s of CPU: the tier CI runs second
@pytest.mark.parametrize("kind", ["fifo", "zero"])
@pytest.mark.parametrize("output", ["shards/train-00000.arrow", "shards/train.manifest.json", "prepared/parts.json",
                                    "ckpt/checkpoint.safetensors"])
def test_an_output_replaced_by_a_fifo_or_dev_zero_never_blocks_status_or_run(tmp_path, every_stage_ran, output, kind):
    shutil.copytree(every_stage_ran, tmp_path, symlinks=True, dirs_exist_ok=True)
    assert lmprep_bounded(tmp_path, "status").returncode == 0  # the copy is up to date as the original was
    odd(tmp_path / "out" / output, kind)
    status = lmprep_bounded(tmp_path, "status")
    assert "Traceback" not in status.stderr and "was modified" in status.stdout + status.stderr, status
    ran = lmprep_bounded(tmp_path, "run")
    assert ran.returncode == 0 and "Traceback" not in ran.stderr, ran
    assert (tmp_path / "out" / output).is_file() and not (tmp_path / "out" / output).is_symlink()
    again = lmprep_bounded(tmp_path, "status")
    assert again.returncode == 0 and "was modified" not in again.stdout + again.stderr, again


@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_a_scratch_file_replaced_by_a_fifo_or_dev_zero_makes_its_task_run_again(tmp_path, kind):
    scratch = Scratch(tmp_path / "out.partial", "out.partial")
    (tmp_path / "out.partial" / "p").mkdir(parents=True)
    (tmp_path / "out.partial" / "p" / "shard").write_bytes(b"tokens")
    scratch.save("p", "job", {"p/shard": hashing.sha256_bytes(b"tokens")}, {"tokens": 3})
    assert scratch.finished("p", "job") == ({"tokens": 3},)
    odd(tmp_path / "out.partial" / "p" / "shard", kind)
    assert scratch.finished("p", "job") is None


@pytest.fixture
def encoded(tmp_path, monkeypatch):
    make_project(tmp_path, CONFIG)
    monkeypatch.chdir(tmp_path)
    assert lmprep("run", "encode", "--config", "lmprep.yaml").exit_code == 0
    return tmp_path


@pytest.mark.parametrize("stage, scratch", [("prepare", "prepared.partial"), ("encode", "shards.partial")])
def test_a_regular_file_in_place_of_the_scratch_directory_is_one_line(encoded, stage, scratch):
    shutil.rmtree(encoded / "out" / scratch, ignore_errors=True)  # what a finished prepare kept
    (encoded / "out" / scratch).write_text("not a directory")
    result = lmprep("run", stage, "--force", "--config", "lmprep.yaml")
    assert result.exit_code == 2, result.output
    assert result.output.splitlines()[-1] == (f"error: out/{scratch} is not a directory, so it cannot keep the work "
                                              "of the tasks that finish; remove it and run again")


def test_a_hash_cache_holding_a_list_is_ignored_by_status_and_run(encoded):
    (encoded / "state" / "hashes.json").write_text("[]")
    status = lmprep("status", "--config", "lmprep.yaml")
    assert status.exit_code == 0 and "encode" in status.output, status.output
    result = lmprep("run", "encode", "--config", "lmprep.yaml")
    assert result.exit_code == 0 and "'encode' is up to date" in result.output, result.output


def test_an_export_where_nothing_can_be_created_is_one_line(encoded):
    result = lmprep("run", "export", "--set", "export.output_dir=/proc/self/export", "--config", "lmprep.yaml")
    assert result.exit_code == 2, result.output
    assert result.output.splitlines()[-1] == ("error: /proc/self/export: cannot be written: no file can be created in "
                                              "/proc/self (no such file or directory); choose another place for "
                                              "this output")


def test_the_scratch_of_an_interrupted_forced_run_is_named_by_status_and_run(encoded):
    """A killed ``run --force`` leaves ``<output>.partial`` beside an output that is still up to date: status
    and run said nothing of it."""
    (encoded / "out" / "shards.partial" / "train-00000").mkdir(parents=True)
    (encoded / "out" / "shards.partial" / "train-00000" / "shard.arrow").write_bytes(b"x" * 1234)
    note = ("out/shards.partial holds 1,234 bytes that an interrupted run left (a run of the stage takes what it "
            "can of it; `lmprep clean` removes it)")
    status = lmprep("status", "--config", "lmprep.yaml")
    assert status.exit_code == 0 and f"warning: {note}" in status.output, status.output
    ran = lmprep("run", "encode", "--config", "lmprep.yaml")
    assert ran.exit_code == 0 and f"'encode' is up to date; {note}" in ran.output, ran.output
    assert lmprep("clean", "--config", "lmprep.yaml").exit_code == 0
    assert not (encoded / "out" / "shards.partial").exists()
