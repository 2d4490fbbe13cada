"""The ``export`` and ``stats`` stages, through ``lmprep export``/``stats``/``run``, on a small project."""

from __future__ import annotations

import json
import os
import pickle
import warnings
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from conftest import ONE_A_LINE, tiny_config

from pipeline.shards import export
from pipeline.shards.format import ShardSet
from pipeline.tokenizer import Tokenizer
from stages.cli.main import cli

TEXTS = [f"document {i}: the cat sat on the mat, {'again ' * (i % 7)}naïve café 🙂" for i in range(120)]

def config(kind: str = "byte", **sections) -> str:
    return tiny_config(**{"data": ONE_A_LINE, "tokenizer": {"output": "out/tokenizer/tokenizer.json", "kind": kind},
                          "encode": {"shard_tokens": 300}, "export": {"output_dir": "out/export"},
                          "stats": {"output_dir": "out/stats", "top": 30}, **sections})


def write_project(root: Path, kind: str = "byte") -> Path:
    (root / "raw").mkdir()
    (root / "raw" / "a.txt").write_text("\n".join(TEXTS) + "\n", "utf-8")
    (root / "lmprep.yaml").write_text(config(kind))
    return root


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return write_project(tmp_path)


def lmprep(*args: str, code: int = 0):
    result = CliRunner().invoke(cli, [*args, "--config", "lmprep.yaml"])
    assert result.exit_code == code, result.output
    return result


def split_documents(split: str) -> list[list[int]]:
    return [ids.tolist() for ids in ShardSet.open("out/shards", split).documents()]


def test_export_parquet_is_readable_by_pyarrow_with_a_sidecar(project):
    lmprep("export", "--format", "parquet")
    table = pq.read_table("out/export/train.parquet")
    assert table.column("input_ids").to_pylist() == split_documents("train")
    assert table.schema.metadata[b"lmprep.split"] == b'"train"'
    sidecar = json.loads(Path("out/export/val.parquet.json").read_text())
    assert sidecar["tokenizer_fingerprint"] == Tokenizer.load("out/tokenizer/tokenizer.json").fingerprint
    assert sidecar["documents"] == len(split_documents("val")) and sidecar["file"] == "val.parquet"
    assert not Path("out/export/train.bin").exists()


def test_nanogpt_export_reads_as_nanogpt_reads_it(project):
    """nanoGPT's train.py: ``np.memmap(os.path.join(data_dir, 'train.bin'), dtype=np.uint16, mode='r')``
    and ``meta_vocab_size = pickle.load(f)['vocab_size']`` from ``data_dir/meta.pkl``."""
    lmprep("run")
    data_dir = "out/export"
    tokenizer = Tokenizer.load("out/tokenizer/tokenizer.json")
    with open(os.path.join(data_dir, "meta.pkl"), "rb") as f:
        meta = pickle.load(f)
    assert meta["vocab_size"] == tokenizer.vocab_size and meta["tokenizer_fingerprint"] == tokenizer.fingerprint
    for split in ("train", "val"):
        data = np.memmap(os.path.join(data_dir, f"{split}.bin"), dtype=np.uint16, mode="r")
        assert data.tolist() == [i for doc in split_documents(split) for i in doc]
        sidecar = json.loads(Path(data_dir, f"{split}.bin.json").read_text())
        assert sidecar["tokenizer_fingerprint"] == tokenizer.fingerprint and sidecar["tokens"] == len(data)
    text = tokenizer.decode(np.memmap(os.path.join(data_dir, "train.bin"), dtype=np.uint16, mode="r").tolist())
    assert text.count("<|endoftext|>") == len(split_documents("train")) and "naïve café 🙂" in text


def test_megatron_export_reads_as_megatron_core_reads_it(project):
    """``--data-path out/export/train_text_document`` in Megatron-LM: its ``IndexedDataset`` gives every document's
    IDs, each ending with the EOS the encode stage appended."""
    with warnings.catch_warnings():  # megatron-core warns at import that Transformer Engine is absent
        warnings.simplefilter("ignore")
        from megatron.core.datasets.indexed_dataset import IndexedDataset

    output = lmprep("export", "--format", "megatron").output
    assert "→ out/export/train_text_document.idx" in output
    eos = Tokenizer.load("out/tokenizer/tokenizer.json").special_tokens["<|endoftext|>"]
    for split in ("train", "val"):
        dataset = IndexedDataset(f"out/export/{split}_text_document")
        assert [dataset[i].tolist() for i in range(len(dataset))] == split_documents(split)
        assert all(dataset[i][-1] == eos for i in range(len(dataset)))
    assert sorted(os.listdir("out/export")) == sorted(
        f"{split}_text_document.{ext}{sidecar}" for split in ("train", "val") for ext in ("bin", "idx")
        for sidecar in ("", ".json"))


def test_above_65536_ids_every_format_is_exported_and_the_uint32_bin_is_announced(tmp_path, monkeypatch):
    """A word vocabulary of 66,003 IDs: nanoGPT's .bin is uint32 (meta.pkl and a printed line say so), Parquet
    is written beside it, and Megatron's files are int32."""
    monkeypatch.chdir(tmp_path)
    words = [f"w{i}" for i in range(66_000)]
    Tokenizer.train([" ".join(words[i:i + 1000]) for i in range(0, len(words), 1000)], kind="word",
                    vocab_size=70_000, min_frequency=1, special_tokens=["<|endoftext|>"], workers=1).save("word.json")
    write_project(tmp_path)
    Path("raw/a.txt").write_text("\n".join(" ".join(words[-50 - i:len(words) - i]) for i in range(40)) + "\n")
    config = Path("lmprep.yaml").read_text().replace("vocab_size: 300, kind: byte", "path: word.json")
    Path("lmprep.yaml").write_text(config.replace("{output_dir: out/export}",
                                                  "{output_dir: out/export, formats: [nanogpt, parquet, megatron]}"))
    output = lmprep("run", "export").output
    assert "the nanoGPT .bin files hold uint32 IDs (66,003 IDs do not fit uint16)" in output
    with open("out/export/meta.pkl", "rb") as f:
        assert pickle.load(f)["dtype"] == "uint32"
    train = split_documents("train")
    assert np.memmap("out/export/train.bin", dtype=np.uint32, mode="r").tolist() == [i for doc in train for i in doc]
    assert max(i for doc in train for i in doc) > 65_535
    assert pq.read_table("out/export/train.parquet").column("input_ids").to_pylist() == train
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.datasets.indexed_dataset import IndexedDataset
    dataset = IndexedDataset("out/export/train_text_document")
    assert dataset.index.dtype == np.int32 and [dataset[i].tolist() for i in range(len(dataset))] == train


def test_check_says_whether_an_export_directory_belongs_to_a_tokenizer(project, byte_tokenizer):
    lmprep("export", "--format", "megatron", "--format", "nanogpt")
    tokenizer = Tokenizer.load("out/tokenizer/tokenizer.json")
    good = lmprep("check", "out/export", "--tokenizer", "out/tokenizer/tokenizer.json")
    assert good.output == (
        "compatible: the 6 exported files of out/export (train.bin, train_text_document.bin, train_text_document.idx, "
        f"val.bin, val_text_document.bin, val_text_document.idx) hold IDs of tokenizer {tokenizer.fingerprint} "
        f"(out/tokenizer/tokenizer.json, vocab size {tokenizer.vocab_size})\n")
    byte_tokenizer.save("other.json")
    bad = lmprep("check", "out/export", "--tokenizer", "other.json", code=1)
    assert bad.output.startswith(f"incompatible: out/export/train.bin was exported with tokenizer "
                                 f"{tokenizer.fingerprint} (vocab size {tokenizer.vocab_size}, says train.bin.json), "
                                 f"but the given tokenizer is {byte_tokenizer.fingerprint}")
    Path("out/export/val.bin.json").unlink()
    missing = lmprep("check", "out/export", "--tokenizer", "out/tokenizer/tokenizer.json", code=1)
    assert missing.output.startswith("incompatible: out/export/val.bin has no sidecar val.bin.json")


def test_an_empty_split_is_exported_and_said_to_be_empty(project):
    """numpy cannot map an empty file, so neither nanoGPT nor Megatron can open an empty split's .bin."""
    Path("lmprep.yaml").write_text(Path("lmprep.yaml").read_text().replace("val_fraction: 0.2", "val_fraction: 0.0"))
    output = lmprep("export", "--format", "megatron", "--format", "parquet").output
    assert ("val has no tokens, so its .bin files are empty, which np.memmap (nanoGPT, Megatron) cannot open: "
            "leave that split out of their data paths") in output
    assert Path("out/export/val_text_document.bin").stat().st_size == 0
    assert pq.read_table("out/export/val.parquet").num_rows == 0


def test_nanogpt_meta_of_the_char_kind_decodes_as_nanogpt_does(char_tokenizer):
    """nanoGPT's sample.py: ``decode = lambda l: ''.join([itos[i] for i in l])``."""
    meta = pickle.loads(pickle.dumps(export.nanogpt_meta(char_tokenizer)))
    itos, stoi = meta["itos"], meta["stoi"]
    text = "Les élèves étudient à l'école.\nThe quick brown fox"
    ids = char_tokenizer.encode(text) + [char_tokenizer.special_tokens["<|endoftext|>"]]
    assert "".join(itos[i] for i in ids) == text + "<|endoftext|>"
    assert meta["vocab_size"] == char_tokenizer.vocab_size == len(itos)
    assert all(stoi[c] == char_tokenizer.encode(c)[0] for c in "The fox")


def test_byte_kind_meta_has_no_itos_since_byte_tokens_can_split_a_character(byte_tokenizer):
    assert set(export.nanogpt_meta(byte_tokenizer)) == {"vocab_size", "tokenizer_fingerprint", "kind", "dtype"}


def test_exports_and_stats_are_stages_the_runner_tracks(project):
    lmprep("run")
    status = lmprep("status").output
    assert "export: up to date" in status and "stats: up to date" in status
    with open("raw/a.txt", "a", encoding="utf-8") as raw:
        raw.write("a brand new document about zebras\n")
    stale = lmprep("status").output
    assert "export: stale" in stale and "stats: stale" in stale
    ran = lmprep("run").output
    assert "running 'export'" in ran and "running 'stats'" in ran
    tokens = sum(map(len, split_documents("train")))
    assert len(np.memmap("out/export/train.bin", dtype=np.uint16, mode="r")) == tokens
    # early cutoff: an exact duplicate changes only prepare's stats, so nothing after prepare re-runs
    with open("raw/a.txt", "a", encoding="utf-8") as raw:
        raw.write(TEXTS[3] + "\n")
    again = lmprep("run").output
    assert "'export' is up to date" in again and "'stats' is up to date" in again


def test_export_options_are_the_config_keys(project):
    lmprep("export", "--out", "elsewhere", "--format", "nanogpt")
    assert sorted(os.listdir("elsewhere")) == ["meta.pkl", "train.bin", "train.bin.json", "val.bin", "val.bin.json"]
    assert "param export.output_dir changed" in lmprep("status").output


def test_undeclared_stages_are_named_errors(project):
    Path("lmprep.yaml").write_text(config(export=None))
    result = lmprep("export", code=2)
    assert result.output == "error: the config declares no export stage: set export.output_dir (or pass --out)\n"
    result = lmprep("run", "export", code=2)
    assert "stage 'export' is not declared by this config; set export.output_dir" in result.output


def test_stats_prints_tables_with_headers_and_draws_a_histogram(project):
    output = lmprep("stats").output
    tokens = sum(map(len, split_documents("train")))
    assert f"train: {len(split_documents('train'))} documents, {tokens:,} tokens" in output
    assert "val: " in output and "bytes per token" in output
    assert "     ID         count   share  token" in output
    assert "<|endoftext|>" in output  # one per document: among the most frequent tokens
    sources = output[output.index("prepared documents per source:"):].splitlines()
    assert sources[1].split()[:3] == ["source", "read", "kept"] and sources[2].startswith("data.sources[0] ")
    assert Path("out/stats/doc_lengths.png").read_bytes().startswith(b"\x89PNG")
    summary = json.loads(Path("out/stats/stats.json").read_text())
    assert summary["tokenizer_fingerprint"] == Tokenizer.load("out/tokenizer/tokenizer.json").fingerprint
    assert lmprep("stats").output.endswith(output.splitlines()[-1] + "\n")  # up to date: same tables again


def test_stats_counts_the_text_bytes_exactly(project):
    from pipeline.shards.stats import split_stats

    lmprep("run", "encode")
    tokenizer = Tokenizer.load("out/tokenizer/tokenizer.json")
    stats = split_stats(ShardSet.open("out/shards", "train"), tokenizer)
    texts = [tokenizer.decode([i for i in doc if i != tokenizer.special_tokens["<|endoftext|>"]])
             for doc in split_documents("train")]
    assert stats.text_bytes == sum(len(text.encode()) for text in texts)
    assert stats.document_lengths.sum() == stats.tokens


def test_clean_removes_exports_stats_and_the_emptied_tokenizer_directory(project):
    lmprep("run")
    output = lmprep("clean").output
    assert "removed out/export" in output and "removed out/stats" in output
    assert not Path("out/tokenizer").exists() and not Path("out/export").exists()
    assert Path("out/ckpt/checkpoint.safetensors").exists()


@pytest.mark.parametrize("command", [["stats"], ["export", "--format", "nanogpt"]])
def test_a_bit_rotted_shard_is_re_encoded_before_it_is_read(project, command):
    """The shards are a tracked output: damage is noticed and the shards rebuilt, never exported or counted."""
    lmprep("run", "encode")
    shard = project / "out" / "shards" / "train-00000.arrow"
    stat = shard.stat()
    tokens = ShardSet.open(project / "out" / "shards", "train").manifest.shards[0].tokens
    data = bytearray(shard.read_bytes())
    data[data.index(np.array([tokens], "<i8").tobytes()) + 7] = 0x74  # the top byte of a length in the header
    shard.write_bytes(bytes(data))
    os.utime(shard, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    result = lmprep(*command)
    assert "running 'encode': output 'out/shards' was modified" in result.output
    assert ShardSet.open(project / "out" / "shards", "train").manifest.shards[0].tokens == tokens
