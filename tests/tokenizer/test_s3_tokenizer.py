"""The tokenizer file in object storage: ``tokenizer.output`` and ``tokenizer.path`` as s3:// URLs.

A real S3 API (moto's server on 127.0.0.1) with s3fs as the client; the server counts the object
bodies it serves, so a test can say that ``status`` read none.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import lmprep_in_cwd as lmprep
from conftest import put_corpus as corpus
from conftest import write_store_config as write_config

from pipeline.engine import storage
from pipeline.errors import TokenizerMismatchError
from pipeline.shards import corpus as shard_corpus
from pipeline.shards.format import ShardSet
from pipeline.tokenizer import Tokenizer, hf_dir

pytest.importorskip("s3fs")

TOKENIZER_FILES = ("tokenizer.json", hf_dir.TOKENIZER_CONFIG, hf_dir.SPECIAL_TOKENS_MAP)


class Folder:
    """``put_corpus``'s store, as files under a local directory."""

    def __init__(self, root: Path):
        self.root = root

    def put(self, key: str, data: bytes) -> None:
        (self.root / key).parent.mkdir(parents=True, exist_ok=True)
        (self.root / key).write_bytes(data)


@pytest.fixture(scope="module")
def local_run(tmp_path_factory) -> Path:
    """The corpus ``put_corpus`` puts on s3, as files in ``raw/`` beside the project, encoded with every
    path local: the project's directory."""
    root = tmp_path_factory.mktemp("local")
    corpus(Folder(root))
    (root / "local").mkdir()
    write_config(root / "local", raw="../raw/*.jsonl.gz")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root / "local")
        assert lmprep("run", "encode").exit_code == 0
    return root / "local"


@pytest.fixture(scope="module")
def other_tokenizer() -> Tokenizer:
    """A tokenizer that is not the one ``local_run`` trained."""
    return Tokenizer.train(["other text entirely, other text"] * 3, vocab_size=270, workers=1)


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    """An empty project directory, the current one."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def error_lines(result) -> list[str]:
    return [line for line in result.output.splitlines() if line.startswith("error:")]


def test_pipeline_with_the_tokenizer_on_s3_gives_the_files_of_the_local_run(s3, local_run, tmp_path, monkeypatch,
                                                                           other_tokenizer):
    # the same raw files, where the local run read them: every shard row names its document's file
    project = local_run.parent / f"remote-{tmp_path.name}"
    project.mkdir()
    monkeypatch.chdir(project)
    tokenizer_url = s3.url("tok/tokenizer.json")
    write_config(project, raw="../raw/*.jsonl.gz", tokenizer=tokenizer_url)
    result = lmprep("run")
    assert result.exit_code == 0, result.output

    for name in TOKENIZER_FILES:
        assert storage.read_bytes(s3.url(f"tok/{name}")) == (local_run / "out" / name).read_bytes(), name
    local_files = sorted(path.name for path in (local_run / "out" / "shards").iterdir())
    assert sorted(path.name for path in Path("out/shards").iterdir()) == local_files
    for name in local_files:
        assert Path("out/shards", name).read_bytes() == (local_run / "out" / "shards" / name).read_bytes(), name
    assert Path("out/ckpt/tokenizer.json").read_bytes() == (local_run / "out" / "tokenizer.json").read_bytes()

    before = s3.counter.object_reads
    status = lmprep("status").output
    assert status.count("up to date") == 4, status
    assert s3.counter.object_reads == before

    # the guard travels: the shards and the checkpoint refuse another tokenizer, kept in the store too
    other_tokenizer.save(s3.url("other.json"))
    with pytest.raises(TokenizerMismatchError):
        ShardSet.open("out/shards", "train", tokenizer=Tokenizer.load(s3.url("other.json")))
    assert lmprep("check", "out/ckpt").exit_code == 0
    refused = lmprep("check", "out/ckpt", "--tokenizer", s3.url("other.json"))
    assert refused.exit_code == 1 and "incompatible" in refused.output, refused.output

    changed = json.loads(storage.read_bytes(tokenizer_url))
    changed["model"]["merges"].pop()
    s3.put("tok/tokenizer.json", json.dumps(changed).encode())
    status = lmprep("status").output
    assert f"output '{tokenizer_url}' was modified" in status, status
    assert f"encode: stale\n    dependency '{tokenizer_url}' changed" in status, status


def test_a_frozen_tokenizer_on_s3_is_copied_byte_for_byte(s3, local_run, project):
    frozen = s3.put("frozen/tokenizer.json", (local_run / "out" / "tokenizer.json").read_bytes())
    write_config(project, raw=str(local_run.parent / "raw" / "*.jsonl.gz"), tokenizer=s3.url("tok/tokenizer.json"))
    result = lmprep("run", "tokenizer", "--set", f"tokenizer.path={frozen}")
    assert result.exit_code == 0, result.output
    for name in TOKENIZER_FILES:
        assert storage.read_bytes(s3.url(f"tok/{name}")) == (local_run / "out" / name).read_bytes(), name

    before = s3.counter.object_reads
    assert "tokenizer: up to date" in lmprep("status", "--set", f"tokenizer.path={frozen}").output
    # the frozen file's settings, which the config takes as it loads, come from the load the run above made in
    # this process (pipeline.tokenizer.shared: one load per content, its store's ETag asked, no object read)
    assert s3.counter.object_reads == before
    s3.put("frozen/tokenizer.json", (local_run / "out" / "tokenizer.json").read_bytes() + b"\n")
    status = lmprep("status", "--set", f"tokenizer.path={frozen}").output
    assert f"tokenizer: stale\n    dependency '{frozen}' changed" in status, status


def test_cli_tokenizer_commands_take_a_url_given_or_configured(s3, local_run, project):
    local_file = local_run / "out" / "tokenizer.json"
    url = s3.put("tok/tokenizer.json", local_file.read_bytes())
    write_config(project, raw="raw/*.txt", tokenizer=url)
    given = lmprep("tokenizer", "fingerprint", url)
    assert given.exit_code == 0 and given.output.strip() == Tokenizer.load(local_file).fingerprint, given.output
    configured = lmprep("tokenizer", "encode", "what is 1?")
    assert configured.exit_code == 0, configured.output
    assert configured.output.split() == [str(i) for i in Tokenizer.load(local_file).encode("what is 1?")]
    overwrite = lmprep("tokenizer", "train", str(local_run.parent / "raw" / "*.jsonl.gz"))
    assert overwrite.exit_code == 2 and error_lines(overwrite) == [
        f"error: {url} is the output of the pipeline's 'tokenizer' stage; retrain it from the config with "
        "`lmprep run tokenizer`, write elsewhere with --out PATH, or pass --force to overwrite it"]


def test_encode_shares_a_remote_tokenizer_until_its_metadata_changes(s3, local_run, other_tokenizer):
    """The driver loads the tokenizer once for the stage and its splits; a HEAD tells whether it changed."""
    url = s3.put("tok.json", (local_run / "out" / "tokenizer.json").read_bytes())
    first = shard_corpus.share_tokenizer(url)
    before = s3.counter.object_reads
    assert shard_corpus.share_tokenizer(url) is first
    assert s3.counter.object_reads == before
    other_tokenizer.save(url)
    assert shard_corpus.share_tokenizer(url).fingerprint == other_tokenizer.fingerprint != first.fingerprint


@pytest.mark.parametrize("arguments", [
    ("tokenizer", "fingerprint", "s3://no-such-bucket/tok.json"),
    ("run", "tokenizer", "--set", "tokenizer.path=s3://no-such-bucket/tok.json"),
    ("run", "tokenizer", "--set", "tokenizer.path=frozen.json", "--set", "tokenizer.output=s3://no-such-bucket/tok.json"),
])
def test_a_tokenizer_url_in_a_missing_bucket_is_one_line_with_exit_2(s3, local_run, project, arguments):
    (project / "frozen.json").write_bytes((local_run / "out" / "tokenizer.json").read_bytes())
    write_config(project, raw=str(local_run.parent / "raw" / "*.jsonl.gz"))
    result = lmprep(*arguments)
    assert result.exit_code == 2, result.output
    assert len(error_lines(result)) == 1 and "s3://no-such-bucket/tok.json" in error_lines(result)[0], result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("setting, clash", [
    ("tokenizer.path=s3://{bucket}/tok/tokenizer.json", "is the same path as the input"),
    ("tokenizer.output=s3://{bucket}/shards/tokenizer.json", "lies inside encode.output_dir 's3://{bucket}/shards'"),
])
def test_a_remote_tokenizer_output_overlapping_an_input_or_output_is_refused(s3, project, setting, clash):
    (project / "raw").mkdir()
    (project / "raw" / "a.txt").write_text("text")
    write_config(project, raw="raw/*.txt", tokenizer=s3.url("tok/tokenizer.json"), shards=s3.url("shards"))
    result = lmprep("status", "--set", setting.format(bucket=s3.bucket))
    assert result.exit_code == 2, result.output
    assert clash.format(bucket=s3.bucket) in result.output and len(result.output.strip().splitlines()) == 1
