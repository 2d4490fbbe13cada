"""Encoding prepared documents into shards with worker pools."""

from __future__ import annotations

import contextlib
import gc
import json
import random
import re
import tracemalloc
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from conftest import reference_ids

from pipeline.data import documents
from pipeline.engine import hashing
from pipeline.engine.executor import Tasks
from pipeline.errors import DataError, TokenizerError
from pipeline.shards import corpus
from pipeline.shards.corpus import add_special_ids, encode_corpus
from pipeline.shards.format import ShardSet
from pipeline.tokenizer import Tokenizer, reference
from pipeline.tokenizer.encoder import PythonEncoder

WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "données", "naïve", "café", "東京", "мир",
         "🙂", "tab\there", "new\nline"]


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
    train = make_texts(700, seed=2)
    documents.write_prepared(directory, {"train": [train[:300], [], train[300:]], "val": [make_texts(40, seed=3)]})
    return directory


def encode(prepared: Path, output: Path, tokenizer_path: Path, executor, **options) -> None:
    tokenizer = Tokenizer.load(tokenizer_path)
    options = {"shard_tokens": 2000, "task_bytes": 2000, "eos_id": tokenizer.special_tokens["<|endoftext|>"], **options}
    encode_corpus(prepared, output, tokenizer_path=tokenizer_path, tasks=Tasks(executor), **options)


def test_add_special_ids_wraps_every_document():
    ids, offsets = np.array([5, 6, 7], np.uint32), np.array([0, 2, 2, 3])
    both, both_offsets = add_special_ids(ids, offsets, bos_id=1, eos_id=9)
    assert both.tolist() == [1, 5, 6, 9, 1, 9, 1, 7, 9] and both_offsets.tolist() == [0, 4, 6, 9]
    bos, _ = add_special_ids(ids, offsets, bos_id=1, eos_id=None)
    assert bos.tolist() == [1, 5, 6, 1, 1, 7]
    plain, plain_offsets = add_special_ids(ids, offsets, bos_id=None, eos_id=None)
    assert plain.tolist() == [5, 6, 7] and plain_offsets.tolist() == [0, 2, 2, 3]


def test_add_special_ids_converts_in_the_same_pass_and_takes_a_run_that_starts_later():
    ids, offsets = np.array([4, 5, 6, 7], np.uint32), np.array([1, 3, 3, 4])
    both, both_offsets = add_special_ids(ids, offsets, bos_id=1, eos_id=9, dtype=np.dtype(np.uint16))
    assert both.dtype == np.uint16 and both.tolist() == [1, 5, 6, 9, 1, 9, 1, 7, 9]
    assert both_offsets.tolist() == [0, 4, 6, 9]
    plain, plain_offsets = add_special_ids(ids, offsets, bos_id=None, eos_id=None, dtype=np.dtype(np.uint16))
    assert plain.dtype == np.uint16 and plain.tolist() == [5, 6, 7] and plain_offsets.tolist() == [0, 2, 2, 3]


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
        assert decoded == list(documents.iter_split_documents(prepared, split))
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
            encode(prepared, tmp_path / f"w{workers}", tokenizer_path, executor)
    one, two = sorted((tmp_path / "w1").iterdir()), sorted((tmp_path / "w2").iterdir())
    assert [path.name for path in one] == [path.name for path in two]
    assert all(a.read_bytes() == b.read_bytes() for a, b in zip(one, two))


def test_tasks_are_cut_by_bytes_and_keep_every_document(prepared, tokenizer_path):
    tokenizer = Tokenizer.load(tokenizer_path)
    source = documents.part_path(prepared, "train", 0)
    tasks = list(corpus.iter_tasks(source, tokenizer, str(tokenizer_path), bos_id=None, eos_id=None,
                                     task_bytes=500))
    assert len(tasks) > 10
    texts = [text for task in tasks for text in task.texts.to_pylist()]
    assert texts == list(documents.iter_documents(source))


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

    real = corpus.encode_task
    monkeypatch.setattr(corpus, "encode_task", failing)
    with ThreadPoolExecutor(1) as executor, pytest.raises(RuntimeError, match="killed"):
        encode(prepared, output, tokenizer_path, executor, shard_tokens=50)
    assert {path.name: path.read_bytes() for path in output.iterdir()} == before
    assert [path.name for path in tmp_path.iterdir() if path.name.startswith(".")] == []


@pytest.mark.parametrize("vouching", [False, True], ids=["alone", "under-the-runners-cache"])
def test_a_part_whose_bytes_are_not_those_parts_json_lists_is_refused(tmp_path, prepared, tokenizer_path, vouching):
    """A task checks its part against ``parts.json``: by hashing it, or by its stamp where the running stage's hash
    cache vouches for the listed digest, which it does not for bytes it hashed to another digest."""
    part = next(path for path in sorted((prepared / "train").glob("*.arrow")) if path.stat().st_size > 1000)
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 1
    part.write_bytes(bytes(data))
    cache = hashing.HashCache(tmp_path / "hashes.json")
    cache.tree_hash(prepared)
    with ThreadPoolExecutor(1) as executor, hashing.vouching(cache) if vouching else contextlib.nullcontext(), \
            pytest.raises(DataError, match=f"{re.escape(str(part))}: changed since it was prepared"):
        encode(prepared, tmp_path / "shards", tokenizer_path, executor)


def test_an_eos_id_outside_the_vocabulary_is_refused(tmp_path, prepared, tokenizer_path):
    with ThreadPoolExecutor(1) as executor, pytest.raises(TokenizerError, match="eos ID 100000"):
        encode(prepared, tmp_path / "shards", tokenizer_path, executor, eos_id=100_000)


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
    from stages import tokenizer as tokenize_stage

    config = stage_config(tmp_path, prepared)
    tokenizer_stage = tokenize_stage.build(config)
    assert tokenizer_stage.deps == (str(prepared / "train"),)
    assert "tokenizer.workers" not in tokenizer_stage.params and "tokenizer.vocab_size" in tokenizer_stage.params
    tokenizer_stage.run()
    stage = encode_stage.build(config)
    assert stage.deps == (str(prepared / "train"), str(prepared / "val"), config.tokenizer.output)
    assert stage.outs == (str(tmp_path / "shards"),)
    assert "encode.workers" not in stage.params
    stage.run()
    tokenizer = Tokenizer.load(config.tokenizer.output)
    assert ShardSet.open(tmp_path / "shards", "val", tokenizer=tokenizer).num_documents == 42


def test_a_frozen_tokenizer_is_copied_and_does_not_depend_on_the_data(tmp_path, prepared, tokenizer_path):
    from stages import tokenizer as tokenize_stage

    config = stage_config(tmp_path, prepared, tokenizer={"path": str(tokenizer_path)})
    stage = tokenize_stage.build(config)
    directory = Path(config.tokenizer.output).parent
    assert stage.deps == (str(tokenizer_path),)
    assert stage.outs == (config.tokenizer.output, str(directory / "tokenizer_config.json"),
                          str(directory / "special_tokens_map.json"))
    stage.run()
    assert Path(config.tokenizer.output).read_bytes() == tokenizer_path.read_bytes()
    assert json.loads((directory / "special_tokens_map.json").read_text()) == {"eos_token": "<|endoftext|>",
                                                                              "pad_token": "<|endoftext|>"}


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
    from stages import tokenizer as tokenize_stage

    config = stage_config(tmp_path, prepared, tokenizer={"path": str(tokenizer_path)},
                          encode={"bos_token": "<|eot|>"})
    with pytest.raises(ConfigError, match=re.escape("encode.bos_token '<|eot|>' is not a special token")):
        tokenize_stage.build(config).run()
    assert not Path(config.tokenizer.output).exists()


def test_share_tokenizer_reuses_an_unchanged_file_and_reloads_a_replaced_one(tmp_path):
    path = str(tmp_path / "tokenizer.json")
    Tokenizer.from_merges(kind="byte", pattern="", merges=[(97, 98)], special_tokens=["<s>"]).save(path)
    first = corpus.share_tokenizer(path)
    assert corpus.share_tokenizer(path) is first
    Tokenizer.from_merges(kind="byte", pattern="", merges=[(98, 97)], special_tokens=["<s>"]).save(path)
    replaced = corpus.share_tokenizer(path)
    assert replaced.merges == ((98, 97),) and replaced.fingerprint != first.fingerprint


def test_share_tokenizer_loads_a_file_once_however_it_is_named(tmp_path, monkeypatch):
    """The stage names the file as the config does, the tasks by its absolute path: the workers forked in
    between inherit the load that their name finds, instead of each loading the file again."""
    Tokenizer.from_merges(kind="byte", pattern="", merges=[(97, 98)]).save(tmp_path / "tokenizer.json")
    monkeypatch.chdir(tmp_path)
    first = corpus.share_tokenizer("tokenizer.json")
    assert corpus.share_tokenizer(str(tmp_path / "tokenizer.json")) is first
    assert corpus.load_tokenizer_cached(str(tmp_path / "tokenizer.json"), first.fingerprint) is first


# --- the encoder's chunk cache: new chunks merged together, memory bounded in bytes

RANK_OF = {(97, 98): 0, (256, 256): 1, (97, 97): 2, (258, 97): 3, (99, 99): 4, (98, 97): 5, (257, 99): 6}
RESULTS = [256, 257, 258, 259, 260, 261, 262]


def many_new_chunks(count: int, seed: int) -> list[str]:
    """Texts of thousands of distinct chunks of every length up to ~100 bytes, in several scripts."""
    rng = random.Random(seed)
    syllables = ["ab", "ba", "c", "de", "ée", "東京", "ки", "ab ", "x", "🙂", "42", "...", "\n"]
    return ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 40))) + " " for _ in range(count)]


def fresh(tokenizer: Tokenizer, directory: Path) -> Tokenizer:
    """The same tokenizer with an empty chunk cache."""
    tokenizer.save(directory / "fresh.json")
    return Tokenizer.load(directory / "fresh.json")


def test_batches_of_many_new_chunks_encode_like_the_merge_replay(tmp_path, byte_tokenizer, char_tokenizer):
    texts = many_new_chunks(400, seed=4)
    for tokenizer in (fresh(byte_tokenizer, tmp_path), fresh(char_tokenizer, tmp_path)):
        ids, offsets = tokenizer.encode_batch_flat(texts)
        assert [ids[a:b].tolist() for a, b in zip(offsets, offsets[1:])] == [
            reference_ids(tokenizer, text) for text in texts]


def test_the_python_chunk_cache_keeps_its_byte_bound():
    """Batches of distinct 250-character chunks, under and over the bound: the cache starts over, never grows
    past it."""
    bound = 60_000
    cache = PythonEncoder(lambda text: text.split("|"), lambda chunk: list(chunk.encode()), RANK_OF, RESULTS,
                          max_bytes=bound)
    rng = random.Random(5)
    for batch in (30, 30, 30, 100, 30, 5, 100):
        chunks = sorted({"".join(rng.choice("abc") for _ in range(250)) for _ in range(batch)} | {"ab", "c" * 300})
        assert cache.lists(["|".join(chunks)]) == [
            [i for chunk in chunks for i in reference.encode_chunk(list(chunk.encode()), RANK_OF, RESULTS)]]
        assert 0 < cache.nbytes <= bound and len(cache) <= bound // 250


def test_memory_kept_by_the_encoder_is_bounded_in_bytes():
    """A char tokenizer without pre-split caches whole short documents: 2,000 distinct ones of 250 characters
    would keep ~1.5 MB; with a 200 kB bound the memory kept stays under it."""
    tokenizer = Tokenizer.from_merges(kind="char", pattern="", alphabet=list("abc"),
                                      merges=[(1, 2), (4, 3), (3, 3), (5, 1), (6, 6)])
    tokenizer.bound_cache(200_000)
    rng = random.Random(6)
    texts = ["".join(rng.choice("abc") for _ in range(250)) for _ in range(2000)]
    tracemalloc.start()
    try:
        tokenizer.encode_batch_flat(texts[:100])
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        for start in range(100, len(texts), 100):
            tokenizer.encode_batch_flat(texts[start:start + 100])
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept < 200_000


def test_each_task_bounds_its_workers_cache(prepared, tokenizer_path):
    source = prepared / documents.read_parts(prepared, "val")[0].file
    task = next(corpus.iter_tasks(source, Tokenizer.load(tokenizer_path), str(tokenizer_path), bos_id=None,
                                    eos_id=None, cache_bytes=12_345))
    corpus.encode_task(task)
    assert corpus.load_tokenizer_cached(task.tokenizer_path, task.tokenizer_fingerprint)._encoder.max_bytes == 12_345


def test_the_cache_bound_is_read_from_the_encode_section(tmp_path, prepared, tokenizer_path, monkeypatch):
    from pipeline.config import parse_config
    from pipeline.errors import ConfigError
    from stages import encode as encode_stage

    with pytest.raises(ConfigError, match="encode.chunk_cache_mb"):
        parse_config({"encode": {"chunk_cache_mb": -1}})
    config = stage_config(tmp_path, prepared, tokenizer={"path": str(tokenizer_path), "output": str(tokenizer_path)},
                          encode={"chunk_cache_mb": 3})
    seen = {}
    monkeypatch.setattr(corpus, "encode_corpus", lambda *args, **options: seen.update(options) or [])
    encode_stage.run(config)
    assert seen["cache_bytes"] == 3_000_000


def test_the_largest_parts_are_encoded_first(tmp_path, prepared, tokenizer_path, start_order):
    encode(prepared, tmp_path / "shards", tokenizer_path, start_order)
    assert [label.split()[0] for label in start_order.labels] == ["train-00002", "train-00000", "val-00000"]
