"""Checkpoints in object storage: ``train.output_dir`` as an s3:// URL, on a real S3 server (moto's, on 127.0.0.1).

The data stages run once, locally, for the module; each project here is a copy of that one with its
checkpoint directory on the bucket, so a copy knows nothing of a checkpoint another copy trained.
"""

from __future__ import annotations

import re
import shutil

import pytest
from conftest import gz, jsonl, write_store_config
from conftest import lmprep_in_cwd as lmprep

from pipeline.engine import storage
from pipeline.model.checkpoint import read_checkpoint, read_header
from pipeline.tokenizer import Tokenizer

pytest.importorskip("s3fs")


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    """A project whose prepared data, tokenizer and shards are made (locally); its train stage never ran."""
    root = tmp_path_factory.mktemp("upstream")
    (root / "raw").mkdir()
    for index in range(3):
        texts = [f"Q: what is {index}.{i}?\nA: it is {i * index} and {i + index}." for i in range(30)]
        (root / "raw" / f"part-{index}.jsonl.gz").write_bytes(gz(jsonl(texts)))
    write_store_config(root, raw="raw/*.jsonl.gz")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)
        assert lmprep("run", "encode").exit_code == 0
    return root


def project(upstream, where, monkeypatch, ckpt: str):
    """A copy of the upstream project in ``where`` with ``train.output_dir: ckpt``, as the current directory."""
    shutil.copytree(upstream, where)
    write_store_config(where, raw="raw/*.jsonl.gz", ckpt=ckpt)
    monkeypatch.chdir(where)
    return where


def ok(*args: str) -> str:
    result = lmprep(*args)
    assert result.exit_code == 0, result.output
    return result.output


def same_weights(a, b) -> bool:
    import torch

    first, second = a.model.state_dict(), b.model.state_dict()
    return first.keys() == second.keys() and all(torch.equal(first[name], second[name]) for name in first)


def test_a_remote_checkpoint_is_the_local_runs_and_status_then_reads_no_object(s3, upstream, tmp_path, monkeypatch):
    local = project(upstream, tmp_path / "local", monkeypatch, ckpt="out/ckpt")
    ok("run")
    local_sample = ok("sample", "--prompt", "Q: what", "--max-tokens", "5")
    url = s3.url("ckpt")
    project(upstream, tmp_path / "remote", monkeypatch, ckpt=url)
    assert f"→ {url}/checkpoint.safetensors" in ok("run")

    remote, here = read_checkpoint(url), read_checkpoint(local / "out" / "ckpt")
    assert remote.path == f"{url}/checkpoint.safetensors" and remote.step == here.step == 2
    assert same_weights(remote, here)
    committed = storage.committed(url)
    for name in ("metrics.jsonl", "tokenizer.json"):
        assert storage.read_bytes(f"{committed}/{name}") == (local / "out" / "ckpt" / name).read_bytes()
    assert ok("sample", "--prompt", "Q: what", "--max-tokens", "5") == local_sample

    reads = s3.counter.object_reads
    assert "'train' is up to date" in ok("run")
    assert ok("status").splitlines()[-1] == "train: up to date"
    assert s3.counter.object_reads == reads


def test_an_interrupted_remote_run_resumes_from_its_partial_checkpoint_in_a_fresh_project(
        s3, upstream, tmp_path, monkeypatch):
    from pipeline.model import homes

    url = s3.url("ckpt")
    project(upstream, tmp_path / "first", monkeypatch, ckpt=url)
    ok("run")
    first_commit = storage.committed(url)

    # another machine raises train.steps, saving every step, and is stopped after the save at step 3
    publish = homes.RemoteHome.partial_saved

    def preempted(home, partial):
        publish(home, partial)
        raise RuntimeError("preempted")

    monkeypatch.setattr(homes.RemoteHome, "partial_saved", preempted)
    project(upstream, tmp_path / "second", monkeypatch, ckpt=url)
    result = lmprep("run", "--set", "train.steps=4", "--set", "train.checkpoint_every=1")
    assert "resuming from step 2 to step 4" in result.output and str(result.exception) == "preempted"
    assert storage.committed(url) == first_commit and read_header(url).step == 2
    assert read_header(f"{url}.partial").step == 3

    # a third machine finishes it from the remote partial checkpoint
    monkeypatch.setattr(homes.RemoteHome, "partial_saved", publish)
    project(upstream, tmp_path / "third", monkeypatch, ckpt=url)
    output = ok("run", "--set", "train.steps=4", "--set", "train.checkpoint_every=1")
    assert f"continuing the interrupted run from its checkpoint at step 3 in {url}.partial" in output
    assert not storage.holds_anything(f"{url}.partial")

    project(upstream, tmp_path / "uninterrupted", monkeypatch, ckpt="out/ckpt")
    ok("run", "--set", "train.steps=4")
    assert same_weights(read_checkpoint(url), read_checkpoint("out/ckpt"))


def test_a_new_tokenizer_sets_the_remote_checkpoint_aside_where_the_guard_refuses_it(
        s3, upstream, tmp_path, monkeypatch):
    url = s3.url("ckpt")
    project(upstream, tmp_path / "remote", monkeypatch, ckpt=url)
    ok("run")
    old = Tokenizer.load("out/tokenizer.json").fingerprint
    assert (f"running it will move {url} to {url}-old-lr and train from scratch"
            in ok("status", "--set", "train.lr=0.02"))

    output = ok("run", "--set", "tokenizer.vocab_size=280")
    aside = f"{url}-{old[:12]}"
    assert f"moved the old checkpoint to {aside}" in output
    assert read_header(aside).tokenizer.fingerprint == old != read_header(url).tokenizer.fingerprint

    refused = lmprep("sample", "--prompt", "Q:", "--checkpoint", aside, "--tokenizer", "out/tokenizer.json")
    assert refused.exit_code == 2 and len(refused.output.strip().splitlines()) == 1, refused.output
    assert f"checkpoint {aside}/checkpoint.safetensors was trained with tokenizer {old}" in refused.output
    assert lmprep("check", aside).exit_code == 1
    assert lmprep("sample", "--prompt", "Q:", "--checkpoint", aside, "--max-tokens", "3").exit_code == 0

    assert "checkpoints kept" in ok("clean") and storage.exists(url)
    assert f"removed {url}" in ok("clean", "--checkpoints")
    assert not storage.holds_anything(url) and storage.exists(aside)


# --------------------------------------------------------------------------- reading a remote checkpoint's bytes


def commit_files(url: str, files: dict[str, bytes]) -> str:
    """``files`` committed as the output at ``url`` (in memory://, as train commits them)."""
    with storage.output_dir(url) as attempt:
        for name, data in files.items():
            storage.write_bytes(f"{attempt}/{name}", data)
    return url


def test_a_remote_header_reads_as_safetensors_reads_the_local_file(tmp_path, fake_tokenizer):
    from pipeline.model.bigram import BigramLM, ModelConfig
    from pipeline.model.checkpoint import save_checkpoint

    tokenizer = fake_tokenizer([(104, 105), (256, 33)], special_tokens={"<|endoftext|>": 258})
    path = save_checkpoint(tmp_path, model=BigramLM(ModelConfig(vocab_size=tokenizer.vocab_size, dim=4)), step=7,
                           tokenizer=tokenizer, shard_fingerprint="f" * 64, train_config={"dim": 4})
    url = commit_files("memory://lmprep-ckpt/header", {"checkpoint.safetensors": path.read_bytes()})
    local, remote = read_header(tmp_path), read_header(url)
    assert (remote.metadata, remote.shapes, remote.step) == (local.metadata, local.shapes, 7)
    assert remote.path == f"{url}/checkpoint.safetensors"
    assert same_weights(read_checkpoint(url), read_checkpoint(tmp_path))


@pytest.mark.parametrize("data, reason", [
    (b"\x80\x04\x95" + b"\0" * 20, "is a pickle or torch.save archive"),
    ((50).to_bytes(8, "little") + b'{"a": 1}', "is not a readable safetensors checkpoint (no safetensors header)"),
    ((8).to_bytes(8, "little") + b'{"a": 1}', "is not a readable safetensors checkpoint (malformed header"),
    ((2).to_bytes(8, "little") + b"{}", "is a safetensors file without lmprep checkpoint metadata"),
], ids=["pickle", "header past the end", "malformed header", "no lmprep metadata"])
def test_a_remote_file_that_is_no_checkpoint_is_refused_by_its_url(data, reason):
    from pipeline.errors import CheckpointError

    url = commit_files("memory://lmprep-ckpt/bad", {"checkpoint.safetensors": data})
    for read in (read_header, read_checkpoint):
        with pytest.raises(CheckpointError, match="^" + re.escape(f"{url}/checkpoint.safetensors {reason}")):
            read(url)
