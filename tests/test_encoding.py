"""Encoding prepared documents into shards with worker pools."""

from __future__ import annotations

import json
import random
import re
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from pipeline import documents, encoding
from pipeline.encoding import add_special_ids, encode_corpus, encode_split
from pipeline.errors import TokenizerError
from pipeline.shards import ShardSet
from pipeline.tokenizer import Tokenizer

WORDS = "the quick brown fox jumps over lazy dog données naïve café 東京 мир 🙂 tab\there new\nline".split(" ")


def make_texts(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    texts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 60))) for _ in range(count)]
    return texts + ["", "<|endoftext|> is plain text here"]


@pytest.fixture(scope="session")
def tokenizer_path(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tokenizer") / "tokenizer.json"
    tokenizer = Tokenizer.train(make_texts(300, seed=1), vocab_size=400, special_tokens=["<|endoftext|>", "<|bos|>"])
    tokenizer.save(path)
    return path


@pytest.fixture
def prepared(tmp_path) -> Path:
    directory = tmp_path / "prepared"
    directory.mkdir()
    documents.write_documents(documents.prepared_path(directory, "train"), make_texts(700, seed=2))
    documents.write_documents(documents.prepared_path(directory, "val"), make_texts(40, seed=3))
    return directory


def encode(prepared: Path, output: Path, tokenizer_path: Path, executor, **options) -> None:
    tokenizer = Tokenizer.load(tokenizer_path)
    options = {"shard_tokens": 2000, "task_bytes": 2000, "eos_id": tokenizer.special_tokens["<|endoftext|>"], **options}
    encode_corpus(prepared, output, tokenizer_path=tokenizer_path, executor=executor, **options)


def test_add_special_ids_wraps_every_document():
    ids, offsets = np.array([5, 6, 7], np.uint32), np.array([0, 2, 2, 3])
    both, both_offsets = add_special_ids(ids, offsets, bos_id=1, eos_id=9)
    assert both.tolist() == [1, 5, 6, 9, 1, 9, 1, 7, 9] and both_offsets.tolist() == [0, 4, 6, 9]
    bos, _ = add_special_ids(ids, offsets, bos_id=1, eos_id=None)
    assert bos.tolist() == [1, 5, 6, 1, 1, 7]
    plain, plain_offsets = add_special_ids(ids, offsets, bos_id=None, eos_id=None)
    assert plain.tolist() == [5, 6, 7] and plain_offsets.tolist() == [0, 2, 2, 3]


def test_shards_decode_back_to_the_prepared_documents(tmp_path, prepared, tokenizer_path):
    with ThreadPoolExecutor(2) as executor:
        encode(prepared, tmp_path / "shards", tokenizer_path, executor)
    tokenizer = Tokenizer.load(tokenizer_path)
    eos = tokenizer.special_tokens["<|endoftext|>"]
    for split in ("train", "val"):
        opened = ShardSet.open(tmp_path / "shards", split, tokenizer=tokenizer)
        decoded = []
        for ids in opened.documents():
            assert ids[-1] == eos and eos not in ids[:-1]  # added by ID, never parsed from the text
            decoded.append(tokenizer.decode(ids[:-1].tolist()))
        assert decoded == list(documents.iter_documents(documents.prepared_path(prepared, split)))
        assert len(opened.shards) > (1 if split == "train" else 0)


def test_bos_and_eos_are_recorded(tmp_path, prepared, tokenizer_path):
    specials = Tokenizer.load(tokenizer_path).special_tokens
    bos, eos = specials["<|bos|>"], specials["<|endoftext|>"]
    with ThreadPoolExecutor(1) as executor:
        encode(prepared, tmp_path / "shards", tokenizer_path, executor, bos_id=bos, eos_id=eos)
    opened = ShardSet.open(tmp_path / "shards", "val")
    assert opened.special_ids == {"bos": bos, "eos": eos}
    assert all(ids[0] == bos and ids[-1] == eos for ids in opened.documents())


def test_output_is_identical_for_any_worker_count(tmp_path, prepared, tokenizer_path):
    for workers in (1, 2):
        with ProcessPoolExecutor(workers) as executor:
            encode(prepared, tmp_path / f"w{workers}", tokenizer_path, executor, max_in_flight=3)
    one, two = sorted((tmp_path / "w1").iterdir()), sorted((tmp_path / "w2").iterdir())
    assert [path.name for path in one] == [path.name for path in two]
    assert all(a.read_bytes() == b.read_bytes() for a, b in zip(one, two))


def test_tasks_are_cut_by_bytes_and_keep_every_document(prepared, tokenizer_path):
    tokenizer = Tokenizer.load(tokenizer_path)
    source = documents.prepared_path(prepared, "train")
    tasks = list(encoding.iter_tasks(source, tokenizer, str(tokenizer_path), bos_id=None, eos_id=None,
                                     task_bytes=500))
    assert len(tasks) > 10
    texts = [text for task in tasks for text in _task_texts(task)]
    assert texts == list(documents.iter_documents(source))


def _task_texts(task: encoding.EncodeTask) -> list[str]:
    data, offsets = task.data, task.offsets.tolist()
    return [data[a:b].decode() for a, b in zip(offsets, offsets[1:])]


def test_an_interrupted_encode_leaves_the_previous_set(tmp_path, prepared, tokenizer_path, monkeypatch):
    output = tmp_path / "shards"
    with ThreadPoolExecutor(2) as executor:
        encode(prepared, output, tokenizer_path, executor)
    before = {path.name: path.read_bytes() for path in output.iterdir()}
    calls = []

    def failing(task):
        calls.append(task)
        if len(calls) == 3:
            raise RuntimeError("killed")
        return real(task)

    real = encoding.encode_task
    monkeypatch.setattr(encoding, "encode_task", failing)
    with ThreadPoolExecutor(1) as executor, pytest.raises(RuntimeError, match="killed"):
        encode(prepared, output, tokenizer_path, executor, shard_tokens=50)
    assert {path.name: path.read_bytes() for path in output.iterdir()} == before
    assert [path.name for path in tmp_path.iterdir() if path.name.startswith(".")] == []


def test_an_eos_id_outside_the_vocabulary_is_refused(tmp_path, prepared, tokenizer_path):
    with ThreadPoolExecutor(1) as executor, pytest.raises(TokenizerError, match="eos ID 100000"):
        encode_split(documents.prepared_path(prepared, "val"), tmp_path, "val", tokenizer_path=tokenizer_path,
                     executor=executor, shard_tokens=10, eos_id=100_000)


# --- the tokenizer and encode stages


def stage_config(tmp_path: Path, prepared: Path, **sections):
    from pipeline.config import parse_config

    raw = {
        "prepare": {"output_dir": str(prepared)},
        "tokenizer": {"vocab_size": 300, "special_tokens": ["<|endoftext|>"], "workers": 1,
                      "output": str(tmp_path / "tok" / "tokenizer.json")},
        "encode": {"shard_tokens": 500, "workers": 1, "output_dir": str(tmp_path / "shards")},
    }
    for name, values in sections.items():
        raw[name] = {**raw[name], **values}
    return parse_config(raw)


def test_stages_train_a_tokenizer_then_encode(tmp_path, prepared):
    from stages import encode as encode_stage
    from stages import tokenize as tokenize_stage

    config = stage_config(tmp_path, prepared)
    tokenizer_stage = tokenize_stage.build(config)
    assert tokenizer_stage.deps == (str(prepared / "train.arrow"),)
    assert "tokenizer.workers" not in tokenizer_stage.params and "tokenizer.vocab_size" in tokenizer_stage.params
    tokenizer_stage.run()
    stage = encode_stage.build(config)
    assert stage.deps == (str(prepared / "train.arrow"), str(prepared / "val.arrow"), config.tokenizer.output)
    assert stage.outs == (str(tmp_path / "shards"),)
    assert "encode.workers" not in stage.params
    stage.run()
    tokenizer = Tokenizer.load(config.tokenizer.output)
    assert ShardSet.open(tmp_path / "shards", "val", tokenizer=tokenizer).num_documents == 42


def test_a_frozen_tokenizer_is_copied_and_does_not_depend_on_the_data(tmp_path, prepared, tokenizer_path):
    from stages import tokenize as tokenize_stage

    config = stage_config(tmp_path, prepared, tokenizer={"path": str(tokenizer_path)})
    stage = tokenize_stage.build(config)
    directory = Path(config.tokenizer.output).parent
    assert stage.deps == (str(tokenizer_path),)
    assert stage.outs == (config.tokenizer.output, str(directory / "tokenizer_config.json"),
                          str(directory / "special_tokens_map.json"))
    stage.run()
    assert Path(config.tokenizer.output).read_bytes() == tokenizer_path.read_bytes()
    assert json.loads((directory / "special_tokens_map.json").read_text()) == {"eos_token": "<|endoftext|>"}


def test_an_eos_token_the_tokenizer_lacks_names_the_key(tmp_path, prepared, tokenizer_path):
    from pipeline.errors import ConfigError
    from stages import encode as encode_stage

    config = stage_config(tmp_path, prepared, tokenizer={"path": str(tokenizer_path)},
                          encode={"eos_token": "<|eot|>"})
    Path(config.tokenizer.output).parent.mkdir()
    Path(config.tokenizer.output).write_bytes(tokenizer_path.read_bytes())
    with pytest.raises(ConfigError, match=re.escape("encode.eos_token '<|eot|>' is not a special token")):
        encode_stage.run(config)


def test_the_tokenizer_stage_refuses_a_role_whose_token_is_not_special(tmp_path, prepared, tokenizer_path):
    """transformers would add such a token as a new one, with an ID lmprep never made."""
    from pipeline.errors import ConfigError
    from stages import tokenize as tokenize_stage

    config = stage_config(tmp_path, prepared, tokenizer={"path": str(tokenizer_path)},
                          encode={"bos_token": "<|eot|>"})
    with pytest.raises(ConfigError, match=re.escape("encode.bos_token '<|eot|>' is not a special token")):
        tokenize_stage.build(config).run()
    assert not Path(config.tokenizer.output).exists()


def test_share_tokenizer_reuses_an_unchanged_file_and_reloads_a_replaced_one(tmp_path):
    path = str(tmp_path / "tokenizer.json")
    Tokenizer.from_merges(kind="byte", pattern="", merges=[(97, 98)], special_tokens=["<s>"]).save(path)
    first = encoding.share_tokenizer(path)
    assert encoding.share_tokenizer(path) is first
    Tokenizer.from_merges(kind="byte", pattern="", merges=[(98, 97)], special_tokens=["<s>"]).save(path)
    replaced = encoding.share_tokenizer(path)
    assert replaced.merges == [(98, 97)] and replaced.fingerprint != first.fingerprint
