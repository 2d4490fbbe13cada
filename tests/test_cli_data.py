"""``lmprep export`` and ``lmprep stats`` on a small encoded corpus."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from pipeline import documents, encoding, export
from pipeline.errors import ShardError
from pipeline.executor import Tasks
from pipeline.shards import ShardSet, ShardStamp, ShardWriter
from pipeline.tokenizer import Tokenizer
from stages.cli import cli

TEXTS = [f"document {i}: the cat sat on the mat, {'again ' * (i % 7)}naïve café 🙂" for i in range(120)]


@pytest.fixture
def project(tmp_path) -> Path:
    """A config whose prepared data, tokenizer and shards already exist."""
    prepared, shards, tokenizer_file = tmp_path / "prepared", tmp_path / "shards", tmp_path / "tok.json"
    documents.write_prepared(prepared, {"train": [TEXTS[:60], TEXTS[60:100]], "val": [TEXTS[100:]]})
    tokenizer = Tokenizer.train(TEXTS, vocab_size=300, special_tokens=["<|endoftext|>"])
    tokenizer.save(tokenizer_file)
    with ThreadPoolExecutor(1) as executor:
        encoding.encode_corpus(prepared, shards, tokenizer_path=tokenizer_file, tasks=Tasks(executor),
                               shard_tokens=300, eos_id=tokenizer.special_tokens["<|endoftext|>"])
    config = tmp_path / "config.yaml"
    config.write_text(f"prepare: {{output_dir: '{prepared}'}}\ntokenizer: {{output: '{tokenizer_file}'}}\n"
                      f"encode: {{output_dir: '{shards}'}}\n")
    return tmp_path


def invoke(project: Path, *args: str):
    result = CliRunner().invoke(cli, [*args, "--config", str(project / "config.yaml")])
    assert result.exit_code == 0, result.output
    return result


def train_documents(project: Path) -> list[list[int]]:
    return [ids.tolist() for ids in ShardSet.open(project / "shards", "train").documents()]


def test_export_parquet_is_readable_by_pyarrow(project):
    invoke(project, "export", "--format", "parquet", "--out", str(project / "out"))
    table = pq.read_table(project / "out" / "train.parquet")
    assert table.column("input_ids").to_pylist() == train_documents(project)
    assert table.schema.metadata[b"lmprep.split"] == b'"train"'
    assert (project / "out" / "val.parquet").exists()


def test_export_nanogpt_writes_the_flat_uint16_stream(project):
    invoke(project, "export", "--format", "nanogpt", "--out", str(project / "out"))
    stream = np.fromfile(project / "out" / "train.bin", dtype=np.uint16)
    assert stream.tolist() == [i for doc in train_documents(project) for i in doc]
    eos = Tokenizer.load(project / "tok.json").special_tokens["<|endoftext|>"]
    assert int((stream == eos).sum()) == 100


def test_nanogpt_export_refuses_ids_over_uint16(tmp_path):
    stamp = ShardStamp(split="train", tokenizer_fingerprint="f" * 64, vocab_size=70_000,
                       special_ids={"bos": None, "eos": None}, prepared_fingerprint="p" * 64)
    writer = ShardWriter(tmp_path, stamp, shard_tokens=10)
    writer.write(np.array([1, 69_999], np.uint32), np.array([0, 2]))
    writer.close()
    with pytest.raises(ShardError, match="over 65,536"):
        export.write_nanogpt_bin(ShardSet.open(tmp_path, "train"), tmp_path / "train.bin")


def test_stats_prints_counts_and_draws_a_histogram(project):
    output = invoke(project, "stats", "--top", "30", "--out", str(project / "stats")).output
    tokens = sum(map(len, train_documents(project)))
    assert f"train: 100 documents, {tokens:,} tokens" in output
    assert "val: 20 documents" in output and "bytes per token" in output
    assert "<|endoftext|>" in output  # one per document: among the most frequent tokens
    assert (project / "stats" / "doc_lengths.png").read_bytes().startswith(b"\x89PNG")


def test_stats_counts_the_text_bytes_exactly(project):
    from pipeline.shard_stats import split_stats

    tokenizer = Tokenizer.load(project / "tok.json")
    stats = split_stats(ShardSet.open(project / "shards", "train"), tokenizer)
    assert stats.text_bytes == sum(len(text.encode()) for text in TEXTS[:100])
    assert stats.document_lengths.sum() == stats.tokens


def test_a_missing_shard_set_is_one_error_line(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(f"encode: {{output_dir: '{tmp_path / 'none'}'}}\ntokenizer: {{output: '{tmp_path / 't.json'}'}}\n")
    result = CliRunner().invoke(cli, ["stats", "--config", str(config)])
    assert result.exit_code == 2 and result.output.startswith("error: ")


@pytest.mark.parametrize("command", [["stats"], ["export", "--format", "nanogpt"]])
def test_a_bit_rotted_shard_is_one_error_line_naming_it(project, command):
    shard = project / "shards" / "train-00000.arrow"
    stat = shard.stat()
    tokens = ShardSet.open(project / "shards", "train").manifest.shards[0].tokens
    data = bytearray(shard.read_bytes())
    data[data.index(np.array([tokens], "<i8").tobytes()) + 7] = 0x74  # the top byte of a length in the header
    shard.write_bytes(bytes(data))
    os.utime(shard, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    config = str(project / "config.yaml")
    result = CliRunner().invoke(cli, [*command, "--out", str(project / "out"), "--config", config])
    assert result.exit_code == 2, result.output
    assert result.output.count("\n") == 1
    assert result.output.startswith(f"error: {shard}: checksum ")
    assert result.output.rstrip().endswith("re-encode with 'lmprep run encode --force'")
