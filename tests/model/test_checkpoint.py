"""Checkpoints: round trip, the tokenizer guard, pickle refusal, atomic writes."""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import subprocess
import sys

import pytest
import torch
from conftest import FakeTokenizer, resave_checkpoint
from safetensors import safe_open
from safetensors.torch import save_file

from pipeline.errors import CheckpointError, TokenizerMismatchError
from pipeline.model import checkpoint as ckpt
from pipeline.model import integrity
from pipeline.model.bigram import BigramLM, ModelConfig

# "th" then "the" vs "he" then "the": same vocab size, different meanings.
TOKENIZER_A = FakeTokenizer(merges=[(116, 104), (256, 101)])
TOKENIZER_B = FakeTokenizer(merges=[(104, 101), (116, 256)])


def _save(tmp_path, tokenizer=TOKENIZER_A, *, optimizer=None, model=None):
    model = model or BigramLM(ModelConfig(vocab_size=tokenizer.vocab_size, dim=4))
    return ckpt.save_checkpoint(
        tmp_path / "run",
        model=model,
        step=7,
        tokenizer=tokenizer,
        shard_fingerprint="f" * 64,
        train_config={"dim": 4, "lr": 0.01},
        optimizer=optimizer,
        numpy_rng_state={"bit_generator": "PCG64", "state": {"state": 2**127 + 3, "inc": 5}, "has_uint32": 0,
                         "uinteger": 0},
    )


def test_round_trip_restores_weights_and_metadata(tmp_path):
    torch.manual_seed(0)
    model = BigramLM(ModelConfig(vocab_size=TOKENIZER_A.vocab_size, dim=4, tie_weights=True))
    path = _save(tmp_path, model=model)
    assert path == tmp_path / "run" / "checkpoint.safetensors"
    loaded = ckpt.load_checkpoint(tmp_path / "run", TOKENIZER_A)
    assert loaded.step == 7
    assert loaded.model_config == model.config
    assert loaded.shard_fingerprint == "f" * 64
    assert loaded.train_config == {"dim": 4, "lr": 0.01}
    assert loaded.numpy_rng_state["state"]["state"] == 2**127 + 3
    assert loaded.tokenizer.merge_pieces == [("t", "h"), ("th", "e")]
    assert torch.equal(loaded.model.embed.weight, model.embed.weight)


def test_optimizer_state_round_trips(tmp_path):
    model = BigramLM(ModelConfig(vocab_size=TOKENIZER_A.vocab_size, dim=4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    model.loss(torch.tensor([[1, 2]]), torch.tensor([[2, 3]])).backward()
    optimizer.step()
    loaded = ckpt.load_checkpoint(_save(tmp_path, optimizer=optimizer, model=model), TOKENIZER_A)
    restored = torch.optim.AdamW(loaded.model.parameters(), lr=0.1)
    restored.load_state_dict(loaded.optimizer_state)
    original = optimizer.state_dict()
    for param_id, state in restored.state_dict()["state"].items():
        for key, value in state.items():
            assert torch.equal(value, original["state"][param_id][key])


def test_guard_refuses_other_tokenizer_with_equal_vocab_size(tmp_path):
    assert TOKENIZER_A.vocab_size == TOKENIZER_B.vocab_size
    _save(tmp_path)
    with pytest.raises(TokenizerMismatchError) as caught:
        ckpt.load_checkpoint(tmp_path / "run", TOKENIZER_B)
    message = str(caught.value)
    assert TOKENIZER_A.fingerprint in message and TOKENIZER_B.fingerprint in message
    assert "vocab size 258" in message
    assert "first differing merge is #0: checkpoint 't'+'h' (IDs 116, 104) vs tokenizer 'h'+'e'" in message


def test_guard_names_extra_merges_and_other_fields(tmp_path):
    longer = FakeTokenizer(merges=[*TOKENIZER_A.merges, (32, 256)])
    _save(tmp_path)
    with pytest.raises(TokenizerMismatchError, match="has 2 merges and the given one 3; the first 2 agree"):
        ckpt.load_checkpoint(tmp_path / "run", longer)
    char_kind = FakeTokenizer(merges=TOKENIZER_A.merges, kind="char")
    with pytest.raises(TokenizerMismatchError, match="the merges agree but kind differs"):
        ckpt.load_checkpoint(tmp_path / "run", char_kind)


def test_non_utf8_pieces_render_readably():
    record = ckpt.TokenizerRecord.of(FakeTokenizer(merges=[(0xE2, 0x82)]))
    assert record.merge_pieces == [("\\xe2", "\\x82")]


class _Exploit:
    """Unpickling this creates the marker file: proof that code ran."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.mark.parametrize("writer", ["torch.save", "pickle"])
def test_malicious_pickle_is_refused_without_running(tmp_path, writer):
    marker = tmp_path / "pwned"
    target = tmp_path / "run" / "checkpoint.safetensors"
    target.parent.mkdir()
    payload = {"model.embed.weight": torch.zeros(2, 2), "evil": _Exploit(str(marker))}
    if writer == "torch.save":
        torch.save(payload, target)
    else:
        target.write_bytes(pickle.dumps(payload))
    with pytest.raises(CheckpointError, match="refuses to load it because unpickling can run arbitrary code"):
        ckpt.load_checkpoint(tmp_path / "run", TOKENIZER_A)
    assert not marker.exists()


def test_foreign_safetensors_and_missing_file_are_refused(tmp_path):
    with pytest.raises(CheckpointError, match="no checkpoint at .*; train one with `lmprep run train` or give "
                       "the path of an existing checkpoint$"):
        ckpt.read_checkpoint(tmp_path / "absent")
    foreign = tmp_path / "other.safetensors"
    save_file({"w": torch.zeros(1)}, str(foreign))
    with pytest.raises(CheckpointError, match="without lmprep checkpoint metadata"):
        ckpt.read_checkpoint(foreign)
    garbage = tmp_path / "garbage.safetensors"
    garbage.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}      ")
    with pytest.raises(CheckpointError, match="not a readable safetensors checkpoint"):
        ckpt.read_checkpoint(garbage)


def test_crash_while_writing_keeps_previous_checkpoint(tmp_path, monkeypatch):
    _save(tmp_path)
    before = (tmp_path / "run" / "checkpoint.safetensors").read_bytes()

    def crash(tensors, filename, metadata=None):
        with open(filename, "wb") as handle:
            handle.write(b"torn")
        raise KeyboardInterrupt

    monkeypatch.setattr("safetensors.torch.save_file", crash)
    with pytest.raises(KeyboardInterrupt):
        _save(tmp_path)
    assert (tmp_path / "run" / "checkpoint.safetensors").read_bytes() == before
    assert os.listdir(tmp_path / "run") == ["checkpoint.safetensors"]


def rewrite_metadata(path, edit) -> None:
    """Re-save a checkpoint with ``edit`` applied to its metadata (a JSON document, or its raw text)."""
    resave_checkpoint(path, metadata=edit)


def test_metadata_nested_too_deeply_is_refused(tmp_path):
    path = _save(tmp_path)
    rewrite_metadata(path, "[" * 100_000 + "]" * 100_000)
    with pytest.raises(CheckpointError, match="metadata that is not JSON: nested too deeply"):
        ckpt.read_header(path)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: {**m, "model": {**m["model"], "vocab_size": 10_000_000, "dim": 10_000}}, "does not match"),
        (lambda m: {**m, "model": {**m["model"], "vocab_size": 2**62, "dim": 2**62}}, "does not match"),
        (lambda m: {**m, "model": {**m["model"], "tie_weights": True}}, "does not match"),
        (lambda m: {**m, "tokenizer": {**m["tokenizer"], "vocab_size": 1e400}}, "does not match its checksum"),
        (lambda m: {**m, "tokenizer": {**m["tokenizer"], "vocab_size": 300}}, "its tokenizer record says 300"),
    ],
    ids=["400GB", "overflowing", "tied", "infinite", "vocab"],
)
def test_a_model_config_that_does_not_fit_the_tensors_is_refused_before_building(tmp_path, edit, message):
    path = _save(tmp_path)
    rewrite_metadata(path, edit)
    with pytest.raises(CheckpointError, match=message):
        ckpt.read_checkpoint(path)


def test_nan_weights_are_refused(tmp_path):
    model = BigramLM(ModelConfig(vocab_size=TOKENIZER_A.vocab_size, dim=4))
    with torch.no_grad():
        model.head.weight[3, 1] = float("nan")
    with pytest.raises(CheckpointError, match=r"model.head.weight holds NaN or infinite weights"):
        ckpt.read_checkpoint(_save(tmp_path, model=model))


def test_the_header_is_read_without_tensors(tmp_path, monkeypatch):
    path = _save(tmp_path)
    monkeypatch.setattr(ckpt, "_read_tensors", lambda file: pytest.fail("a tensor was read"))
    header = ckpt.read_header(path)
    assert header.step == 7 and header.tokenizer.fingerprint == TOKENIZER_A.fingerprint
    assert header.shapes["model.embed.weight"] == (TOKENIZER_A.vocab_size, 4)
    ckpt.check_tokenizer(header, TOKENIZER_A)
    with pytest.raises(TokenizerMismatchError):
        ckpt.check_tokenizer(header, TOKENIZER_B)


def test_the_guard_refuses_an_equal_fingerprint_with_another_vocab_size(tmp_path):
    header = ckpt.read_header(_save(tmp_path))
    forged = dataclasses.replace(header, tokenizer=dataclasses.replace(header.tokenizer, vocab_size=999))
    with pytest.raises(TokenizerMismatchError, match="vocab size 999"):
        ckpt.check_tokenizer(forged, TOKENIZER_A)


def flip_byte(path, offset_from_end: int) -> None:
    """Damage a file in place: invert one byte, counted from its end (the last tensor's data)."""
    data = bytearray(path.read_bytes())
    data[-offset_from_end] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_flipped_byte_in_the_tensor_data_is_refused_on_every_load(tmp_path):
    path = _save(tmp_path)
    flip_byte(path, 3)
    ckpt.read_header(path)  # the header is intact: a header-only read cannot tell
    with pytest.raises(CheckpointError, match=r"checkpoint .* is damaged: tensor \S+ \(torch\.\w+, shape \[.*\]\) "
                                              r"does not match its checksum; retrain it"):
        ckpt.load_checkpoint(path, TOKENIZER_A)


def test_the_sealed_header_checks_every_tensor_as_a_full_read_does_without_torch(tmp_path, monkeypatch):
    """``status`` judges a checkpoint by its sealed header: every tensor's checksum taken from the file's bytes, as
    ``read_checkpoint`` takes it from the loaded tensors (float32 weights, AdamW's scalar steps, the uint8 RNG)."""
    model, optimizer = trained_optimizer()
    path = _save(tmp_path, optimizer=optimizer, model=model)
    monkeypatch.setattr(ckpt, "_read_tensors", lambda file: pytest.fail("a tensor was loaded"))
    header = ckpt.read_sealed_header(path)
    assert (header.step, header.tokenizer) == (7, ckpt.read_header(path).tokenizer)
    with open(path, "rb") as handle:
        stored = ckpt._stored_tensors(path, handle)
        assert {code for code, _, _ in stored.values()} == {"F32", "U8"}
        assert {name: integrity.stored_checksum(*entry) for name, entry in stored.items()} == header.checksums


@pytest.mark.parametrize("damage", ["a flipped byte", "a shape that lies"])
def test_the_sealed_header_refuses_damaged_tensors_as_a_full_read_does(tmp_path, damage):
    model, optimizer = trained_optimizer()
    path = _save(tmp_path, optimizer=optimizer, model=model)
    if damage == "a flipped byte":
        flip_byte(path, 3)
    else:
        entry = f'"optimizer.0.exp_avg":{{"dtype":"F32","shape":[{TOKENIZER_A.vocab_size},4]'.encode()
        path.write_bytes(path.read_bytes().replace(entry, entry.replace(b"[258,4]", b"[4,258]")))
    with pytest.raises(CheckpointError) as full:
        ckpt.read_checkpoint(path)
    with pytest.raises(CheckpointError) as sealed:
        ckpt.read_sealed_header(path)
    assert str(sealed.value) == str(full.value) and "does not match its checksum" in str(full.value)


def test_changed_metadata_is_refused_even_by_a_header_only_read(tmp_path):
    path = _save(tmp_path)
    data = path.read_bytes()
    step = b'\\"step\\":7'  # in the header's JSON, a string holding JSON
    assert data.count(step) == 1
    path.write_bytes(data.replace(step, step[:-1] + b"8"))  # same length: a valid file that lies
    with pytest.raises(CheckpointError, match="is damaged: its metadata does not match its checksum"):
        ckpt.read_header(path)


def trained_optimizer() -> tuple[BigramLM, torch.optim.AdamW]:
    model = BigramLM(ModelConfig(vocab_size=TOKENIZER_A.vocab_size, dim=4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    model.loss(torch.tensor([[1, 2]]), torch.tensor([[2, 3]])).backward()
    optimizer.step()
    return model, optimizer


def test_a_header_that_lies_about_an_optimizer_tensors_shape_is_refused(tmp_path):
    """The same element count under another shape: safetensors and AdamW's load accept it, the checksum does not."""
    model, optimizer = trained_optimizer()
    path = _save(tmp_path, optimizer=optimizer, model=model)
    data = path.read_bytes()
    entry = f'"optimizer.0.exp_avg":{{"dtype":"F32","shape":[{TOKENIZER_A.vocab_size},4]'.encode()
    assert data.count(entry) == 1
    path.write_bytes(data.replace(entry, entry.replace(b"[258,4]", b"[4,258]")))
    with pytest.raises(CheckpointError, match=r"tensor optimizer.0.exp_avg \(torch.float32, shape \[4, 258\]\) "
                                              "does not match its checksum"):
        ckpt.read_checkpoint(path)


def test_a_checkpoint_without_checksums_is_refused(tmp_path):
    path = _save(tmp_path)
    with safe_open(str(path), framework="pt") as handle:
        tensors = {name: handle.get_tensor(name) for name in handle.keys()}
        metadata = json.loads(handle.metadata()["lmprep"])
    del metadata["checksums"]
    save_file(tensors, str(path), metadata={"lmprep": json.dumps(metadata)})
    with pytest.raises(CheckpointError, match="has no checksums .* so its contents cannot be verified; retrain it"):
        ckpt.read_header(path)


def test_the_bytes_of_a_checkpoint_do_not_depend_on_the_process(tmp_path):
    """safetensors writes several metadata entries in an order that changes between processes."""
    script = ("import sys, torch; sys.path.insert(0, sys.argv[2]); from conftest import FakeTokenizer; "
              "from pipeline.model.bigram import BigramLM, ModelConfig; from pipeline.model import checkpoint; "
              "tokenizer = FakeTokenizer(merges=[(116, 104)]); torch.manual_seed(0); "
              "model = BigramLM(ModelConfig(vocab_size=tokenizer.vocab_size, dim=4)); "
              "checkpoint.save_checkpoint(sys.argv[1], model=model, step=1, tokenizer=tokenizer, "
              "shard_fingerprint=None, train_config={'dim': 4})")
    tests = os.path.dirname(os.path.dirname(__file__))
    for name in ("a", "b", "c", "d"):
        subprocess.run([sys.executable, "-c", script, str(tmp_path / name), tests], check=True,
                       env={**os.environ, "PYTHONHASHSEED": "random"})
    files = {(tmp_path / name / "checkpoint.safetensors").read_bytes() for name in ("a", "b", "c", "d")}
    assert len(files) == 1


def test_an_optimizer_state_of_another_shape_is_refused_before_resuming(tmp_path):
    """Checksums that match prove the bytes, not that the writer was right: the shapes are checked too."""
    model, optimizer = trained_optimizer()
    path = _save(tmp_path, optimizer=optimizer, model=model)

    def transposed(tensors):
        tensors["optimizer.0.exp_avg"] = tensors["optimizer.0.exp_avg"].t().contiguous()

    resave_checkpoint(path, tensors=transposed)
    with pytest.raises(CheckpointError, match=r"optimizer state exp_avg has shape \[4, 258\], its parameter \[258, 4"):
        ckpt.read_checkpoint(path)


def test_a_flipped_byte_in_the_name_of_the_checksums_blames_the_header(tmp_path):
    """One byte of the header flipped where it names the checksums ('checksums' -> 'checksuls') left a file
    that the message blamed on 'an lmprep that did not record them'."""
    path = _save(tmp_path)
    data = path.read_bytes()
    at = data.index(b'checksums\\"')  # the metadata is a JSON text inside the header's JSON
    path.write_bytes(data[:at + 7] + b"l" + data[at + 8:])
    with pytest.raises(CheckpointError, match=r"has no checksums \(its header is damaged, or an lmprep that did not "
                                              r"record them wrote it\)"):
        ckpt.read_header(path)
