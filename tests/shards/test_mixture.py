"""Mixture weights and traceable rows, on a real three-source project (prepare, tokenizer and encode run
through the CLI): each row's source and document, the weighted sampling of the train stage and of
ShardWindows (shares, determinism, resume, ranks), and the refusals."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch
from click.testing import CliRunner

from pipeline.config import TrainConfig
from pipeline.errors import ShardError
from pipeline.model import training
from pipeline.model.checkpoint import read_checkpoint
from pipeline.shards import format as shard_format
from pipeline.shards.format import ShardSet
from pipeline.shards.mixture import MixtureSampler, epoch_counts, window_tokens_by_source
from pipeline.shards.torch_dataset import ShardWindows
from pipeline.tokenizer import Tokenizer
from stages.cli.main import cli

# Three sources of very different sizes, each written in letters of its own, so that a window's source
# shows in its text: a-h, i-p, q-x.
ALPHABETS = ("abcdefgh", "ijklmnop", "qrstuvwx")
SIZES = (120, 40, 12)  # documents
WEIGHTS = (0.2, 0.3, 0.5)
CONFIG = """\
data:
  sources:
    - {{glob: "raw/a.txt", separator: blank_line{w0}}}
    - {{glob: "raw/b.jsonl"{w1}}}
    - {{glob: "raw/c/*.txt"{w2}}}
prepare: {{output_dir: out/prepared, val_fraction: 0.1}}
tokenizer: {{output: out/tokenizer.json, vocab_size: 300, workers: 1}}
encode: {{output_dir: out/shards, shard_tokens: 700, workers: 1}}
train: {{output_dir: out/ckpt, steps: 6, context: 8, batch_size: 4, dim: 8, eval_every: 3, eval_batches: 1}}
stats: {{output_dir: out/stats}}
state_dir: state
run_cache_dir: null
"""


def text(source: int, number: int) -> str:
    rng = np.random.default_rng([source, number])
    letters = ALPHABETS[source]
    return " ".join("".join(rng.choice(list(letters), size=rng.integers(2, 7))) for _ in range(rng.integers(5, 25)))


def write_config(root: Path, weights: tuple[float, ...] | None) -> None:
    given = {f"w{i}": "" if weights is None else f", weight: {weights[i]}" for i in range(3)}
    (root / "lmprep.yaml").write_text(CONFIG.format(**given))


def lmprep(root: Path, *args: str):
    return CliRunner().invoke(cli, [*args, "--config", str(root / "lmprep.yaml")])


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("mixture")
    (root / "raw" / "c").mkdir(parents=True)
    (root / "raw" / "a.txt").write_text("\n\n".join(text(0, i) for i in range(SIZES[0])))
    (root / "raw" / "b.jsonl").write_text("".join(json.dumps({"text": text(1, i)}) + "\n" for i in range(SIZES[1])))
    for i in range(SIZES[2]):
        (root / "raw" / "c" / f"{i:02d}.txt").write_text(text(2, i))
    write_config(root, WEIGHTS)
    result = lmprep(root, "run", "encode")
    assert result.exit_code == 0, result.output
    return root


@pytest.fixture(scope="module")
def tokenizer(project) -> Tokenizer:
    return Tokenizer.load(project / "out" / "tokenizer.json")


@pytest.fixture(scope="module")
def train_set(project, tokenizer) -> ShardSet:
    return ShardSet.open(project / "out" / "shards", "train", tokenizer=tokenizer)


def source_of(window, tokenizer: Tokenizer) -> int:
    """The source whose letters the window's text is written in (specials and spaces aside)."""
    specials = set(tokenizer.special_tokens.values())
    letters = set(tokenizer.decode_bytes([int(i) for i in window if i not in specials]).decode()) - {" "}
    (source,) = {next(i for i, alphabet in enumerate(ALPHABETS) if letter in alphabet) for letter in letters}
    return source


def test_every_row_traces_back_to_its_raw_file_and_document(project, train_set, tokenizer):
    raw = {"raw/a.txt": (project / "raw" / "a.txt").read_text().split("\n\n"),
           "raw/b.jsonl": [json.loads(line)["text"] for line in (project / "raw" / "b.jsonl").open()]}
    raw |= {f"raw/c/{i:02d}.txt": [text(2, i)] for i in range(SIZES[2])}
    eos = tokenizer.special_tokens["<|endoftext|>"]
    rows = 0
    for shard in train_set.shards:
        for row in range(shard.num_documents):
            file, _, number = shard.document_id(row).rpartition("#")
            source = next(i for i, prefix in enumerate(("raw/a", "raw/b", "raw/c")) if file.startswith(prefix))
            assert int(shard.sources[row]) == source
            assert shard.document(row).tolist() == tokenizer.encode(raw[file][int(number)]) + [eos]
            rows += 1
    assert rows == train_set.num_documents
    tokens = {entry["source"]: entry["tokens"] for entry in train_set.manifest.to_dict()["sources"]}
    assert sorted(tokens) == [0, 1, 2] and sum(tokens.values()) == train_set.num_tokens
    polars = pytest.importorskip("polars")
    frame = polars.read_ipc_stream(train_set.shards[0].path)
    assert frame.columns == ["input_ids", "source", "file", "document"]


def test_lmprep_locate_names_a_tokens_shard_row_source_and_document(project, train_set):
    shard, row = train_set.locate(train_set.num_tokens - 1)
    assert row == shard.num_documents - 1
    result = lmprep(project, "locate", "train", str(train_set.num_tokens - 1))
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith(f"train token {train_set.num_tokens - 1:,}: {shard.path} row {row:,} (")
    # paths as they open from the current directory (the project is not below it: absolute)
    assert lines[1:] == [f"source: data.sources[{int(shard.sources[row])}] "
                         f"{project / ['raw/a.txt', 'raw/b.jsonl', 'raw/c/*.txt'][int(shard.sources[row])]}",
                         f"document: {project / shard.document_id(row)}"]
    assert lmprep(project, "locate", "train", "0", "--row").output.splitlines()[2] == \
        f"document: {project / train_set.shards[0].document_id(0)}"
    beyond = lmprep(project, "locate", "train", str(train_set.num_tokens))
    assert beyond.exit_code == 2 and len(beyond.output.strip().splitlines()) == 1


def test_lmprep_stats_shows_the_tokens_per_source_and_the_target_shares(project, train_set):
    result = lmprep(project, "stats")
    assert result.exit_code == 0, result.output
    tokens = [entry["tokens"] for entry in train_set.manifest.to_dict()["sources"]]
    shown = ", ".join(f"data.sources[{i}] {n:,} ({n / sum(tokens):.1%}, target {w:.1%})"
                      for i, (n, w) in enumerate(zip(tokens, WEIGHTS)))
    assert f"  tokens per source: {shown}\n" in result.output
    stats = json.loads((project / "out" / "stats" / "stats.json").read_text())
    assert [row["tokens"] for row in stats["splits"]["train"]["sources"]] == tokens


def test_the_train_stages_weighted_windows_reach_the_target_shares(train_set, tokenizer):
    natural = {entry["source"]: entry["tokens"] / train_set.num_tokens
               for entry in train_set.manifest.to_dict()["sources"]}
    assert natural[2] < 0.15  # the weights below move it far from its natural share
    sampler = MixtureSampler(train_set, WEIGHTS, context=8)
    rng = np.random.default_rng(0)
    counts, seen = np.zeros(3, dtype=np.int64), np.zeros(3, dtype=np.int64)
    for _ in range(300):
        windows, tokens = sampler.sample(rng, 16)
        counts += tokens
        for window in windows:
            seen[source_of(window, tokenizer)] += 8
    assert counts.tolist() == seen.tolist()  # what the metrics count is what the windows hold
    # 4,800 windows: the binomial standard deviation of a share is below 0.0073, the tolerance 3.5 of them
    assert np.abs(counts / counts.sum() - np.array(WEIGHTS)).max() < 0.025


def test_without_weights_the_windows_are_those_of_before_and_their_tokens_are_counted_per_source(train_set):
    sampler = MixtureSampler(train_set, None, context=8)
    rng, before = np.random.default_rng(3), np.random.default_rng(3)
    per_token = [np.repeat(shard.sources, np.diff(shard.offsets)) for shard in train_set.shards]
    for _ in range(20):
        windows, tokens = sampler.sample(rng, 16)
        assert np.array_equal(windows, train_set.sample_batch(before, 16, 8))
    shards, starts = train_set.window_starts(np.random.default_rng(4), 200, 8)
    expected = sum(np.bincount(per_token[k][s : s + 8], minlength=3) for k, s in zip(shards, starts))
    assert window_tokens_by_source(train_set, shards, starts, 8, 3) == expected.tolist()
    assert sum(expected) == 200 * 8 and min(expected) > 0


def test_shard_windows_epochs_hold_the_target_shares_and_cover_each_source_before_repeating(project, tokenizer):
    data = ShardWindows(project / "out" / "shards", "train", tokenizer=tokenizer, context=8, batch_size=4,
                        weights=WEIGHTS)
    expected = epoch_counts(data.shares, data.windows)
    assert abs(expected[2] / data.windows - WEIGHTS[2]) <= 1 / data.windows
    per_source: dict[int, list[tuple]] = {0: [], 1: [], 2: []}
    for _ in range(2):
        for x, y in data.loader():
            for row in torch.cat([x, y[:, -1:]], dim=1).numpy():
                per_source[source_of(row, tokenizer)].append(tuple(row))
    used = 2 * len(data) * data.batch_size  # the epoch's last partial batch is dropped
    assert abs(sum(map(len, per_source.values())) - used) == 0
    for source, rows in per_source.items():
        assert abs(len(rows) / used - WEIGHTS[source]) < 0.03
    first = np.cumsum([0, *(data._source_windows[s] for s in range(3))])
    codes = [data._epoch_codes(epoch) for epoch in range(2)]
    of = [[np.sort(c[(c >= first[s]) & (c < first[s + 1])]) - first[s] for c in codes] for s in range(3)]
    # subsampled: the second epoch goes on with windows the first did not take
    assert len(of[0][0]) < data._source_windows[0] and not set(of[0][0]) & set(of[0][1])
    # upsampled: every window of the source as many times as any other, give or take one
    repeats = np.bincount(of[2][0], minlength=data._source_windows[2])
    assert repeats.min() >= 2 and repeats.max() - repeats.min() <= 1


def weighted(project, tokenizer, **options):
    return ShardWindows(project / "out" / "shards", "train", tokenizer=tokenizer,
                        **({"context": 8, "batch_size": 4, "weights": WEIGHTS} | options))


def test_weighted_batches_are_the_same_for_any_worker_count_and_seeded(project, tokenizer):
    single = [x for x, _ in weighted(project, tokenizer).loader()]
    workers = [x for x, _ in weighted(project, tokenizer).loader(num_workers=2)]
    assert len(single) == len(workers) and all(torch.equal(a, b) for a, b in zip(single, workers))
    other = [x for x, _ in weighted(project, tokenizer, seed=1).loader()]
    assert not all(torch.equal(a, b) for a, b in zip(single, other))
    natural = [x for x, _ in weighted(project, tokenizer, weights=None).loader()]
    assert not all(torch.equal(a, b) for a, b in zip(single, natural))


def test_a_weighted_iteration_resumes_mid_epoch_with_exactly_the_next_batch(project, tokenizer):
    whole = weighted(project, tokenizer)
    uninterrupted = [x for x, _ in whole.loader()] + [x for x, _ in whole.loader()]
    first = weighted(project, tokenizer)
    batches = first.loader()
    before = [next(batches)[0] for _ in range(3)]
    resumed = weighted(project, tokenizer)
    resumed.load_state_dict(first.state_dict())
    after = [x for x, _ in resumed.loader()] + [x for x, _ in resumed.loader()]
    assert all(torch.equal(a, b) for a, b in zip(before + after, uninterrupted, strict=True))
    with pytest.raises(ShardError, match="weights"):
        weighted(project, tokenizer, weights=(0.5, 0.3, 0.2)).load_state_dict(first.state_dict())


def test_weighted_ranks_get_disjoint_batches_of_one_epoch(project, tokenizer):
    whole = weighted(project, tokenizer, batch_size=2)
    ranks = [weighted(project, tokenizer, batch_size=2, rank=rank, world_size=3) for rank in range(3)]
    dealt = [ranks[k % 3]._rank_batches(0)[k // 3] for k in range(3 * len(ranks[0]))]
    assert np.array_equal(np.stack(dealt), whole._rank_batches(0)[: len(dealt)])  # batch k to rank k % 3
    assert len({len(rank) for rank in ranks}) == 1


def settings(project, **changes) -> TrainConfig:
    base = TrainConfig(dim=8, context=8, batch_size=4, steps=12, eval_every=6, eval_batches=1, mixture=WEIGHTS,
                       output_dir=str(project / "runs" / "whole"))
    return dataclasses.replace(base, **changes)


def test_weighted_training_resumed_mid_run_ends_as_an_uninterrupted_run(project, tokenizer, train_set):
    whole = training.train_checkpoint_dir(settings(project), tokenizer=tokenizer, train_set=train_set, val_set=None)
    part = settings(project, output_dir=str(project / "runs" / "parts"))
    training.train_checkpoint_dir(dataclasses.replace(part, steps=5), tokenizer=tokenizer, train_set=train_set,
                                  val_set=None)
    resumed = training.train_checkpoint_dir(part, tokenizer=tokenizer, train_set=train_set, val_set=None)
    a, b = read_checkpoint(Path(whole.checkpoint).parent), read_checkpoint(Path(resumed.checkpoint).parent)
    assert all(torch.equal(a.model.state_dict()[k], b.model.state_dict()[k]) for k in a.model.state_dict())
    metrics = [json.loads(line) for line in (Path(whole.checkpoint).parent / "metrics.jsonl").open()]
    again = [json.loads(line) for line in (Path(resumed.checkpoint).parent / "metrics.jsonl").open()]
    assert [m["source_tokens"] for m in metrics] == [m["source_tokens"] for m in again]
    assert whole.mixture == resumed.mixture
    assert [row["target"] for row in whole.mixture] == pytest.approx(WEIGHTS)
    assert sum(row["tokens"] for row in whole.mixture) == 12 * 4 * 8
    assert all(sum(m["source_tokens"]) == 4 * 8 for m in metrics)


def test_changing_a_weight_reruns_train_alone_and_sets_the_checkpoint_aside(project):
    result = lmprep(project, "run")
    assert result.exit_code == 0, result.output
    assert re.search(r"mixture \(tokens seen, share, target\): data\.sources\[0\] [\d,]+ [\d.]+% \(20\.0%\), "
                     r"data\.sources\[1\] [\d,]+ [\d.]+% \(30\.0%\), data\.sources\[2\] [\d,]+ [\d.]+% \(50\.0%\)",
                     result.output), result.output
    write_config(project, (0.4, 0.3, 0.3))
    try:
        status = lmprep(project, "status")
        assert "param data.sources[0].weight changed 0.2 → 0.4" in status.output, status.output
        assert "param data.sources[2].weight changed 0.5 → 0.3" in status.output
        assert status.output.startswith("prepare: up to date\ntokenizer: up to date\nencode: up to date\ntrain: stale")
        rerun = lmprep(project, "run")
        assert rerun.exit_code == 0, rerun.output
        assert "data.sources[*].weight [0.2, 0.3, 0.5] → [0.4, 0.3, 0.3]" in rerun.output, rerun.output
        assert "running 'prepare'" not in rerun.output and "running 'encode'" not in rerun.output
    finally:
        write_config(project, WEIGHTS)


@pytest.mark.parametrize(("weights", "message"), [
    ("[0, 1, 1]", "data.sources[0].weight must be a number > 0.0 (or null), got 0.0"),
    ("[-1, 1, 1]", "data.sources[0].weight must be a number > 0.0 (or null), got -1.0"),
    ('["a", 1, 1]', "data.sources[0].weight must be a number > 0.0 (or null), got a string 'a'"),
    ("[1, null, 1]", "data.sources[1].weight is not set but data.sources[0].weight is"),
])
def test_bad_weights_are_one_line_config_errors_naming_the_key(project, tmp_path, weights, message):
    parsed = json.loads(weights)
    (tmp_path / "lmprep.yaml").write_text(CONFIG.format(**{f"w{i}": "" if parsed[i] is None else
                                                           f", weight: {json.dumps(parsed[i])}" for i in range(3)}))
    result = lmprep(tmp_path, "status")
    assert result.exit_code == 2 and message in result.output and len(result.output.strip().splitlines()) == 1, \
        result.output


def test_a_weighted_source_without_tokens_in_the_split_is_refused(train_set):
    with pytest.raises(ShardError, match=r"data.sources\[3\].weight is 1.0, but shard set .* holds no token"):
        MixtureSampler(train_set, (1.0, 1.0, 1.0, 1.0), context=8)
    with pytest.raises(ShardError, match=r"holds documents of data.sources\[2\], but weights are given for 2"):
        MixtureSampler(train_set, (1.0, 1.0), context=8)


@pytest.mark.parametrize("mutation", ["source as int64", "no document column", "negative source"])
def test_a_shard_whose_origin_columns_are_damaged_is_refused_in_one_line(project, tmp_path, mutation):
    shards = tmp_path / "shards"
    shards.mkdir()
    for path in (project / "out" / "shards").glob("train*"):
        (shards / path.name).write_bytes(path.read_bytes())
    path = shards / "train-00000.arrow"
    batch = next(iter(pa.ipc.open_stream(pa.memory_map(str(path)))))
    columns = dict(zip(batch.schema.names, batch.columns))
    if mutation == "source as int64":
        columns["source"] = columns["source"].cast(pa.int64())
    elif mutation == "no document column":
        del columns["document"]
    else:
        columns["source"] = pa.array([-1] * batch.num_rows, pa.int32())
    damaged = pa.RecordBatch.from_pydict(columns).replace_schema_metadata(batch.schema.metadata)
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, damaged.schema) as writer:
        writer.write_batch(damaged)
    manifest = json.loads((shards / "train.manifest.json").read_text())
    manifest["shards"][0]["sha256"] = shard_format.hashing.sha256_file(path)
    (shards / "train.manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ShardError) as error:
        ShardSet.open(shards, "train")
    assert str(path) in str(error.value) and "\n" not in str(error.value)


def test_the_weighted_windows_do_not_depend_on_the_hash_seed(project):
    script = ("import hashlib, sys, numpy as np\n"
              "from pipeline.shards.format import ShardSet\n"
              "from pipeline.shards.mixture import MixtureSampler\n"
              f"sampler = MixtureSampler(ShardSet.open({str(project / 'out' / 'shards')!r}, 'train'), {WEIGHTS!r}, 8)\n"
              "rng = np.random.default_rng(0)\n"
              "print(hashlib.sha256(b''.join(sampler.sample(rng, 16)[0].tobytes() for _ in range(20))).hexdigest())\n")
    digests = {subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                              env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("0", "1")}
    assert len(digests) == 1 and len(digests.pop().strip()) == 64
