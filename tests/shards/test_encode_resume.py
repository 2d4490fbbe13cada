"""An encode that fails or is killed keeps the parts its tasks finished; the next run encodes only the others
and writes the same bytes as a run never interrupted."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import ONE_A_LINE, tiny_config
from conftest import lmprep_in_cwd as lmprep

from pipeline.errors import DataError
from pipeline.shards import corpus

# One of the smallest parts, which start last (the largest start first): with one worker every other part has
# finished when it fails, whatever the timing (the pool stops the queued ones after a failure).
FAILING_PART = "val-00010"


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "a.txt").write_text("\n".join(f"Q: what is {i}? A: it is {i}." for i in range(80)))
    config = tiny_config(data=ONE_A_LINE, prepare={"partition_bytes": 200}, tokenizer={"workers": 1},
                         encode={"shard_tokens": 50, "workers": 1}, executor={"workers": 1}, train=None)
    (tmp_path / "lmprep.yaml").write_text(config)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def shards(project: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted((project / "out" / "shards").iterdir())}


def fail_one_part(monkeypatch) -> None:
    """Make the task of FAILING_PART fail (in the forked worker too); the others encode as usual."""
    real = corpus.encode_part

    def encode_part(job):
        if job.prefix == FAILING_PART:
            raise DataError("the disk went away")
        return real(job)

    encode_part.__module__, encode_part.__qualname__ = real.__module__, real.__qualname__
    monkeypatch.setattr(corpus, "encode_part", encode_part)


def test_a_failed_encode_is_resumed_with_only_the_unfinished_parts_and_the_same_bytes(project, monkeypatch):
    assert lmprep("run", "encode").exit_code == 0
    reference = shards(project)
    with monkeypatch.context() as patch:
        fail_one_part(patch)
        failed = lmprep("run", "encode", "--force")
    assert failed.exit_code == 2 and f"partition {FAILING_PART}" in failed.stderr, failed.output
    assert shards(project) == reference  # the previous output stands
    kept = sorted(path.name for path in (project / "out" / "shards.partial").glob("*.done.json"))
    assert kept and f"{FAILING_PART}.done.json" not in kept
    assert "'encode' is up to date" in lmprep("run", "encode").output  # its previous output is still valid
    resumed = lmprep("run", "encode", "--force")
    assert resumed.exit_code == 0, resumed.output
    found = re.search(r"encode: reusing (\d+) of (\d+) parts that an interrupted run finished", resumed.stderr)
    assert found and int(found[1]) == len(kept) < int(found[2]), resumed.stderr
    assert shards(project) == reference
    assert not (project / "out" / "shards.partial").exists()


def test_parts_of_other_settings_are_not_reused(project, monkeypatch):
    assert lmprep("run", "tokenizer").exit_code == 0
    with monkeypatch.context() as patch:
        fail_one_part(patch)
        assert lmprep("run", "encode").exit_code == 2
    assert list((project / "out" / "shards.partial").glob("*.done.json"))
    other = lmprep("run", "encode", "--set", "encode.shard_tokens=70")
    assert other.exit_code == 0, other.output
    assert "reusing" not in other.stderr and not (project / "out" / "shards.partial").exists()
    assert lmprep("run", "encode", "--force").exit_code == 0  # the same settings from scratch: the same bytes
    resumed_bytes = shards(project)
    assert lmprep("run", "encode", "--force", "--set", "encode.shard_tokens=70").exit_code == 0
    assert lmprep("run", "encode", "--force").exit_code == 0
    assert shards(project) == resumed_bytes


def test_a_damaged_finished_part_is_encoded_again(project, monkeypatch):
    assert lmprep("run", "tokenizer").exit_code == 0
    with monkeypatch.context() as patch:
        fail_one_part(patch)
        assert lmprep("run", "encode").exit_code == 2
    record = sorted((project / "out" / "shards.partial").glob("*.done.json"))[0]
    shard = sorted(record.parent.glob(f"{record.name.removesuffix('.done.json')}-*.arrow"))[0]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    kept = len(list(record.parent.glob("*.done.json")))
    resumed = lmprep("run", "encode")
    assert resumed.exit_code == 0, resumed.output
    assert f"reusing {kept - 1} of " in resumed.stderr


def test_a_forged_completion_record_is_not_reused(project, monkeypatch):
    """One digit changed in a part's record (its token count) would give wrong totals and a manifest its
    own reader refuses: the record's checksum fails, and the part is encoded again."""
    assert lmprep("run", "encode").exit_code == 0
    reference = shards(project)
    with monkeypatch.context() as patch:
        fail_one_part(patch)
        failed = lmprep("run", "encode", "--force")
    assert failed.exit_code == 2 and f"partition {FAILING_PART}" in failed.stderr, failed.output
    records = sorted((project / "out" / "shards.partial").glob("*.done.json"))
    assert records, failed.stderr  # the parts finished before the failing one
    text = records[0].read_text()
    at = re.search(r'"tokens": ?', text).end()
    records[0].write_text(text[:at] + str(int(text[at]) % 9 + 1) + text[at + 1:])
    resumed = lmprep("run", "encode", "--force")
    assert resumed.exit_code == 0, resumed.output
    found = re.search(r"encode: reusing (\d+) of (\d+) parts", resumed.stderr)
    assert found and int(found[1]) == len(records) - 1, resumed.stderr
    assert shards(project) == reference


def test_a_completion_record_is_not_fsynced_and_one_torn_is_not_taken(tmp_path, monkeypatch):
    """A record that a crash of the machine tears costs its task a second run, never a wrong part: it needs no
    fsync of its own (its shards have theirs)."""
    from pipeline.engine import atomic, hashing
    from pipeline.engine.completion import Scratch

    scratch = Scratch.of(tmp_path / "shards")
    (tmp_path / "shards.partial").mkdir()
    (tmp_path / "shards.partial" / "train-00000-00000.arrow").write_bytes(b"ids")
    synced = []
    monkeypatch.setattr(atomic, "_fsync_file", synced.append)
    scratch.save("train-00000", "job", {"train-00000-00000.arrow": hashing.sha256_bytes(b"ids")}, [1])
    assert synced == [] and scratch.finished("train-00000", "job") == ([1],)
    record = tmp_path / "shards.partial" / "train-00000.done.json"
    record.write_bytes(record.read_bytes()[:-20])
    assert scratch.finished("train-00000", "job") is None
