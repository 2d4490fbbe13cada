"""Atomic outputs: temp + rename for files and directories, recovery after a crash."""

from __future__ import annotations

import os

import pytest

from pipeline import atomic


@pytest.fixture
def umask_022():
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def test_write_replaces_the_file_with_the_usual_permissions(tmp_path, umask_022):
    path = tmp_path / "sub" / "out.json"
    atomic.write_json(path, {"b": 1, "a": "é"})
    assert path.read_text("utf-8") == '{\n  "a": "é",\n  "b": 1\n}\n'
    assert path.stat().st_mode & 0o777 == 0o644
    assert os.listdir(path.parent) == ["out.json"]


def test_a_failed_write_leaves_the_previous_file(tmp_path):
    path = tmp_path / "out.txt"
    atomic.write_text(path, "old")
    with pytest.raises(RuntimeError), atomic.atomic_path(path) as tmp:
        tmp.write_text("half")
        raise RuntimeError("crash")
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["out.txt"]


def test_directory_swap_is_all_or_nothing(tmp_path, umask_022):
    target = tmp_path / "shards"
    with atomic.atomic_dir(target) as staging:
        (staging / "a").write_text("1")
    assert target.stat().st_mode & 0o777 == 0o755
    with pytest.raises(KeyboardInterrupt), atomic.atomic_dir(target) as staging:
        (staging / "b").write_text("2")
        raise KeyboardInterrupt
    assert sorted(os.listdir(target)) == ["a"] and os.listdir(tmp_path) == ["shards"]


def test_a_swap_killed_between_its_two_renames_is_undone(tmp_path):
    target = tmp_path / "shards"
    with atomic.atomic_dir(target) as staging:
        (staging / "a").write_text("1")
    os.replace(target, tmp_path / ".shards.old")  # the crash: old moved away, new not yet in place
    atomic.recover_dir(target)
    assert (target / "a").read_text() == "1" and not (tmp_path / ".shards.old").exists()


def test_temporaries_of_killed_writers_are_removed(tmp_path):
    (tmp_path / ".out.txt.tmp-abc").write_text("partial")
    (tmp_path / ".shards.tmp-xyz").mkdir()
    (tmp_path / "keep.txt").write_text("kept")
    atomic.remove_stale_temporaries(tmp_path)
    assert os.listdir(tmp_path) == ["keep.txt"]
