"""The export formats, read back by their consumers: nanoGPT's ``.bin``/``meta.pkl`` (as its train.py reads them)
and Megatron's indexed dataset (with megatron-core's own ``IndexedDataset``), below and above 65,536 IDs."""

from __future__ import annotations

import json
import pickle
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from pipeline.errors import ConfigError
from pipeline.shards import export, megatron
from pipeline.shards.format import ShardSet, ShardWriter
from pipeline.shards.manifest import ShardStamp
from pipeline.shards.origins import Origins

DOCS = [[1, 2, 3], [4, 5], [], [6, 7, 8, 9, 10], [11], [12, 13, 14, 15], [16, 17, 18, 19, 20, 21]]


@pytest.fixture(scope="module")
def indexed_dataset():
    """megatron-core's reader and writer, imported by the tests that use them rather than as the file is collected:
    the import takes seconds (torch's compiler and distributed packages), in every worker that collects the file."""
    with warnings.catch_warnings():  # megatron-core (pinned in the test extra) warns that Transformer Engine is absent
        warnings.simplefilter("ignore")
        from megatron.core.datasets import indexed_dataset
    return indexed_dataset


def write_set(directory: Path, docs: list[list[int]], vocab_size: int, *, split: str = "train",
              shard_tokens: int = 6) -> ShardSet:
    """A shard set of ``docs`` (each ending with the EOS ``vocab_size - 1``, as encode appends it), cut into
    several shards."""
    eos = vocab_size - 1
    stamp = ShardStamp(split=split, tokenizer_fingerprint="f" * 64, vocab_size=vocab_size,
                       special_ids={"bos": None, "eos": eos}, prepared_fingerprint="p" * 64)
    writer = ShardWriter(directory, stamp, shard_tokens=shard_tokens)
    for doc in docs:
        writer.write(np.array([*doc, eos], np.uint32), np.array([0, len(doc) + 1]), Origins.numbered(1))
    writer.close()
    return ShardSet.open(directory, split)


def tokenizer_of(shard_set: ShardSet) -> SimpleNamespace:
    """What the export reads of a byte-kind tokenizer whose vocabulary the test chooses."""
    return SimpleNamespace(vocab_size=shard_set.vocab_size, fingerprint=shard_set.tokenizer_fingerprint, kind="byte")


def documents(shard_set: ShardSet) -> list[list[int]]:
    return [doc.tolist() for doc in shard_set.documents()]


@pytest.mark.parametrize("vocab_size", [300, 65_499, 65_500, 70_000])
def test_megatron_core_reads_every_document_of_the_shards(tmp_path, vocab_size, indexed_dataset):
    docs = [[vocab_size - 2 - i for i in doc] for doc in DOCS]  # IDs at the top of the vocabulary
    shard_set = write_set(tmp_path / "shards", docs, vocab_size)
    assert len(shard_set.shards) > 1
    out = tmp_path / "out"
    out.mkdir()
    export.export_shards([shard_set], tokenizer_of(shard_set), out, ["megatron"])

    dataset = indexed_dataset.IndexedDataset(str(out / "train_text_document"))
    assert len(dataset) == shard_set.num_documents == len(DOCS)
    assert [dataset[i].tolist() for i in range(len(dataset))] == documents(shard_set)
    assert dataset.document_indices.tolist() == list(range(len(DOCS) + 1))
    assert dataset.sequence_lengths.tolist() == [len(doc) + 1 for doc in DOCS]
    assert all(dataset[i][-1] == vocab_size - 1 for i in range(len(dataset)))  # the EOS encode appended
    assert dataset.index.dtype == indexed_dataset.DType.optimal_dtype(vocab_size)  # as preprocess_data.py picks


def test_the_files_are_byte_for_byte_what_megatron_core_writes(tmp_path, indexed_dataset):
    """megatron-core's own builder, fed each document as ``tools/preprocess_data.py`` feeds it, writes the same
    bytes."""
    for vocab_size in (300, 70_000):
        shard_set = write_set(tmp_path / f"shards-{vocab_size}", DOCS, vocab_size)
        ours = tmp_path / f"ours-{vocab_size}"
        ours.mkdir()
        megatron.write_indexed_dataset(shard_set, ours)
        prefix = str(tmp_path / f"theirs-{vocab_size}")
        builder = indexed_dataset.IndexedDatasetBuilder(
            prefix + ".bin", dtype=indexed_dataset.DType.optimal_dtype(vocab_size))
        for doc in shard_set.documents():
            builder.add_document(doc.tolist(), [len(doc)])
        builder.finalize(prefix + ".idx")
        for suffix in (".bin", ".idx"):
            assert (ours / f"train_text_document{suffix}").read_bytes() == Path(prefix + suffix).read_bytes()


def test_each_megatron_file_has_a_sidecar_naming_the_tokenizer(tmp_path):
    shard_set = write_set(tmp_path / "shards", DOCS, 300, split="val")
    out = tmp_path / "out"
    out.mkdir()
    written = export.export_shards([shard_set], tokenizer_of(shard_set), out, ["megatron"])
    assert [(split, path.name) for split, path in written] == [
        ("val", "val_text_document.bin"), ("val", "val_text_document.idx")]
    for _, path in written:
        sidecar = json.loads(export.sidecar_path(path).read_text())
        assert sidecar["tokenizer_fingerprint"] == "f" * 64 and sidecar["export_format"] == "megatron"
        assert sidecar["documents"] == len(DOCS) and sidecar["file"] == path.name


def test_nanogpt_exports_uint32_above_65536_ids_and_meta_says_so(tmp_path):
    """Above 65,536 IDs the ``.bin`` holds uint32 and ``meta.pkl``'s ``dtype`` says to read it so."""
    docs = [[69_000 + i for i in doc] for doc in DOCS]
    shard_set = write_set(tmp_path / "shards", docs, 70_000)
    out = tmp_path / "out"
    out.mkdir()
    export.export_shards([shard_set], tokenizer_of(shard_set), out, ["parquet", "nanogpt"])
    with open(out / "meta.pkl", "rb") as f:
        meta = pickle.load(f)
    assert meta["dtype"] == "uint32" and meta["vocab_size"] == 70_000
    data = np.memmap(out / "train.bin", dtype=np.dtype(meta["dtype"]), mode="r")
    assert data.tolist() == [i for doc in documents(shard_set) for i in doc]
    assert max(data) == 69_999
    assert json.loads((out / "train.bin.json").read_text())["dtype"] == "uint32"
    assert (out / "train.parquet").exists()  # no longer skipped with a refused nanoGPT export


def test_nanogpt_keeps_uint16_up_to_65536_ids(tmp_path):
    shard_set = write_set(tmp_path / "shards", [[65_534, 0]], 65_536)
    out = tmp_path / "out"
    out.mkdir()
    export.export_shards([shard_set], tokenizer_of(shard_set), out, ["nanogpt"])
    assert pickle.loads((out / "meta.pkl").read_bytes())["dtype"] == "uint16"
    assert np.memmap(out / "train.bin", dtype=np.uint16, mode="r").tolist() == [65_534, 0, 65_535]


def test_a_format_that_cannot_hold_the_vocabulary_is_refused_before_any_file_is_written(tmp_path):
    shard_set = write_set(tmp_path / "shards", DOCS, (1 << 31) + 1)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(ConfigError, match=r"export.formats: megatron holds at most 2,147,483,648 IDs, but the "
                                          r"tokenizer \(ffffffffffff\) has 2,147,483,649"):
        export.export_shards([shard_set], tokenizer_of(shard_set), out, ["parquet", "megatron"])
    assert list(out.iterdir()) == []
