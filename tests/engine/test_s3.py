"""Raw data and outputs in object storage: a real S3 API (moto's server on 127.0.0.1) with s3fs as the client.

The server counts the requests it answers, so a test can say that ``status`` read no object's body.
"""

from __future__ import annotations

import io
import json

import pytest
from click.testing import CliRunner
from conftest import gz, jsonl
from conftest import lmprep_in_cwd as lmprep
from conftest import put_corpus as corpus
from conftest import write_store_config as write_config

from pipeline.config import SourceConfig
from pipeline.data.sources import TextDecoder, expand_sources, read_documents
from pipeline.engine import storage
from pipeline.errors import StorageError
from stages.cli.main import cli

pytest.importorskip("s3fs")


# --------------------------------------------------------------------------- reading


def test_globs_gzip_jsonl_and_parquet_from_s3(s3):
    import pyarrow as pa
    import pyarrow.parquet as pq

    s3.put("raw/a/one.jsonl.gz", gz(jsonl(["first", "second"])))
    s3.put("raw/b/two.jsonl", jsonl(["third"]).encode())
    s3.put("raw/.hidden/three.jsonl", jsonl(["never"]).encode())
    sink = io.BytesIO()
    pq.write_table(pa.table({"text": [f"row {i}" for i in range(10)]}), sink, row_group_size=3)
    s3.put("raw/c.parquet", sink.getvalue())

    files = expand_sources([SourceConfig(glob=s3.url("raw/**/*.jsonl*")), SourceConfig(glob=s3.url("raw/*.parquet"))])

    assert [file.path for file in files] == [s3.url("raw/a/one.jsonl.gz"), s3.url("raw/b/two.jsonl"),
                                             s3.url("raw/c.parquet")]
    decoder = TextDecoder()
    assert [list(read_documents(file, decoder)) for file in files] == [
        ["first", "second"], ["third"], [f"row {i}" for i in range(10)]]


def test_parquet_row_groups_are_read_in_ranges(s3):
    """A partition of row groups reads its byte ranges, never the whole object."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipeline.data.sources import plan_partitions, read_partition

    sink = io.BytesIO()
    pq.write_table(pa.table({"text": [f"{i} " + "x" * 2000 for i in range(200)]}), sink, row_group_size=20,
                   compression="none")
    s3.put("big.parquet", sink.getvalue())
    files = expand_sources([SourceConfig(glob=s3.url("big.parquet"))])
    partitions = plan_partitions(files, 40_000)
    assert len(partitions) == 10
    before = s3.counter.object_reads
    assert list(read_partition(partitions[3], TextDecoder()))[0].startswith("60 ")
    assert 0 < s3.counter.object_reads - before < 8


def test_small_objects_packed_in_one_partition_cost_one_get_each(s3):
    """Small whole objects are fetched ahead, several at a time, with one GET and no HEAD each."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipeline.data.sources import plan_partitions, read_partition

    sink = io.BytesIO()
    pq.write_table(pa.table({"text": ["row 0", "row 1"]}), sink)
    s3.put("raw/a.jsonl.gz", gz(jsonl(["first", "second"])))
    s3.put("raw/b.parquet", sink.getvalue())
    s3.put("raw/c.txt", b"")
    for index in range(20):
        s3.put(f"raw/d{index:02d}.txt", f"text {index}".encode())
    files = expand_sources([SourceConfig(glob=s3.url("raw/*"))])
    (partition,) = plan_partitions(files, 10_000)
    before = dict(s3.counter.counts)
    documents = list(read_partition(partition, TextDecoder()))
    assert documents == ["first", "second", "row 0", "row 1", "", *(f"text {index}" for index in range(20))]
    requests = {key: count - before.get(key, 0) for key, count in s3.counter.counts.items()}
    assert requests.get(("GET", "object"), 0) == 22 and requests.get(("HEAD", "object"), 0) <= 1  # the empty one


def test_bad_url_missing_bucket_and_missing_credentials_are_storage_errors(s3, monkeypatch):
    import s3fs

    with pytest.raises(StorageError, match="unknown URL protocol 'nosuch'"):
        storage.glob_files("nosuch://x/*.txt", ".")
    with pytest.raises(StorageError, match="s3://no-such-bucket/raw/"):
        storage.glob_files("s3://no-such-bucket/raw/*.txt", ".")
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    s3fs.S3FileSystem.clear_instance_cache()
    with pytest.raises(StorageError, match="credentials"):
        storage.glob_files(s3.url("raw/*.txt"), ".")


# --------------------------------------------------------------------------- the CLI


def test_status_on_an_unchanged_remote_corpus_reads_no_object(s3, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    corpus(s3)
    write_config(tmp_path, raw=s3.url("raw/*.jsonl.gz"))
    assert lmprep("run", "prepare").exit_code == 0
    before, heads = s3.counter.object_reads, s3.counter.counts.get(("HEAD", "object"), 0)
    result = lmprep("status")
    assert "prepare: up to date" in result.output, result.output
    assert s3.counter.object_reads == before
    assert s3.counter.counts.get(("HEAD", "object"), 0) == heads  # the glob's listing identifies every file

    s3.put("raw/part-1.jsonl.gz", gz(jsonl(["changed"])))
    assert f"dependency '{s3.url('raw/part-1.jsonl.gz')}' changed" in lmprep("status").output
    assert s3.counter.object_reads == before


@pytest.mark.parametrize("glob, message", [
    ("s3://no-such-bucket/raw/*.jsonl", "s3://no-such-bucket/raw/*.jsonl: no bucket 'no-such-bucket'"),
    ("nosuch://bucket/raw/*.jsonl", "unknown URL protocol 'nosuch'"),
])
def test_cli_storage_errors_are_one_line_with_exit_2(s3, tmp_path, monkeypatch, glob, message):
    monkeypatch.chdir(tmp_path)
    write_config(tmp_path, raw=glob)
    result = lmprep("status")
    assert result.exit_code == 2
    assert message in result.output and len(result.output.strip().splitlines()) == 1, result.output


# --------------------------------------------------------------------------- outputs in object storage


def test_every_output_on_s3_holds_the_files_of_the_local_run(s3, tmp_path, monkeypatch):
    corpus(s3)
    local_project, remote_project = tmp_path / "local", tmp_path / "remote"
    local_project.mkdir()
    remote_project.mkdir()
    outputs = {"prepared": "prepared", "tokenizer": "tokenizer/tokenizer.json", "shards": "shards", "ckpt": "ckpt",
               "export": "export", "stats": "stats"}
    # both read the same raw files, which every shard row names (the document IDs)
    write_config(local_project, raw=s3.url("raw/*.jsonl.gz"), **{key: f"out/{name}" for key, name in outputs.items()})
    write_config(remote_project, raw=s3.url("raw/*.jsonl.gz"), **{key: s3.url(name) for key, name in outputs.items()})
    monkeypatch.chdir(local_project)
    first = lmprep("run")
    assert first.exit_code == 0, first.output
    monkeypatch.chdir(remote_project)
    result = lmprep("run")
    assert result.exit_code == 0, result.output
    assert not any(path.name != "lmprep.yaml" and path.name != "state" for path in remote_project.iterdir())

    local = local_project / "out"
    for name in ("tokenizer/tokenizer.json", "tokenizer/tokenizer_config.json", "tokenizer/special_tokens_map.json"):
        assert storage.read_bytes(s3.url(name)) == (local / name).read_bytes(), name
    for name in ("shards", "ckpt", "export", "stats"):
        committed = storage.committed(s3.url(name))
        local_files = sorted(path.relative_to(local / name).as_posix() for path in (local / name).rglob("*")
                             if path.is_file())
        assert sorted(storage.list_files(committed)) == local_files and local_files, name
        for file in local_files:
            remote_bytes, local_bytes = storage.read_bytes(f"{committed}/{file}"), (local / name / file).read_bytes()
            if file.endswith(".safetensors"):  # the same tensors; the recorded train config names its output_dir
                assert same_checkpoint(remote_bytes, local_bytes, output_dirs=(s3.url("ckpt"), "out/ckpt"))
            else:
                assert remote_bytes == local_bytes, f"{name}/{file}"
    assert "'stats' is up to date" in lmprep("run").output


def same_checkpoint(one: bytes, other: bytes, *, output_dirs: tuple[str, str]) -> bool:
    import numpy as np
    from safetensors.numpy import load

    def metadata(data: bytes, output_dir: str) -> dict:
        header = json.loads(data[8:8 + int.from_bytes(data[:8], "little")])["__metadata__"]
        record = json.loads(header["lmprep"].replace(json.dumps(output_dir)[1:-1], "OUTPUT_DIR"))
        del record["checksums"]["metadata"]  # the checksum of the rest, output dir included
        return {**header, "lmprep": record}

    tensors = load(one), load(other)
    return (metadata(one, output_dirs[0]) == metadata(other, output_dirs[1]) and tensors[0].keys() == tensors[1].keys()
            and all(np.array_equal(tensors[0][key], tensors[1][key]) for key in tensors[0]))


def test_a_remote_output_rewritten_with_the_same_bytes_leaves_the_stages_after_it_up_to_date(s3, tmp_path,
                                                                                            monkeypatch):
    monkeypatch.chdir(tmp_path)
    corpus(s3)
    write_config(tmp_path, raw=s3.url("raw/*.jsonl.gz"), shards=s3.url("shards"))
    assert lmprep("run").exit_code == 0
    first = storage.committed(s3.url("shards"))
    assert lmprep("run", "encode", "--force").exit_code == 0
    assert storage.committed(s3.url("shards")) != first  # a new commit, of the same files
    status = lmprep("status").output
    assert "train: up to date" in status, status


def test_an_output_in_a_missing_bucket_is_refused_before_its_stage_runs(s3, tmp_path, monkeypatch):
    from pipeline.tokenizer import Tokenizer

    monkeypatch.chdir(tmp_path)
    corpus(s3)
    write_config(tmp_path, raw=s3.url("raw/*.jsonl.gz"), tokenizer="s3://no-such-bucket/tokenizer.json")
    monkeypatch.setattr(Tokenizer, "train_from_counts", pytest.fail)
    result = lmprep("run")
    assert result.exit_code == 2
    assert result.stderr.strip() == ("error: s3://no-such-bucket/tokenizer.json: no bucket 'no-such-bucket' "
                                     "(or no access to it)"), result.stderr


def test_local_only_outputs_refuse_a_url_in_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_config(tmp_path, raw="raw/*.txt")
    result = CliRunner().invoke(cli, ["status", "--config", "lmprep.yaml", "--set", "state_dir=s3://b/state"])
    assert result.exit_code == 2
    assert "state_dir 's3://b/state' must be a local path" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_memory_urls_read_and_commit_like_s3():
    import fsspec

    fs = fsspec.filesystem("memory")
    fs.pipe({"/lmprep-test/raw/a.txt": b"one", "/lmprep-test/raw/b.txt.gz": gz("two")})
    files = expand_sources([SourceConfig(glob="memory://lmprep-test/raw/*")])
    assert [list(read_documents(file, TextDecoder())) for file in files] == [["one"], ["two"]]
    with storage.output_dir("memory://lmprep-test/out") as attempt:
        storage.write_bytes(f"{attempt}/x.json", b"{}")
    assert storage.read_bytes(f"{storage.committed('memory://lmprep-test/out')}/x.json") == b"{}"
    assert storage.exists("memory://lmprep-test/out/x.json") and not storage.exists("memory://lmprep-test/none")
    fs.rm("/lmprep-test", recursive=True)
