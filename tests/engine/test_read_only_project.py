"""A project that cannot be written (a read-only mount, no write permission): a run with nothing to do succeeds
without writing, and one that must run a stage fails in one line before it starts."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import files_under, lmprep_environment, lmprep_process, make_project, tiny_config

# A read-only view of the project: as root, whom permissions do not stop, a read-only bind mount of it onto
# itself in a mount namespace of the command's own; otherwise the permissions taken away for the command.
MOUNTED = 'mount --bind -o ro "$0" "$0" && cd "$0" && exec "$@"'


def read_only(project: Path, *args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "stages", *args, "--config", "lmprep.yaml"]
    if os.geteuid() != 0:
        subprocess.run(["chmod", "-R", "a-w", str(project)], check=True)
        try:
            return subprocess.run(command, cwd=project, env=lmprep_environment(), capture_output=True, text=True,
                                  timeout=120)
        finally:
            subprocess.run(["chmod", "-R", "u+w", str(project)], check=True)
    return subprocess.run(["unshare", "--mount", "sh", "-c", MOUNTED, str(project), *command],
                          env=lmprep_environment(), capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    """The tiny project after a whole run, made once for the module (each test gets a copy), and whether a
    read-only view of it can be made here."""
    project = make_project(tmp_path_factory.mktemp("ran"), tiny_config())
    assert lmprep_process(project, "run").returncode == 0
    if os.geteuid() == 0:
        probe = subprocess.run(["unshare", "--mount", "sh", "-c", MOUNTED, str(project), "sh", "-c",
                                "! touch probe 2>/dev/null"], capture_output=True) if shutil.which("unshare") else None
        if probe is None or probe.returncode != 0 or (project / "probe").exists():
            pytest.skip("running as root without a mount namespace, so nothing here can be made read-only")
    return project


@pytest.fixture
def finished(ran, tmp_path):
    """A copy of the run project, a test's own, whose hash cache a ``status`` has saved as the run did for the
    original: the cache keys on inodes and change times, which a copy's files have new."""
    project = Path(shutil.copytree(ran, tmp_path / "project", symlinks=True))
    assert lmprep_process(project, "status").returncode == 0
    return project


def test_an_up_to_date_run_succeeds_without_writing(finished):
    before = files_under(finished)
    result = read_only(finished, "run")
    assert result.returncode == 0, result.stderr
    assert "error" not in result.stderr and "Traceback" not in result.stderr
    assert result.stdout.splitlines() == [f"'{stage}' is up to date" for stage in ("prepare", "tokenizer", "encode",
                                                                                   "train")]
    assert files_under(finished) == before
    assert read_only(finished, "status").returncode == 0


@pytest.mark.parametrize("args, reason", [
    (("run", "--set", "train.steps=3"), "'train' must run (param train.steps changed 2 → 3)"),
    (("run", "encode", "--force"), "'encode' must run (forced)"),
])
def test_a_run_that_must_write_fails_in_one_line_before_the_stage(finished, args, reason):
    before = files_under(finished)
    result = read_only(finished, *args)
    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if not line.startswith("warning: ")]
    assert errors == [f"error: {reason}, but the state dir state cannot be written "
                      f"({'read-only file system' if os.geteuid() == 0 else 'permission denied'}); make it writable, "
                      "or run where the project can be written"]
    assert files_under(finished) == before
