"""An encode whose output is in object storage (a real S3 API: moto's server, s3fs as the client) that fails
or is killed keeps the shards its tasks finished; the next run writes only the missing ones, after checking
the checksums of those it takes, and commits the same bytes as a run never interrupted."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import lmprep_in_cwd as lmprep
from conftest import lmprep_process, put_corpus, wait_until, write_store_config

from pipeline.engine import storage
from pipeline.errors import DataError
from pipeline.shards import corpus

pytest.importorskip("s3fs")
pytestmark = pytest.mark.slow  # about 50 s of encodes on the store killed and resumed: the tier CI runs second

FAILING_PART = "train-00004"


@pytest.fixture
def project(s3, tmp_path, monkeypatch) -> Path:
    """Eight raw files of one partition each on S3, and the shards there too (the rest is local)."""
    put_corpus(s3, files=8)
    write_store_config(tmp_path, raw=s3.url("raw/*.jsonl.gz"), shards=s3.url("shards"))
    config = tmp_path / "lmprep.yaml"
    config.write_text(config.read_text().replace("partition_bytes: 2000", "partition_bytes: 1")
                      .replace("shard_tokens: 500", "shard_tokens: 200"))
    monkeypatch.chdir(tmp_path)
    assert lmprep("run", "tokenizer").exit_code == 0
    return tmp_path


def committed_shards(s3) -> dict[str, bytes]:
    root = storage.committed(s3.url("shards"))
    return {name: storage.read_bytes(f"{root}/{name}") for name in storage.list_files(root)}


def records(s3) -> list[str]:
    s3.fs.invalidate_cache()
    return sorted(path.rsplit("/", 1)[-1] for path in s3.fs.glob(f"{s3.bucket}/shards.partial/*.done.json"))


def reused(stderr: str) -> tuple[int, int]:
    found = re.search(r"encode: reusing (\d+) of (\d+) parts that an interrupted run finished", stderr)
    assert found, stderr
    return int(found[1]), int(found[2])


@pytest.fixture
def reference(s3, project) -> dict[str, bytes]:
    """The committed shards of an encode never interrupted."""
    assert lmprep("run", "encode").exit_code == 0
    return committed_shards(s3)


def fail_one_part(monkeypatch) -> None:
    """Make the task of FAILING_PART fail (in the forked worker too); the others encode as usual."""
    real = corpus.encode_part

    def encode_part(job):
        if job.prefix == FAILING_PART:
            raise DataError("the store went away")
        return real(job)

    encode_part.__module__, encode_part.__qualname__ = real.__module__, real.__qualname__
    monkeypatch.setattr(corpus, "encode_part", encode_part)


def test_a_failed_remote_encode_writes_only_the_missing_shards(s3, reference, monkeypatch):
    with monkeypatch.context() as patch:
        fail_one_part(patch)
        failed = lmprep("run", "encode", "--force")
    assert failed.exit_code == 2 and f"partition {FAILING_PART}" in failed.stderr, failed.output
    assert committed_shards(s3) == reference  # the previous commit stands
    kept = records(s3)
    assert kept and f"{FAILING_PART}.done.json" not in kept
    resumed = lmprep("run", "encode", "--force")
    assert resumed.exit_code == 0, resumed.output
    done, parts = reused(resumed.stderr)
    assert done == len(kept) < parts  # the tasks running beside the failed one finished, the others were cancelled
    assert committed_shards(s3) == reference
    assert not storage.holds_anything(s3.url("shards.partial"))


def test_a_damaged_remote_shard_is_encoded_again(s3, reference, monkeypatch):
    with monkeypatch.context() as patch:
        fail_one_part(patch)
        assert lmprep("run", "encode", "--force").exit_code == 2
    kept = records(s3)
    shard = sorted(s3.fs.glob(f"{s3.bucket}/shards.partial/{kept[0].removesuffix('.done.json')}-*.arrow"))[0]
    data = bytearray(s3.fs.cat_file(shard))
    data[len(data) // 2] ^= 0xFF
    s3.fs.pipe_file(shard, bytes(data))
    resumed = lmprep("run", "encode", "--force")
    assert resumed.exit_code == 0, resumed.output
    assert reused(resumed.stderr)[0] == len(kept) - 1
    assert committed_shards(s3) == reference


def test_a_killed_remote_encode_resumes_with_the_shards_its_tasks_committed(s3, project, reference, hanging_runs):
    run = hanging_runs(project, "pipeline.shards.corpus", "encode_part", "run", "encode", "--force",
                       condition="args[-1].prefix == 'train-00000'")
    wait_until(lambda: len(records(s3)) >= 3, "no other part finished")
    run.kill()
    finished = len(records(s3))
    rerun = lmprep_process(project, "run", "encode", "--force", "--no-wait")
    assert rerun.returncode == 0, rerun.stderr
    done, parts = reused(rerun.stderr)
    assert done == finished < parts
    assert committed_shards(s3) == reference
