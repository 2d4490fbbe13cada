"""Shard writer, manifest and memory-mapped reader, built from raw IDs."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.errors import ShardError, TokenizerMismatchError
from pipeline.shards import format as shard_format
from pipeline.shards import manifest as manifest_module
from pipeline.shards.format import ShardSet, ShardWriter
from pipeline.shards.manifest import ShardStamp
from pipeline.shards.origins import Origins

FINGERPRINT = "f" * 64


def stamp(*, vocab_size: int = 1000, split: str = "train", fingerprint: str = FINGERPRINT) -> ShardStamp:
    return ShardStamp(
        split=split,
        tokenizer_fingerprint=fingerprint,
        vocab_size=vocab_size,
        special_ids={"bos": None, "eos": vocab_size - 1},
        prepared_fingerprint="p" * 64,
    )


def flat(docs: list[list[int]]) -> tuple[np.ndarray, np.ndarray, Origins]:
    ids = np.array([i for doc in docs for i in doc], dtype=np.uint32)
    offsets = np.concatenate([[0], np.cumsum([len(doc) for doc in docs])]).astype(np.int64)
    return ids, offsets, Origins.numbered(len(docs))


def write_set(directory: Path, docs: list[list[int]], *, shard_tokens: int = 8, batch: int = 3, **kw):
    writer = ShardWriter(directory, stamp(**kw), shard_tokens=shard_tokens)
    for start in range(0, len(docs), batch):
        writer.write(*flat(docs[start : start + batch]))
    return writer.close()


DOCS = [[1, 2, 3], [4, 5], [], [6, 7, 8, 9, 10], [11], [12, 13, 14, 15], [16, 17, 18, 19, 20, 21]]


@settings(max_examples=60, deadline=None)
@given(
    docs=st.lists(st.lists(st.integers(0, 999), max_size=30), max_size=40),
    shard_tokens=st.integers(1, 60),
    batch=st.integers(1, 10),
)
def test_round_trip_returns_every_document(tmp_path_factory, docs, shard_tokens, batch):
    directory = tmp_path_factory.mktemp("set")
    manifest = write_set(directory, docs, shard_tokens=shard_tokens, batch=batch)
    opened = ShardSet.open(directory, "train")
    assert [doc.tolist() for doc in opened.documents()] == docs
    assert opened.num_documents == len(docs) == manifest.rows
    assert opened.num_tokens == sum(map(len, docs))
    assert all(shard.num_tokens >= shard_tokens for shard in opened.shards[:-1])
    assert [entry.file for entry in manifest.shards] == [f"train-{i:05d}.arrow" for i in range(len(manifest.shards))]


def test_shards_are_cut_at_document_boundaries(tmp_path):
    manifest = write_set(tmp_path, DOCS, shard_tokens=8)
    assert [(entry.rows, entry.tokens) for entry in manifest.shards] == [(4, 10), (3, 11)]
    assert manifest.max_id == 21


def test_manifest_and_metadata_record_the_provenance(tmp_path):
    write_set(tmp_path, DOCS)
    manifest = json.loads((tmp_path / "train.manifest.json").read_text())
    assert manifest["tokenizer_fingerprint"] == FINGERPRINT
    assert (manifest["vocab_size"], manifest["dtype"], manifest["format_version"]) == (1000, "uint16", 2)
    assert manifest["special_ids"] == {"bos": None, "eos": 999}
    assert manifest["rows"] == len(DOCS) and manifest["tokens"] == 21
    first = manifest["shards"][0]
    schema = pa.ipc.open_stream(tmp_path / first["file"]).schema
    assert schema.metadata[b"lmprep.tokenizer_fingerprint"] == json.dumps(FINGERPRINT).encode()
    assert schema.metadata[b"lmprep.rows"] == str(first["rows"]).encode()
    assert schema.metadata[b"lmprep.prepared_fingerprint"] == json.dumps("p" * 64).encode()


@pytest.mark.parametrize(
    ("vocab_size", "top_id", "value_type"),
    [(65536, 65535, pa.uint16()), (65537, 65536, pa.uint32()), (200_000, 199_999, pa.uint32())],
)
def test_dtype_switches_above_65536(tmp_path, vocab_size, top_id, value_type):
    write_set(tmp_path, [[0, top_id], [top_id]], vocab_size=vocab_size)
    column_type = pa.ipc.open_stream(tmp_path / "train-00000.arrow").schema.field("input_ids").type
    assert column_type == pa.list_(value_type)
    opened = ShardSet.open(tmp_path, "train")
    assert opened.dtype == value_type.to_pandas_dtype()
    assert [doc.tolist() for doc in opened.documents()] == [[0, top_id], [top_id]]


def test_tokens_are_a_view_of_the_mapped_file(tmp_path):
    write_set(tmp_path, [[12345, 23456, 34567]], shard_tokens=100, vocab_size=40000)
    path = tmp_path / "train-00000.arrow"
    shard = ShardSet.open(tmp_path, "train").shards[0]
    assert not shard.tokens.flags.owndata and not shard.tokens.flags.writeable
    position = path.read_bytes().index(np.array([12345, 23456, 34567], np.uint16).tobytes())
    with open(path, "r+b") as handle:  # a shared mapping shows a change made through the file
        os.pwrite(handle.fileno(), np.array([7], np.uint16).tobytes(), position)
    assert shard.tokens.tolist() == [7, 23456, 34567]
    assert shard.offsets.tolist() == [0, 3]


def test_sample_batch_draws_windows_from_the_stream(tmp_path):
    docs = [list(range(start, start + 50)) for start in range(0, 900, 50)]
    write_set(tmp_path, docs, shard_tokens=200)
    opened = ShardSet.open(tmp_path, "train")
    batch = opened.sample_batch(np.random.default_rng(5), 16, 20)
    assert batch.shape == (16, 21) and batch.dtype == np.int64
    assert (np.diff(batch, axis=1) == 1).all()  # windows never cross a shard (the IDs restart there)
    again = opened.sample_batch(np.random.default_rng(5), 16, 20)
    assert np.array_equal(batch, again)


def test_sample_batch_refuses_a_context_longer_than_any_shard(tmp_path):
    write_set(tmp_path, DOCS, shard_tokens=8)
    with pytest.raises(ShardError, match="window of 12 tokens"):
        ShardSet.open(tmp_path, "train").sample_batch(np.random.default_rng(0), 2, 11)


def test_fingerprint_follows_content(tmp_path):
    write_set(tmp_path / "a", DOCS)
    write_set(tmp_path / "b", DOCS)
    write_set(tmp_path / "c", DOCS[:-1] + [[1]])
    assert ShardSet.open(tmp_path / "a", "train").fingerprint == ShardSet.open(tmp_path / "b", "train").fingerprint
    assert ShardSet.open(tmp_path / "a", "train").fingerprint != ShardSet.open(tmp_path / "c", "train").fingerprint


def test_another_tokenizer_is_refused_naming_both_fingerprints(tmp_path):
    write_set(tmp_path, DOCS)
    other = SimpleNamespace(fingerprint="0" * 64, vocab_size=1000)
    with pytest.raises(TokenizerMismatchError) as error:
        ShardSet.open(tmp_path, "train", tokenizer=other)
    assert FINGERPRINT in str(error.value) and "0" * 64 in str(error.value)
    assert "train.manifest.json" in str(error.value)


def test_a_tokenizer_with_another_vocab_size_is_refused(tmp_path):
    write_set(tmp_path, DOCS)
    with pytest.raises(TokenizerMismatchError, match="vocab size 1,000, the tokenizer has 999"):
        ShardSet.open(tmp_path, "train", tokenizer=SimpleNamespace(fingerprint=FINGERPRINT, vocab_size=999))


def test_the_matching_tokenizer_is_accepted(tmp_path):
    write_set(tmp_path, DOCS)
    opened = ShardSet.open(tmp_path, "train", tokenizer=SimpleNamespace(fingerprint=FINGERPRINT, vocab_size=1000))
    assert opened.tokenizer_fingerprint == FINGERPRINT and opened.vocab_size == 1000


def test_a_corrupted_shard_fails_its_checksum(tmp_path):
    write_set(tmp_path, [[12345, 23456]], shard_tokens=100, vocab_size=40000)
    path = tmp_path / "train-00000.arrow"
    data = path.read_bytes().replace(np.array([12345], np.uint16).tobytes(), np.array([1], np.uint16).tobytes())
    path.write_bytes(data)
    with pytest.raises(ShardError, match="checksum"):
        ShardSet.open(tmp_path, "train")
    assert ShardSet.open(tmp_path, "train", verify=False).shards[0].tokens.tolist() == [1, 23456]


def forge_shard(directory: Path, ids: list[int], metadata: dict[str, str], manifest_edits: dict) -> None:
    """Replace shard 0 with one written outside the writer, and point the manifest at it."""
    values, offsets = np.array(ids, np.uint16), np.array([0, len(ids)], np.int32)
    digest = shard_format._write_shard(directory / "train-00000.arrow", values, offsets, Origins.numbered(1), metadata)
    manifest_file = directory / "train.manifest.json"
    manifest = json.loads(manifest_file.read_text())
    manifest["shards"][0]["sha256"] = digest
    manifest_file.write_text(json.dumps({**manifest, **manifest_edits}))


def test_a_shard_without_metadata_is_refused(tmp_path):
    write_set(tmp_path, [[1, 2]], shard_tokens=100)
    forge_shard(tmp_path, [1, 2], {}, {})
    with pytest.raises(TokenizerMismatchError, match="tokenizer_fingerprint"):
        ShardSet.open(tmp_path, "train")


def test_a_shard_from_another_tokenizer_than_its_manifest_is_refused(tmp_path):
    write_set(tmp_path, [[1, 2]], shard_tokens=100)
    metadata = shard_format._shard_metadata(stamp(fingerprint="e" * 64), rows=1, tokens=2)
    forge_shard(tmp_path, [1, 2], metadata, {})
    with pytest.raises(TokenizerMismatchError, match="e" * 64):
        ShardSet.open(tmp_path, "train")


def test_an_id_outside_the_vocabulary_is_refused(tmp_path):
    write_set(tmp_path, [[1, 2]], shard_tokens=100)
    metadata = shard_format._shard_metadata(stamp(vocab_size=100), rows=1, tokens=2)
    forge_shard(tmp_path, [1, 500], metadata, {"vocab_size": 100, "special_ids": {"bos": None, "eos": 99}})
    with pytest.raises(ShardError, match="token ID 500 is outside the vocabulary of 100"):
        ShardSet.open(tmp_path, "train")


def test_the_writer_refuses_ids_outside_the_vocabulary(tmp_path):
    writer = ShardWriter(tmp_path, stamp(vocab_size=10), shard_tokens=5)
    with pytest.raises(ShardError, match="token ID 10"):
        writer.write(*flat([[1, 10]]))


def test_a_missing_set_names_the_manifest(tmp_path):
    with pytest.raises(ShardError, match="val.manifest.json"):
        ShardSet.open(tmp_path, "val")


def test_an_empty_split_has_no_shards(tmp_path):
    manifest = ShardWriter(tmp_path, stamp(), shard_tokens=5).close()
    opened = ShardSet.open(tmp_path, "train")
    assert manifest.shards == () and opened.num_tokens == 0 and list(opened.documents()) == []


def test_pyarrow_reads_a_shard(tmp_path):
    write_set(tmp_path, DOCS, shard_tokens=100)
    table = pa.ipc.open_stream(tmp_path / "train-00000.arrow").read_all()
    assert table.column("input_ids").to_pylist() == DOCS


def test_polars_reads_a_shard(tmp_path):
    polars = pytest.importorskip("polars")
    write_set(tmp_path, DOCS, shard_tokens=100)
    frame = polars.read_ipc_stream(tmp_path / "train-00000.arrow")
    assert frame["input_ids"].to_list() == DOCS


def test_hf_datasets_reads_a_shard(tmp_path):
    datasets = pytest.importorskip("datasets")
    write_set(tmp_path, DOCS, shard_tokens=100)
    dataset = datasets.Dataset.from_file(str(tmp_path / "train-00000.arrow"))
    assert dataset["input_ids"][:] == DOCS


def flip_top_byte_of_the_values_length(path: Path, tokens: int) -> None:
    """Damage the int64 length of the values buffer in the header, keeping the size and mtime (bit rot)."""
    stat = path.stat()
    data = bytearray(path.read_bytes())
    at = data.index(np.array([tokens], "<i8").tobytes())
    data[at + 7] = 0x74
    path.write_bytes(bytes(data))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def test_a_damaged_length_fails_the_checksum_before_the_buffers_are_read(tmp_path):
    write_set(tmp_path, [[1, 2, 3, 4, 5, 6, 7]], shard_tokens=100)
    flip_top_byte_of_the_values_length(tmp_path / "train-00000.arrow", 7)
    with pytest.raises(ShardError, match=r"train-00000.arrow: checksum .* 'lmprep run encode --force'$"):
        ShardSet.open(tmp_path, "train")


def test_a_damaged_length_is_refused_by_validation_without_a_checksum(tmp_path):
    write_set(tmp_path, [[1, 2, 3, 4, 5, 6, 7]], shard_tokens=100)
    flip_top_byte_of_the_values_length(tmp_path / "train-00000.arrow", 7)
    with pytest.raises(ShardError, match=r"train-00000.arrow: cannot read shard \(.*impossibly large"):
        ShardSet.open(tmp_path, "train", verify=False)


def test_a_missing_shard_file_is_named(tmp_path):
    write_set(tmp_path, DOCS, shard_tokens=100)
    (tmp_path / "train-00000.arrow").unlink()
    with pytest.raises(ShardError, match="train-00000.arrow: cannot read shard"):
        ShardSet.open(tmp_path, "train")


def edit_manifest(directory: Path, edit) -> None:
    path = directory / "train.manifest.json"
    manifest = json.loads(path.read_text())
    edit(manifest)
    path.write_text(json.dumps(manifest))


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        (lambda m: m["shards"][0].update(file=5), "file must be of type str, got int"),
        (lambda m: m["shards"][0].update(file="../elsewhere.arrow"), "should be 'train-00000.arrow'"),
        (lambda m: m["shards"][0].update(rows="3"), "rows must be of type int, got str"),
        (lambda m: m.update(shards=[7]), "a shard entry must be a JSON object, got int"),
        (lambda m: m.update(vocab_size=1e400), "vocab_size must be of type int, got float"),
        (lambda m: m.update(vocab_size=True), "vocab_size must be of type int, got bool"),
        (lambda m: m["special_ids"].update(eos="x"), "special_ids.eos must be an integer or null"),
        (lambda m: m.pop("split"), "split is missing"),
        (lambda m: m.update(dtype="uint32"), "dtype 'uint32' disagrees with vocab_size 1000, whose IDs are stored as "
                                             "'uint16'"),
        (lambda m: m.update(rows=8), r"rows 8 is not the sum of the shards' rows \(7\)"),
        (lambda m: m.update(tokens=20), r"tokens 20 is not the sum of the shards' tokens \(21\)"),
        (lambda m: m.update(max_id=1000), "max_id 1000 is not an ID of the vocabulary of 1000"),
        (lambda m: m.update(max_id=-1), "max_id -1 disagrees with tokens 21"),
        (lambda m: m["special_ids"].update(eos=1000), "special_ids.eos 1000 is not an ID of the vocabulary of 1000"),
    ],
)
def test_a_malformed_manifest_is_one_error(tmp_path, edit, reason):
    write_set(tmp_path, DOCS, shard_tokens=100)
    edit_manifest(tmp_path, edit)
    with pytest.raises(ShardError, match=rf"train.manifest.json: malformed shard manifest \(.*{reason}"):
        ShardSet.open(tmp_path, "train")


@pytest.mark.parametrize(
    "content",
    [b"[" * 100_000 + b"]" * 100_000, b'{"vocab_size": ' + b"9" * 5000 + b"}", b"\xff\xfe\x00garbage", b"[1, 2]"],
    ids=["deep", "huge-int", "not-utf8", "not-an-object"],
)
def test_an_unparseable_manifest_is_one_error(tmp_path, content):
    write_set(tmp_path, DOCS, shard_tokens=100)
    (tmp_path / "train.manifest.json").write_bytes(content)
    with pytest.raises(ShardError, match="train.manifest.json: malformed shard manifest"):
        ShardSet.open(tmp_path, "train")


def test_a_huge_integer_is_described_without_interpreter_advice(tmp_path):
    write_set(tmp_path, DOCS, shard_tokens=100)
    (tmp_path / "train.manifest.json").write_text('{"rows": ' + "9" * 5000 + "}")
    with pytest.raises(ShardError, match=r"manifest \(an integer of more than 4,300 digits\)") as raised:
        ShardSet.open(tmp_path, "train")
    assert "sys." not in str(raised.value)


@pytest.mark.parametrize(
    "value", [b"[" * 100_000 + b"]" * 100_000, b"\xff\xfe not json", b"not json"], ids=["deep", "not-utf8", "text"],
)
def test_unparseable_shard_metadata_is_one_error(tmp_path, value):
    write_set(tmp_path, [[1, 2]], shard_tokens=100)
    metadata = {**shard_format._shard_metadata(stamp(), rows=1, tokens=2), "lmprep.split": value}
    forge_shard(tmp_path, [1, 2], metadata, {})
    with pytest.raises(ShardError, match="train-00000.arrow: malformed shard metadata"):
        ShardSet.open(tmp_path, "train")


def test_a_manifest_and_shard_metadata_are_read_within_bounds(tmp_path, monkeypatch):
    write_set(tmp_path, [[1, 2]], shard_tokens=100)
    monkeypatch.setattr(manifest_module, "MAX_MANIFEST_BYTES", 100)
    with pytest.raises(ShardError, match=r"^shard manifest .*train.manifest.json is larger than 100 bytes, .*re-enc"):
        ShardSet.open(tmp_path, "train")
    monkeypatch.undo()
    metadata = {**shard_format._shard_metadata(stamp(), rows=1, tokens=2),
                "lmprep.split": b'"' + b"x" * shard_format.MAX_METADATA_BYTES + b'"'}
    forge_shard(tmp_path, [1, 2], metadata, {})
    with pytest.raises(ShardError, match="shard metadata 'lmprep.split' is larger than 1,048,576 bytes"):
        ShardSet.open(tmp_path, "train")


def test_a_shard_with_another_schema_is_refused(tmp_path):
    write_set(tmp_path, [[1, 2]], shard_tokens=100)
    path = tmp_path / "train-00000.arrow"
    table = pa.table({"input_ids": pa.array([1, 2], pa.int64())})
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    with pytest.raises(ShardError, match="is not a token shard schema"):
        ShardSet.open(tmp_path, "train", verify=False)


def test_a_shard_with_ids_above_the_manifests_max_id_is_named(tmp_path):
    write_set(tmp_path, DOCS, shard_tokens=8)  # shard 0 holds IDs up to 10, shard 1 up to 21
    edit_manifest(tmp_path, lambda m: m.update(max_id=20))
    with pytest.raises(ShardError, match=r"train-00001.arrow: token ID 21 is above the manifest's max_id 20;"):
        ShardSet.open(tmp_path, "train")


def test_a_max_id_above_every_shards_ids_is_refused(tmp_path):
    write_set(tmp_path, DOCS, shard_tokens=8)
    edit_manifest(tmp_path, lambda m: m.update(max_id=30))
    with pytest.raises(ShardError, match=r"train.manifest.json: max_id 30, but the largest token ID in the shards "
                                         r"is 21;"):
        ShardSet.open(tmp_path, "train")


def test_a_shard_stored_in_another_dtype_than_the_manifests_is_refused(tmp_path):
    write_set(tmp_path, [[1, 2]], shard_tokens=100)
    metadata = shard_format._shard_metadata(stamp(), rows=1, tokens=2)  # says uint16, as the manifest does
    digest = shard_format._write_shard(tmp_path / "train-00000.arrow", np.array([1, 2], np.uint32),
                                 np.array([0, 2], np.int32), Origins.numbered(1), metadata)
    edit_manifest(tmp_path, lambda m: m["shards"][0].update(sha256=digest))
    with pytest.raises(ShardError, match=r"train-00000.arrow: the token IDs are stored as uint32, but the "
                                         r"manifest's dtype is uint16;"):
        ShardSet.open(tmp_path, "train", verify=False)


def test_a_manifest_of_another_split_is_refused(tmp_path):
    write_set(tmp_path, DOCS, shard_tokens=100)
    (tmp_path / "val.manifest.json").write_bytes((tmp_path / "train.manifest.json").read_bytes())
    with pytest.raises(ShardError, match=r"val.manifest.json: the manifest of split 'val' says split 'train';"):
        ShardSet.open(tmp_path, "val")
