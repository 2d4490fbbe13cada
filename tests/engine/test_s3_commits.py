"""Outputs in object storage as commits: an interrupted stage keeps the last commit and the work of its
finished tasks, a finished run clears its scratch in bulk, large files go up in parts and come down in one
streamed GET (a real S3 API, moto's server on 127.0.0.1, with s3fs as the client, as in ``test_s3.py``).
"""

from __future__ import annotations

import re

import pytest
from conftest import lmprep_in_cwd as lmprep
from conftest import put_corpus as corpus
from conftest import write_store_config as write_config

from pipeline.engine import storage

pytest.importorskip("s3fs")


@pytest.mark.slow  # about 18 s: a stage on the store run, interrupted and run again
def test_an_interrupted_stage_leaves_the_commit_and_its_finished_tasks_for_the_next_run(s3, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    corpus(s3)
    write_config(tmp_path, raw=s3.url("raw/*.jsonl*"), prepared=s3.url("prepared"))
    config = tmp_path / "lmprep.yaml"  # a partition per file, so the other files' tasks write theirs
    config.write_text(config.read_text().replace("partition_bytes: 2000", "partition_bytes: 1"))
    assert lmprep("run", "prepare").exit_code == 0
    first = storage.committed(s3.url("prepared"))
    listed = storage.list_files(first)

    s3.put("raw/zz-broken.jsonl", b'{"text": "fine"}\n{not json\n')
    failed = lmprep("run", "prepare")
    assert failed.exit_code == 2 and "bad JSON line" in failed.output
    assert storage.committed(s3.url("prepared")) == first and storage.list_files(first) == listed
    s3.fs.invalidate_cache()
    assert {path.rsplit("/", 1)[-1] for path in s3.fs.ls(s3.url("prepared"))} == {  # the failed run's attempt is empty
        first.rsplit("/", 1)[-1], storage.COMMIT_FILE}
    records = {name for name in storage.list_files(s3.url("prepared.partial")) if name.endswith(".done.json")}
    assert {"r0-00000.done.json", "r0-00001.done.json", "r0-00002.done.json"} <= records  # the good files' tasks

    s3.put("raw/zz-broken.jsonl", b'{"text": "fine"}\n')
    resumed = lmprep("run", "prepare")
    assert resumed.exit_code == 0, resumed.output
    found = re.search(r"prepare: reusing (\d+) of (\d+) partitions of round 1 of 2", resumed.stderr)
    assert found and 3 <= int(found[1]) < int(found[2]), resumed.stderr  # the edited file's partitions are redone
    current = storage.committed(s3.url("prepared"))
    assert current != first
    s3.fs.invalidate_cache()
    assert sorted(path.rsplit("/", 1)[-1] for path in s3.fs.ls(s3.url("prepared"))) == [
        current.rsplit("/", 1)[-1], storage.COMMIT_FILE]
    kept = {name for name in storage.list_files(s3.url("prepared.partial")) if name.endswith(".done.json")}
    assert kept and all(name.startswith("r0-") for name in kept)  # the first round alone, for the next run
    assert "kept" not in lmprep("run", "prepare").output  # up to date: the lock points at this commit



def test_a_local_output_dir_is_uploaded_and_committed_only_when_its_block_ends(tmp_path):
    import fsspec

    fs, url = fsspec.filesystem("memory"), "memory://lmprep-local-out/out"
    with storage.local_output_dir(url) as staging:
        (staging / "sub").mkdir()
        (staging / "sub" / "a.bin").write_bytes(b"first")
    with pytest.raises(RuntimeError), storage.local_output_dir(url) as staging:
        (staging / "sub").mkdir()
        (staging / "sub" / "a.bin").write_bytes(b"second")
        raise RuntimeError("interrupted")
    assert storage.read_bytes(f"{storage.committed(url)}/sub/a.bin") == b"first"
    copy = storage.download_dir(url, tmp_path / "copy")
    assert (copy / "sub" / "a.bin").read_bytes() == b"first" and list(copy.rglob("*.bin")) == [copy / "sub" / "a.bin"]
    fs.rm("/lmprep-local-out", recursive=True)


def test_a_finished_run_clears_its_remote_scratch_in_a_bulk_delete_not_a_request_pair_per_file(s3):
    """prepare keeps its first round's records and removes the rest of its scratch: on S3 each file was removed
    with a listing and a delete of its own (at 1 GB: 2,354 listings and 585 deletes), now in bulk deletes."""
    from pipeline.engine.completion import Scratch

    scratch = Scratch.of(s3.url("out/prepared"))
    for number in range(60):
        s3.put(f"out/prepared.partial/work/r1-candidates-{number:05d}.arrow", b"x")
    s3.put("out/prepared.partial/work/r0-candidates-00000.arrow", b"kept")
    scratch.save("r0-00000", "job", {"work/r0-candidates-00000.arrow": "digest"})
    before = s3.counter.counts.copy()
    scratch.keep_only(["r0-00000"])
    requests = s3.counter.counts - before
    assert sorted(storage.list_files(scratch.location)) == ["kept.json", "r0-00000.done.json",
                                                            "work/r0-candidates-00000.arrow"]
    assert sum(requests.values()) <= 6, requests  # the record, a listing, one bulk delete, kept.json


def test_a_large_file_goes_up_in_parts_and_comes_down_in_one_streamed_get(s3, tmp_path):
    """s3fs by default read a file below 100 MiB whole into one PUT, sent larger ones 10 parts of 50 MiB at a time,
    and fetched a file of 50 MiB or more in 50 MiB ranges 10 at a time, all held in memory (export's 560 MB
    ``train.bin`` took about 1 GB of the driver's heap): an upload now sends parts of ``UPLOAD_PART_BYTES``,
    a download streams one GET to its file."""
    import os

    data = os.urandom(52 << 20)
    (tmp_path / "big.bin").write_bytes(data)
    s3.counter.largest_body = 0
    storage.put_file(tmp_path / "big.bin", s3.url("big.bin"))
    assert s3.counter.largest_body <= storage.UPLOAD_PART_BYTES
    before = s3.counter.object_reads
    with storage.local_copy(s3.url("big.bin")) as copy:
        assert copy.read_bytes() == data
    assert s3.counter.object_reads - before == 1
