"""Atomic outputs: temp + rename for files and directories, recovery after a crash."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.engine import atomic

ANY_TEXT = st.text(st.characters(blacklist_categories=()), max_size=8)  # lone surrogates included
JSON_SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | ANY_TEXT
JSON_VALUES = st.recursive(JSON_SCALARS, lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
                           | st.dictionaries(ANY_TEXT, inner, max_size=4), max_leaves=30)


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


def test_a_file_named_without_a_directory_is_written_in_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    atomic.write_text("out.txt", "new")
    atomic.link_file("out.txt", "link.txt")
    assert sorted(os.listdir(tmp_path)) == ["link.txt", "out.txt"] and (tmp_path / "link.txt").read_text() == "new"


def test_a_failed_link_leaves_the_previous_file_and_no_temporary(tmp_path):
    atomic.write_text(tmp_path / "out.txt", "old")
    with pytest.raises(FileNotFoundError):
        atomic.link_file(tmp_path / "missing.txt", tmp_path / "out.txt")
    assert os.listdir(tmp_path) == ["out.txt"] and (tmp_path / "out.txt").read_text() == "old"


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


def dead_pid() -> int:
    """The pid of a process that has exited."""
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(child.stdout)


def test_only_this_targets_temporaries_of_dead_writers_are_removed(tmp_path):
    dead = dead_pid()
    orphans = [f".out.txt.tmp-{dead}-abc", ".out.txt.tmp-legacy", f".out.txt.tmp-{10**30}-x"]
    kept = [f".out.txt.tmp-{os.getpid()}-live", f".other.txt.tmp-{dead}-abc", "keep.txt"]
    for name in [*orphans, *kept]:
        (tmp_path / name).write_text("partial")
    (tmp_path / f".out.txt.tmp-{dead}-dir").mkdir()
    atomic.remove_orphaned_temporaries(tmp_path / "out.txt")
    assert sorted(os.listdir(tmp_path)) == sorted(kept)


def test_temporaries_are_named_after_their_target_and_writer(tmp_path):
    with atomic.atomic_path(tmp_path / "out.txt") as tmp:
        assert tmp.name.startswith(f".out.txt.tmp-{os.getpid()}-")
    with atomic.atomic_dir(tmp_path / "shards") as staging:
        assert staging.name.startswith(f".shards.tmp-{os.getpid()}-")


def test_a_writer_that_replaces_the_temporary_still_gives_the_usual_permissions(tmp_path, umask_022):
    """safetensors writes a private (0600) file of its own over the temporary."""
    path = tmp_path / "checkpoint.safetensors"
    with atomic.atomic_path(path) as tmp:
        tmp.unlink()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT, 0o600)
        os.write(fd, b"weights")
        os.close(fd)
    assert path.stat().st_mode & 0o777 == 0o644


def test_json_spells_a_name_that_is_not_utf8_as_escapes_and_reads_it_back(tmp_path):
    name = os.fsdecode(b"caf\xe9-\xff.txt")  # lone surrogates in Python
    atomic.write_json(tmp_path / "x.json", {name: "日本", "é": 1})
    text = (tmp_path / "x.json").read_text("utf-8")
    assert '"caf\\udce9-\\udcff.txt": "日本"' in text and '"é": 1' in text  # other characters stay as they are
    assert json.loads(text) == {name: "日本", "é": 1}


def test_json_written_entry_by_entry_is_the_json_of_the_whole_mapping(tmp_path):
    """The hash cache is written an entry at a time (its text is never held whole): the same bytes."""
    mapping = {os.fsdecode(b"caf\xe9.txt"): [1, 2, 3, 4, "ab"], "s3://b/k": {"z": 1, "a": [None, "é"]}, "": 0}
    atomic.write_json(tmp_path / "whole.json", mapping, indent=None)
    atomic.write_json_entries(tmp_path / "entries.json", sorted(mapping.items()))
    assert (tmp_path / "entries.json").read_bytes() == (tmp_path / "whole.json").read_bytes()
    atomic.write_json_entries(tmp_path / "empty.json", [])
    assert (tmp_path / "empty.json").read_text("utf-8") == "{}\n"


def test_json_is_written_as_it_is_encoded_the_same_bytes_as_its_text(tmp_path):
    """The lock of a stage with 100,000 raw files is some 10 MB of indented JSON, which was joined whole (its
    pieces held three times that) and encoded once more before it was written: it is written as it is encoded,
    holding the sorted entries of one mapping at a time (a pointer pair per entry, less than their text)."""
    import tracemalloc

    name = os.fsdecode(b"caf\xe9")  # a lone surrogate, escaped as it is written
    deps = {f"raw/{number:06d}-{name}.txt": f"{number:064x}" for number in range(20_000)}
    lock = {"version": 1, "stages": {"prepare": {"deps": deps, "outs": {"out": "ab"}, "code_version": 3}}}
    for indent in (2, None):
        tracemalloc.start()
        try:
            atomic.write_json(tmp_path / "lock.json", lock, indent=indent)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        text = (tmp_path / "lock.json").read_text("utf-8")
        assert text == atomic.dumps_json(lock, indent=indent) + "\n"
        assert peak < len(text), f"{peak:,} bytes held to write {len(text):,}"  # 5 times it, joined; a sorted list


@settings(max_examples=400, deadline=None)
@given(value=JSON_VALUES, indent=st.sampled_from([None, 0, 2, 4]))
def test_json_is_the_json_modules_text_sorted_and_indented(value, indent):
    """The indented text is built without json's (pure Python) indented encoder, to the same characters;
    a lone surrogate, its own escape."""
    separators = (",", ": ") if indent is not None else (",", ":")
    expected = json.dumps(value, sort_keys=True, ensure_ascii=False, indent=indent, separators=separators,
                          allow_nan=False)
    expected = "".join(f"\\u{ord(c):04x}" if "\ud800" <= c <= "\udfff" else c for c in expected)
    assert atomic.dumps_json(value, indent=indent) == expected


def test_json_of_what_the_json_module_writes_by_itself_or_refuses():
    class Count(int):
        pass

    assert atomic.dumps_json({10: [Count(3), 1.5], 2: "x"}) == '{\n  "2": "x",\n  "10": [\n    3,\n    1.5\n  ]\n}'
    with pytest.raises(ValueError, match="Out of range"):
        atomic.dumps_json({"a": [float("nan")]})
