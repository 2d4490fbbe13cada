"""The export and stats stages writing to object storage: a real S3 API (moto's server on 127.0.0.1), s3fs as
the client."""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import pytest
from conftest import fresh_bucket
from conftest import lmprep_in_cwd as lmprep
from conftest import put_corpus as corpus
from conftest import write_store_config as write_config

from pipeline.engine import storage
from pipeline.errors import PipelineError
from pipeline.shards import export
from pipeline.shards.format import ShardSet, ShardWriter
from pipeline.shards.manifest import ShardStamp
from pipeline.shards.origins import Origins

pytest.importorskip("s3fs")


class Folder:
    """A local stand-in for the store, for :func:`put_corpus`: the same keys as files under ``root``."""

    def __init__(self, root):
        self.root = root

    def put(self, key: str, data: bytes) -> None:
        (self.root / key).parent.mkdir(parents=True, exist_ok=True)
        (self.root / key).write_bytes(data)


@pytest.fixture(scope="module")
def local_project(tmp_path_factory):
    """A project run to its exports and stats on local disk, once for the module."""
    root = tmp_path_factory.mktemp("local")
    corpus(Folder(root))
    write_config(root, raw="raw/*.jsonl.gz", export="out/export", stats="out/stats")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)
        result = lmprep("run", "export", "stats")
    assert result.exit_code == 0, result.output
    return root


def moved_to_store(local_root, root, monkeypatch, **urls: str) -> None:
    """Copy the local project to ``root`` with the given outputs (``shards``, ``export``, ``stats``) at URLs, and
    run it there to its exports and stats: the moved stages run again."""
    shutil.copytree(local_root, root)
    monkeypatch.chdir(root)
    write_config(root, raw="raw/*.jsonl.gz", **{"export": "out/export", "stats": "out/stats", **urls})
    result = lmprep("run", "export", "stats")
    assert result.exit_code == 0, result.output


@pytest.fixture(scope="module")
def store(s3_server):
    with pytest.MonkeyPatch.context() as patch, fresh_bucket(s3_server, patch) as bucket:
        yield bucket


@pytest.fixture(scope="module")
def remote_project(store, local_project, tmp_path_factory):
    """The local project with its shards, exports and stats moved to S3, once for the tests that read it: export
    and stats read the shards from the store."""
    root = tmp_path_factory.mktemp("remote") / "project"
    with pytest.MonkeyPatch.context() as patch:
        moved_to_store(local_project, root, patch, shards=store.url("shards"), export=store.url("export"),
                       stats=store.url("stats"))
    return root


@pytest.fixture
def in_remote_project(remote_project, monkeypatch):
    monkeypatch.chdir(remote_project)
    return remote_project


def committed_files(url: str) -> dict[str, bytes]:
    committed = storage.committed(url)
    return {name: storage.read_bytes(f"{committed}/{name}") for name in storage.list_files(committed)}


def local_files(directory) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in directory.iterdir()}


def test_exports_and_stats_on_s3_are_the_files_of_the_local_run(store, local_project, remote_project):
    exported = committed_files(store.url("export"))
    assert sorted(exported) == ["meta.pkl", "train.bin", "train.bin.json", "train.parquet", "train.parquet.json",
                                "val.bin", "val.bin.json", "val.parquet", "val.parquet.json"]
    assert exported == local_files(local_project / "out" / "export")
    stats = committed_files(store.url("stats"))
    assert sorted(stats) == ["doc_lengths.png", "stats.json"]
    assert stats == local_files(local_project / "out" / "stats")  # the plot too: PNGs carry no date


def test_the_exported_parquet_reads_from_the_store_with_pyarrow_and_s3fs(store, local_project, remote_project):
    import pyarrow.parquet as pq

    committed = storage.committed(store.url("export"))
    remote = pq.read_table(f"{committed.removeprefix('s3://')}/train.parquet", filesystem=store.fs)
    local = pq.read_table(local_project / "out" / "export" / "train.parquet")
    assert remote.column("input_ids").to_pylist() == local.column("input_ids").to_pylist()
    assert len(remote) > 10


def test_lmprep_stats_prints_the_committed_stats_and_names_the_plot_url(store, local_project, in_remote_project,
                                                                        monkeypatch):
    remote = lmprep("stats")
    assert remote.exit_code == 0, remote.output
    plot = f"{storage.committed(store.url('stats'))}/doc_lengths.png"
    assert remote.output.endswith(f"histogram of document lengths → {plot}\n")
    # a later attempt that never committed is not read
    store.put("stats/.attempt-99991231T235959-ffffffff/stats.json", b"not json")
    assert lmprep("stats").output == remote.output
    monkeypatch.chdir(local_project)
    local = lmprep("stats").output
    assert local.splitlines()[:-1] == remote.output.splitlines()[:-1] and "train:" in local


def test_status_over_unchanged_remote_outputs_reads_no_object_and_sees_a_new_commit(store, in_remote_project):
    before = store.counter.object_reads
    status = lmprep("status").output
    assert status.count("up to date") == 5, status
    assert lmprep("status").output == status
    assert store.counter.object_reads == before

    commit = store.fs.cat_file(store.url(f"export/{storage.COMMIT_FILE}"))
    record = json.loads(commit)
    record["files"]["train.parquet"]["size"] += 1
    store.put(f"export/{storage.COMMIT_FILE}", json.dumps(record).encode())
    assert f"output '{store.url('export')}' was modified" in lmprep("status").output
    store.put(f"export/{storage.COMMIT_FILE}", commit)
    assert lmprep("status").output == status


def test_clean_removes_the_remote_exports_and_stats_their_commits_first(s3, local_project, tmp_path, monkeypatch):
    moved_to_store(local_project, tmp_path / "project", monkeypatch, export=s3.url("export"), stats=s3.url("stats"))
    fs, _ = storage._filesystem(s3.url("export"))  # lmprep's own client (its deadlines are options of its own)
    remove = fs.rm

    def commits_only(path, **kwargs):
        if not path.endswith(storage.COMMIT_FILE):
            raise PipelineError("interrupted")
        remove(path, **kwargs)

    with monkeypatch.context() as patch:  # a clean cut short after deleting the first commit
        patch.setattr(fs, "rm", commits_only)
        assert lmprep("clean").output == "error: interrupted\n"
    assert f"output '{s3.url('export')}' is missing" in lmprep("status").output
    assert s3.fs.find(s3.url("export"))  # the files no commit lists any more

    result = lmprep("clean")
    assert result.exit_code == 0, result.output
    for stage in ("export", "stats"):
        assert f"removed {s3.url(stage)}\n" in result.output
        assert not s3.fs.exists(s3.url(stage))
    status = lmprep("status").output
    for stage in ("export", "stats"):
        assert f"{stage}: stale\n" in status and f"    output '{s3.url(stage)}' is missing\n" in status, status


def test_an_interrupted_export_leaves_the_previous_commit_and_the_next_run_removes_its_files(s3, local_project,
                                                                                              tmp_path, monkeypatch):
    moved_to_store(local_project, tmp_path / "project", monkeypatch, export=s3.url("export"))
    first = storage.committed(s3.url("export"))
    listed = committed_files(s3.url("export"))

    def interrupted_after(function):
        def interrupting(*args, **kwargs):
            function(*args, **kwargs)
            raise PipelineError("interrupted")
        return interrupting

    with monkeypatch.context() as patch:  # the exporter stops after writing one file
        patch.setitem(export.WRITERS, "parquet", interrupted_after(export.write_parquet))
        assert lmprep("export", "--force").output.endswith("running 'export': forced\nerror: interrupted\n")
    with monkeypatch.context() as patch:  # the upload stops after one file
        patch.setattr(storage, "put_file", interrupted_after(storage.put_file))
        assert lmprep("export", "--force").output.endswith("running 'export': forced\nerror: interrupted\n")
    assert storage.committed(s3.url("export")) == first and committed_files(s3.url("export")) == listed
    names = {path.rsplit("/", 1)[-1] for path in s3.fs.ls(s3.url("export"), refresh=True)}
    assert len(names) == 3  # the commit, its attempt and the interrupted upload's attempt
    assert "export: up to date\n" in lmprep("status").output

    assert lmprep("export", "--force").exit_code == 0
    current = storage.committed(s3.url("export"))
    assert current != first and committed_files(s3.url("export")) == listed
    assert sorted(path.rsplit("/", 1)[-1] for path in s3.fs.ls(s3.url("export"), refresh=True)) == [
        current.rsplit("/", 1)[-1], storage.COMMIT_FILE]


def test_an_output_url_inside_another_stage_output_url_is_refused_in_one_line(s3, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "a.txt").write_text("one document")
    write_config(tmp_path, raw="raw/*.txt", shards=s3.url("out/shards"), export=s3.url("out/shards/export"),
                 stats=s3.url("out/stats"))
    result = lmprep("status")
    assert result.exit_code == 2
    assert result.output == (f"error: encode.output_dir '{s3.url('out/shards')}' contains export.output_dir "
                             f"'{s3.url('out/shards/export')}'; lmprep replaces an output as a whole, so outputs "
                             "must not overlap inputs, other outputs, the state dir or the config file\n")


@pytest.mark.slow  # about 13 s: the pipeline and its exports on the store
def test_a_shard_set_read_from_the_store_is_memory_mapped_not_held_in_the_heap(s3, tmp_path):
    """Each remote shard was read into a bytes object and kept, so export's driver held every shard at once (1.8 GB
    of heap for 1 GB of text); now each is downloaded to a temporary file and mapped, and the export is the
    local one's, byte for byte."""
    import gc
    import tracemalloc

    import numpy as np

    shard_tokens, shards = 500_000, 8
    shard_bytes = 2 * shard_tokens  # uint16
    stamp = ShardStamp(split="train", tokenizer_fingerprint="f" * 64, vocab_size=1000,
                       special_ids={"bos": None, "eos": 999}, prepared_fingerprint="p" * 64)
    writer = ShardWriter(tmp_path / "shards", stamp, shard_tokens=shard_tokens)
    ids = np.random.default_rng(0).integers(0, 1000, shard_tokens * shards, dtype=np.uint32)
    writer.write(ids, np.arange(0, len(ids) + 1, shard_tokens // 4), Origins.numbered(shards * 4))
    writer.close()
    with storage.output_dir(s3.url("shards")) as attempt:
        storage.upload_dir(tmp_path / "shards", attempt)

    ShardSet.open(s3.url("shards"), "train")  # the clients' first requests load their models (megabytes, once)
    tracemalloc.start(64)
    try:
        remote = ShardSet.open(s3.url("shards"), "train")
        gc.collect()
        server = [tracemalloc.Filter(False, f"*/{package}/*", all_frames=True) for package in ("moto", "werkzeug")]
        held = sum(stat.size for stat in tracemalloc.take_snapshot().filter_traces(server).statistics("filename"))
    finally:
        tracemalloc.stop()
    assert len(remote.shards) == shards and held < shard_bytes  # the client's heap, not the server's
    assert remote.shards[0].path == f"{storage.committed(s3.url('shards'))}/train-00000.arrow"

    tokenizer = SimpleNamespace(vocab_size=1000, fingerprint="f" * 64)
    formats = ["parquet", "megatron"]
    export.export_shards([ShardSet.open(tmp_path / "shards", "train")], tokenizer, tmp_path / "local", formats)
    export.export_shards([remote], tokenizer, tmp_path / "remote", formats)
    assert local_files(tmp_path / "remote") == local_files(tmp_path / "local")
