"""A full disk (or quota, read-only file system, too long a name) is one line, exit 2, outputs intact;
commands that only read never fail because the optional hash cache cannot be saved."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FakeTokenizer, tiny_config
from conftest import lmprep_in_cwd as lmprep

from pipeline.engine.hashing import HashCache
from pipeline.engine.runner import Pipeline, Stage
from pipeline.model import checkpoint
from pipeline.model.bigram import BigramLM, ModelConfig

ONE_WORKER = dict(tokenizer={"workers": 1}, encode={"workers": 1})


def no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.fixture
def project(tiny_project) -> Path:
    return tiny_project(**ONE_WORKER)


def test_status_and_a_no_op_run_warn_once_when_the_hash_cache_cannot_be_saved(tmp_path, monkeypatch):
    (tmp_path / "in.txt").write_text("hello")
    log: list[str] = []

    def pipeline() -> Pipeline:
        stages = [Stage(name, ("in.txt",), (f"{name}.txt",), (),
                        lambda name=name: (tmp_path / f"{name}.txt").write_text(name))
                  for name in ("a", "b")]
        return Pipeline(stages, param_value=lambda key: None, state_dir="state", root=tmp_path, log=log.append)

    pipeline().run()
    os.utime(tmp_path / "in.txt")  # a new stamp: the cache has something to save
    monkeypatch.setattr(HashCache, "save", no_space)
    assert [s.stale for s in pipeline().status()] == [False, False]
    assert pipeline().run() == []
    warnings = [line for line in log if line.startswith("warning:")]
    assert warnings == [f"warning: could not save the hash cache {tmp_path / 'state' / 'hashes.json'} "
                        "(no space left on device); files will be hashed again next time"] * 2  # once per command


def test_a_full_disk_while_writing_an_output_is_one_line_naming_it(project, monkeypatch):
    assert lmprep("run", "tokenizer").exit_code == 0
    before = (project / "out" / "tokenizer.json").read_bytes()
    monkeypatch.setattr(os, "fsync", no_space)
    result = lmprep("run", "tokenizer", "--set", "tokenizer.vocab_size=280")
    assert result.exit_code == 2
    assert result.stderr == "error: out/tokenizer.json: no space left on device; free some space and run again\n"
    assert (project / "out" / "tokenizer.json").read_bytes() == before


def test_a_full_disk_while_writing_a_checkpoint_is_an_os_error_naming_it(tmp_path, monkeypatch):
    """safetensors reports a failed write as its own error type with the OS error number in the text."""
    def full(tensors, filename, metadata=None):
        from safetensors import SafetensorError
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr("safetensors.torch.save_file", full)
    tokenizer = FakeTokenizer(merges=[])
    with pytest.raises(OSError) as raised:
        checkpoint.save_checkpoint(tmp_path / "run", model=BigramLM(ModelConfig(vocab_size=256, dim=2)),
                                   tokenizer=tokenizer, step=0, train_config={}, shard_fingerprint=None)
    written = str(tmp_path / "run" / "checkpoint.safetensors")
    assert (raised.value.errno, raised.value.filename) == (errno.ENOSPC, written)


def test_a_name_too_long_is_one_line(project):
    result = lmprep("run", "prepare", "--set", f"prepare.output_dir=out/{'x' * 300}")
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and result.stderr.endswith(": file name too long\n")
    assert result.stderr.startswith("error: ") and f"out/{'x' * 300}.partial" in result.stderr  # the scratch beside it


def test_other_os_errors_keep_their_traceback(project, monkeypatch):
    def broken(*args, **kwargs):
        raise OSError(errno.EBADF, os.strerror(errno.EBADF))

    monkeypatch.setattr(os, "fsync", broken)
    result = lmprep("run", "tokenizer")
    assert result.exit_code == 1 and isinstance(result.exception, OSError)


# -- on a real full file system ----------------------------------------------------------------------

@pytest.fixture
def small_tmpfs(tmp_path) -> Path:
    """A 4 MB tmpfs, when the tests run as root and may mount one."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount_point)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.strip()}")
    yield mount_point
    subprocess.run(["umount", str(mount_point)], check=True)


def lmprep_process(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stages", *args, "--config", "lmprep.yaml"], cwd=cwd,
                          capture_output=True, text=True)


def fill(disk: Path) -> None:
    """Write until the file system is full."""
    with open(disk / "filler", "wb", buffering=0) as handle, pytest.raises(OSError) as full:
        while True:
            handle.write(b"\0" * 4096)
    assert full.value.errno == errno.ENOSPC


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_pipeline_on_a_full_tmpfs(small_tmpfs):
    project = small_tmpfs
    (project / "raw").mkdir()
    (project / "raw" / "a.txt").write_text("\n\n".join(f"Q: what is {i}?\nA: it is {i}." for i in range(200)))
    (project / "lmprep.yaml").write_text(tiny_config(**ONE_WORKER))
    assert lmprep_process(project, "run", "encode").returncode == 0
    outputs = tree_bytes(project / "out")
    fill(project)

    for stage in ("prepare", "tokenizer", "encode"):
        result = lmprep_process(project, "run", stage, "--force")
        assert result.returncode == 2, result.stderr
        errors = "".join(line for line in result.stderr.splitlines(keepends=True)
                         if not line.startswith("prepare: reusing "))  # the first round a finished run kept
        assert errors.count("\n") == 1 and "no space left on device" in errors
        assert errors.startswith("error: out/"), result.stderr
        assert tree_bytes(project / "out") == outputs

    os.utime(project / "raw" / "a.txt")  # the listing of prepare's raw files now has a stamp to save, and cannot
    os.utime(project / "out" / "prepared" / "stats.json")  # nor has the hash cache of the outputs
    for command in (["status"], ["run", "encode"]):
        result = lmprep_process(project, *command)
        assert result.returncode == 0, result.stderr
        assert result.stdout.count("warning: could not save the hash cache") == 1
    assert tree_bytes(project / "out") == outputs
