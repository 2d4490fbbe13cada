"""``pipeline.shards.torch_dataset.ShardWindows``: determinism, DDP and worker splits, exact resumption, the guard,
and the example model of docs/shards-and-training.md."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pipeline.errors import ShardError, TokenizerMismatchError
from pipeline.shards.format import ShardWriter
from pipeline.shards.manifest import ShardStamp
from pipeline.shards.origins import Origins
from pipeline.shards.torch_dataset import ShardWindows
from pipeline.tokenizer import Tokenizer

TEXTS = [f"document {i}: the cat sat on mat number {i * 7 % 13}." for i in range(60)]


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A tokenizer and its train shards (several shard files, so windows cross shard boundaries)."""
    root = tmp_path_factory.mktemp("shards")
    tokenizer = Tokenizer.train(TEXTS, vocab_size=300, special_tokens=("<|endoftext|>",), workers=1)
    tokenizer.save(root / "tokenizer.json")
    eos = tokenizer.special_tokens["<|endoftext|>"]
    rng = np.random.default_rng(0)  # random IDs: every window of the stream is distinct
    docs = [rng.integers(0, eos, size=40).tolist() + [eos] for _ in TEXTS]
    stamp = ShardStamp(split="train", tokenizer_fingerprint=tokenizer.fingerprint, vocab_size=tokenizer.vocab_size,
                       special_ids={"bos": None, "eos": eos}, prepared_fingerprint="p" * 64)
    writer = ShardWriter(root / "shards", stamp, shard_tokens=300)
    writer.write(np.array([i for doc in docs for i in doc], dtype=np.uint32),
                 np.cumsum([0] + [len(doc) for doc in docs], dtype=np.int64), Origins.numbered(len(docs)))
    writer.close()
    return root, tokenizer


def windows(project, **options):
    root, tokenizer = project
    return ShardWindows(root / "shards", "train", tokenizer=tokenizer, **({"context": 8, "batch_size": 4} | options))


def epoch(dataset, **loader_options):
    return [x for x, _ in dataset.loader(**loader_options)]


def test_batches_are_shifted_windows_of_the_token_stream(project):
    dataset = windows(project)
    stream = np.concatenate([shard.tokens for shard in dataset.shard_set.shards])
    x, y = next(iter(dataset))
    assert x.shape == y.shape == (4, 8) and x.dtype == torch.int64
    assert torch.equal(x[:, 1:], y[:, :-1])
    for row in torch.cat([x, y[:, -1:]], dim=1).numpy():
        start = next(i for i in range(0, len(stream), 8) if np.array_equal(stream[i : i + 9], row))
        assert start % 8 == 0


def test_same_seed_same_batches_another_seed_others(project):
    assert all(torch.equal(a, b) for a, b in zip(epoch(windows(project)), epoch(windows(project))))
    assert not torch.equal(epoch(windows(project))[0], epoch(windows(project, seed=1))[0])


def test_ranks_and_workers_split_an_epoch_without_overlap(project):
    seen = []
    for rank in range(3):
        single = epoch(windows(project, rank=rank, world_size=3))
        workers = epoch(windows(project, rank=rank, world_size=3), num_workers=2)
        assert all(torch.equal(a, b) for a, b in zip(single, workers)) and len(single) == len(workers)
        seen += [tuple(row.tolist()) for batch in single for row in batch]
    whole = windows(project)
    assert len(seen) == len(set(seen))  # no window twice
    assert len(seen) > 0.8 * whole.windows


def test_state_dict_resumes_with_exactly_the_next_batch(project):
    whole = epoch(windows(project), num_workers=2)
    first = windows(project)
    iterator = first.loader(num_workers=2)
    for _ in range(3):
        next(iterator)
    resumed = windows(project)
    resumed.load_state_dict(first.state_dict())
    rest = epoch(resumed, num_workers=2)
    assert len(rest) == len(whole) - 3 and all(torch.equal(a, b) for a, b in zip(rest, whole[3:]))
    assert resumed.state_dict()["epoch"] == 1  # the next epoch is shuffled anew
    with pytest.raises(ShardError, match="seed 0 → 5"):
        windows(project, seed=5).load_state_dict(first.state_dict())


def test_another_tokenizer_is_refused(project):
    root, _ = project
    other = Tokenizer.train(["zebras zig and zag"] * 5, vocab_size=300, special_tokens=("<|endoftext|>",), workers=1)
    with pytest.raises(TokenizerMismatchError):
        ShardWindows(root / "shards", tokenizer=other, context=8, batch_size=4)


def test_the_docs_example_trains_a_transformer(project, monkeypatch):
    """The example of docs/shards-and-training.md, verbatim but for the paths and a tiny size."""
    root, _ = project
    monkeypatch.chdir(root)
    source = DOCS_EXAMPLE.replace("data/shards", "shards").replace("data/tokenizer/tokenizer.json", "tokenizer.json")
    source = source.replace("context=256, batch_size=32", "context=8, batch_size=4").replace("dim = 128", "dim = 16")
    namespace = {}
    exec(compile(source, "docs/shards-and-training.md example", "exec"), namespace)
    assert namespace["step"] >= 1 and torch.isfinite(namespace["loss"])


def _docs_example() -> str:
    """The block tagged with this file's path (tests/test_docs.py leaves it to this test)."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "shards-and-training.md").read_text("utf-8")
    fence = "```python tests/shards/test_torch_dataset.py\n"
    start = text.index(fence) + len(fence)
    return text[start : text.index("```", start)]


DOCS_EXAMPLE = _docs_example()
