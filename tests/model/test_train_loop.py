"""The training loop: agreement checks, determinism, resume, setting aside, outputs."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import shutil

import numpy as np
import pytest
import torch
from conftest import FakeTokenizer, resave_checkpoint

from pipeline.config import TrainConfig
from pipeline.errors import CheckpointError, ShardError, TokenizerMismatchError, TrainingError
from pipeline.model import training
from pipeline.model.checkpoint import read_checkpoint
from pipeline.shards.format import ShardSet, ShardWriter
from pipeline.shards.manifest import ShardStamp
from pipeline.shards.origins import Origins

TOKENIZER = FakeTokenizer(merges=[(97, 98), (256, 99)], special_tokens={"<|endoftext|>": 258})
RETRAINED = FakeTokenizer(merges=[(98, 99), (97, 256)], special_tokens={"<|endoftext|>": 258})
SETTINGS = TrainConfig(dim=8, context=8, batch_size=4, steps=6, lr=0.05, eval_every=3, eval_batches=2, seed=3)


def write_shards(directory, split, docs, *, tokenizer=TOKENIZER, vocab_size=None):
    stamp = ShardStamp(
        split=split,
        tokenizer_fingerprint=tokenizer.fingerprint,
        vocab_size=vocab_size or tokenizer.vocab_size,
        special_ids={"bos": None, "eos": 258},
        prepared_fingerprint="p" * 64,
    )
    writer = ShardWriter(directory, stamp, shard_tokens=64)
    ids = np.array([i for doc in docs for i in doc], dtype=np.uint32)
    offsets = np.concatenate([[0], np.cumsum([len(doc) for doc in docs])]).astype(np.int64)
    writer.write(ids, offsets, Origins.numbered(len(docs)))
    writer.close()
    return ShardSet.open(directory, split)


DOCS = [[257, 32, 100, 101, 258] * 6 for _ in range(10)]


@pytest.fixture
def shards(tmp_path):
    return write_shards(tmp_path / "shards", "train", DOCS), write_shards(tmp_path / "shards", "val", DOCS[:3])


def run(tmp_path, shards, settings=SETTINGS, tokenizer=TOKENIZER, notes=None, retrain=False):
    settings = dataclasses.replace(settings, output_dir=str(tmp_path / "ckpt"))
    return training.train_checkpoint_dir(
        settings, tokenizer=tokenizer, train_set=shards[0], val_set=shards[1],
        notify=(notes.append if notes is not None else print), retrain=retrain,
    )


def weights(path):
    return read_checkpoint(path).model.state_dict()


def test_training_writes_checkpoint_metrics_and_plot(tmp_path, shards):
    summary = run(tmp_path, shards)
    directory = tmp_path / "ckpt"
    assert summary.checkpoint == directory / "checkpoint.safetensors"
    assert (summary.start_step, summary.step, summary.tokens) == (0, 6, 6 * 4 * 8)
    assert 0 <= summary.data_share <= 1
    checkpoint = read_checkpoint(directory)
    assert checkpoint.step == 6
    assert checkpoint.shard_fingerprint == shards[0].fingerprint
    assert checkpoint.tokenizer.fingerprint == TOKENIZER.fingerprint
    assert checkpoint.train_config["dim"] == 8
    records = [json.loads(line) for line in (directory / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5, 6]
    assert [r["step"] for r in records if "val_loss" in r] == [3, 6]
    assert (directory / "loss.png").read_bytes().startswith(b"\x89PNG")
    assert records[-1]["train_loss"] < records[0]["train_loss"]


def test_same_seed_gives_identical_weights(tmp_path, shards):
    run(tmp_path / "a", shards)
    run(tmp_path / "b", shards)
    first, second = weights(tmp_path / "a" / "ckpt"), weights(tmp_path / "b" / "ckpt")
    assert all(torch.equal(first[name], second[name]) for name in first)
    run(tmp_path / "c", shards, dataclasses.replace(SETTINGS, seed=4))
    assert not torch.equal(first["embed.weight"], weights(tmp_path / "c" / "ckpt")["embed.weight"])


def test_resume_continues_to_the_same_weights(tmp_path, shards):
    run(tmp_path / "whole", shards)
    notes = []
    run(tmp_path / "split", shards, dataclasses.replace(SETTINGS, steps=2))
    summary = run(tmp_path / "split", shards, notes=notes)
    assert (summary.start_step, summary.step) == (2, 6)
    assert notes == ["resuming from step 2 to step 6"]
    whole, split = weights(tmp_path / "whole" / "ckpt"), weights(tmp_path / "split" / "ckpt")
    assert all(torch.equal(whole[name], split[name]) for name in whole)
    losses = [
        [record["train_loss"] for record in map(json.loads, (path / "ckpt" / "metrics.jsonl").open())]
        for path in (tmp_path / "whole", tmp_path / "split")
    ]
    assert losses[0] == losses[1] and len(losses[0]) == 6


def test_nothing_to_train_when_steps_are_reached(tmp_path, shards):
    run(tmp_path, shards)
    before = (tmp_path / "ckpt" / "checkpoint.safetensors").read_bytes()
    notes = []
    summary = run(tmp_path, shards, notes=notes)
    assert summary.step == summary.start_step == 6
    assert notes == ["nothing to train: the checkpoint is at step 6 = train.steps on these shards with these "
                     "settings; raise train.steps to train further, or pass --force to retrain from scratch"]
    assert (tmp_path / "ckpt" / "checkpoint.safetensors").read_bytes() == before


def test_evaluation_settings_alone_neither_retrain_nor_set_aside(tmp_path, shards):
    run(tmp_path, shards)
    before = (tmp_path / "ckpt" / "checkpoint.safetensors").read_bytes()
    notes = []
    summary = run(tmp_path, shards, dataclasses.replace(SETTINGS, eval_every=2, eval_batches=5), notes=notes)
    assert summary.step == summary.start_step == 6
    assert notes[0].startswith("nothing to train")
    assert (tmp_path / "ckpt" / "checkpoint.safetensors").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "shards"]


def test_changed_learning_rate_sets_aside_and_trains_from_scratch(tmp_path, shards):
    faster = dataclasses.replace(SETTINGS, lr=0.1)
    run(tmp_path / "direct", shards, faster)
    run(tmp_path, shards)
    old = (tmp_path / "ckpt" / "checkpoint.safetensors").read_bytes()
    notes = []
    summary = run(tmp_path, shards, faster, notes=notes)
    aside = tmp_path / "ckpt-old-lr"
    assert notes == ["the train settings changed (train.lr 0.05 → 0.1); training from scratch",
                     f"moved the old checkpoint to {aside}"]
    assert (summary.start_step, summary.step) == (0, 6)
    assert (aside / "checkpoint.safetensors").read_bytes() == old
    direct, retrained = weights(tmp_path / "direct" / "ckpt"), weights(tmp_path / "ckpt")
    assert all(torch.equal(direct[name], retrained[name]) for name in direct)
    assert read_checkpoint(tmp_path / "ckpt").train_config["lr"] == 0.1


def test_every_changed_setting_is_named_in_the_set_aside_directory(tmp_path, shards):
    run(tmp_path, shards)
    notes = []
    run(tmp_path, shards, dataclasses.replace(SETTINGS, seed=4, batch_size=2, steps=7), notes=notes)
    assert notes[0].startswith("the train settings changed (train.batch_size 4 → 2, train.seed 3 → 4)")
    assert read_checkpoint(tmp_path / "ckpt-old-batch_size-seed").step == 6
    assert read_checkpoint(tmp_path / "ckpt").step == 7


def test_lowered_steps_set_aside_and_train_from_scratch(tmp_path, shards):
    run(tmp_path, shards)
    notes = []
    summary = run(tmp_path, shards, dataclasses.replace(SETTINGS, steps=2), notes=notes)
    assert notes[0].startswith("train.steps=2 is below the checkpoint's step 6")
    assert (summary.start_step, summary.step) == (0, 2)
    assert read_checkpoint(tmp_path / "ckpt-old-steps").step == 6


def test_train_steps_is_the_step_reached_also_after_the_shards_change(tmp_path, shards):
    """train.steps is absolute: new shards with raised steps continue up to it, never steps more."""
    run(tmp_path, shards, dataclasses.replace(SETTINGS, steps=4))
    new_data = (write_shards(tmp_path / "new", "train", DOCS[:5] + [[97, 98, 99, 258] * 8]), None)
    notes = []
    summary = run(tmp_path, new_data, notes=notes)
    assert (summary.start_step, summary.step) == (4, 6)
    assert notes[0] == "the shards changed; continuing from step 4 to step 6 on the new shards"
    assert read_checkpoint(tmp_path / "ckpt").shard_fingerprint == new_data[0].fingerprint
    assert run(tmp_path, new_data).step == 6
    more = run(tmp_path, new_data, dataclasses.replace(SETTINGS, steps=8), notes=notes)
    assert (more.start_step, more.step) == (6, 8)
    metrics = [json.loads(line) for line in (tmp_path / "ckpt" / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r.get("resumed"), r.get("new_shards")) for r in metrics if "resumed" in r] == [
        (5, True, True), (7, True, False)]


def test_new_shards_with_the_checkpoint_at_train_steps_set_it_aside(tmp_path, shards):
    run(tmp_path, shards)
    new_data = (write_shards(tmp_path / "new", "train", DOCS[:5] + [[97, 98, 99, 258] * 8]), None)
    notes = []
    summary = run(tmp_path, new_data, notes=notes)
    assert (summary.start_step, summary.step) == (0, 6)
    assert notes[0] == ("the shards changed and the checkpoint is already at train.steps=6 (raise train.steps to "
                        "continue it on the new shards instead); training from scratch")
    assert read_checkpoint(tmp_path / "ckpt-old-data").shard_fingerprint == shards[0].fingerprint


def test_retrain_sets_a_complete_checkpoint_aside(tmp_path, shards):
    run(tmp_path, shards)
    notes = []
    summary = run(tmp_path, shards, notes=notes, retrain=True)
    assert (summary.start_step, summary.step) == (0, 6)
    assert notes[0] == "retraining as forced (the checkpoint was at step 6); training from scratch"
    assert read_checkpoint(tmp_path / "ckpt-forced").step == 6


def test_metrics_hold_bits_per_byte(tmp_path, shards):
    run(tmp_path, shards)
    record = json.loads((tmp_path / "ckpt" / "metrics.jsonl").read_text().splitlines()[-1])
    tokens_per_byte = 5 / 6  # each repeat of a document: 'abc', ' ', 'd', 'e' and the special token (no bytes)
    for split in ("train", "val"):
        bits_per_byte = record[f"{split}_loss"] / math.log(2) * tokens_per_byte
        assert record[f"{split}_bits_per_byte"] == pytest.approx(bits_per_byte)


def test_changed_tokenizer_sets_the_old_checkpoint_aside(tmp_path, shards):
    run(tmp_path, shards)
    old = (tmp_path / "ckpt" / "checkpoint.safetensors").read_bytes()
    retrained = (write_shards(tmp_path / "new", "train", DOCS, tokenizer=RETRAINED), None)
    notes = []
    summary = run(tmp_path, retrained, tokenizer=RETRAINED, notes=notes)
    aside = tmp_path / f"ckpt-{TOKENIZER.fingerprint[:12]}"
    assert summary.start_step == 0
    assert (aside / "checkpoint.safetensors").read_bytes() == old
    changed = f"the tokenizer changed ({TOKENIZER.fingerprint[:12]} → {RETRAINED.fingerprint[:12]})"
    assert notes[0] == f"{changed}; training from scratch"
    assert notes[-1] == f"moved the old checkpoint to {aside}"
    assert any("skipping validation" in note for note in notes)
    assert read_checkpoint(tmp_path / "ckpt").tokenizer.fingerprint == RETRAINED.fingerprint


@pytest.mark.parametrize("other_tokenizer", ["third", "retrained"])
def test_the_set_aside_directory_is_named_after_the_checkpoint_it_holds(tmp_path, shards, monkeypatch,
                                                                         other_tokenizer):
    """Another run (another state dir, same output) replaced the checkpoint while this one trained."""
    third = FakeTokenizer(merges=[(99, 100), (97, 256)], special_tokens={"<|endoftext|>": 258})
    other = {"third": third, "retrained": RETRAINED}[other_tokenizer]
    new_shards = (write_shards(tmp_path / "new", "train", DOCS, tokenizer=RETRAINED), None)
    other_set = (new_shards[0] if other is RETRAINED
                 else write_shards(tmp_path / "third", "train", DOCS, tokenizer=third))
    training.train_checkpoint_dir(dataclasses.replace(SETTINGS, output_dir=str(tmp_path / "other")),
                                  tokenizer=other, train_set=other_set, val_set=None)
    run(tmp_path, shards)  # trained with TOKENIZER
    real_train = training.train

    def train_while_another_run_replaces_the_checkpoint(*args, **kwargs):
        summary = real_train(*args, **kwargs)
        shutil.rmtree(tmp_path / "ckpt")
        shutil.copytree(tmp_path / "other", tmp_path / "ckpt")
        return summary

    monkeypatch.setattr(training, "train", train_while_another_run_replaces_the_checkpoint)
    notes = []
    run(tmp_path, new_shards, tokenizer=RETRAINED, notes=notes)
    # a checkpoint of another tokenizer is named after it; one this run would have kept, "replaced"
    aside = tmp_path / ("ckpt-replaced" if other is RETRAINED else f"ckpt-{third.fingerprint[:12]}")
    assert notes[-1] == f"moved the old checkpoint to {aside}"
    assert read_checkpoint(aside).tokenizer.fingerprint == other.fingerprint
    assert not (tmp_path / f"ckpt-{TOKENIZER.fingerprint[:12]}").exists()


def test_changed_model_config_also_sets_aside(tmp_path, shards):
    run(tmp_path, shards)
    run(tmp_path, shards, dataclasses.replace(SETTINGS, dim=4, steps=8))
    assert read_checkpoint(tmp_path / "ckpt-old-dim").model_config.dim == 8
    assert read_checkpoint(tmp_path / "ckpt").model_config.dim == 4


def interrupt_after(monkeypatch, steps):
    """Make the training loop raise KeyboardInterrupt once ``steps`` steps have run."""
    real_step, done = training._step, []

    def step(run, batch):
        if len(done) == steps:
            raise KeyboardInterrupt
        done.append(run.step)
        return real_step(run, batch)

    monkeypatch.setattr(training, "_step", step)


def snapshot(directory):
    return {path.name: path.read_bytes() for path in directory.iterdir()}


def test_interrupted_resume_keeps_the_previous_checkpoint(tmp_path, shards, monkeypatch):
    run(tmp_path, shards)
    before = snapshot(tmp_path / "ckpt")
    interrupt_after(monkeypatch, 2)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, shards, dataclasses.replace(SETTINGS, steps=9))
    assert snapshot(tmp_path / "ckpt") == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "shards"]


def test_a_resumed_run_interrupted_then_continued_keeps_its_resume_mark(tmp_path, shards, monkeypatch):
    run(tmp_path, shards)  # to step 6
    longer = dataclasses.replace(SETTINGS, steps=12, checkpoint_every=3)
    with monkeypatch.context() as patch:
        interrupt_after(patch, 4)  # resumed at 6, steps 7 to 10 run, a periodic checkpoint at 9
        with pytest.raises(KeyboardInterrupt):
            run(tmp_path, shards, longer)
    notes = []
    run(tmp_path, shards, longer, notes=notes)
    assert "continuing the interrupted run from its checkpoint at step 9" in " ".join(notes)
    metrics = [json.loads(line) for line in (tmp_path / "ckpt" / "metrics.jsonl").read_text().splitlines()]
    assert [record["step"] for record in metrics if record.get("resumed")] == [7, 10]


@pytest.mark.parametrize("change", ["settings", "tokenizer"])
def test_interrupted_retraining_leaves_the_old_checkpoint_in_place(tmp_path, shards, monkeypatch, change):
    """Nothing is set aside until the new training succeeds: the output path always holds a checkpoint."""
    run(tmp_path, shards)
    before = snapshot(tmp_path / "ckpt")
    if change == "settings":
        retrain = {"shards": shards, "settings": dataclasses.replace(SETTINGS, seed=4)}
    else:
        retrained = (write_shards(tmp_path / "new", "train", DOCS, tokenizer=RETRAINED), None)
        retrain = {"shards": retrained, "tokenizer": RETRAINED}
    entries = sorted(p.name for p in tmp_path.iterdir())
    notes = []
    interrupt_after(monkeypatch, 2)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, notes=notes, **retrain)
    assert notes[0].endswith("; training from scratch") and not any("moved" in note for note in notes)
    assert snapshot(tmp_path / "ckpt") == before
    assert sorted(p.name for p in tmp_path.iterdir()) == entries  # nothing set aside, no staging left
    monkeypatch.undo()
    run(tmp_path, **retrain)
    aside = "ckpt-old-seed" if change == "settings" else f"ckpt-{TOKENIZER.fingerprint[:12]}"
    assert snapshot(tmp_path / aside) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*entries, aside])


@pytest.mark.parametrize("damage", [b'{"step": 1, "train_loss"\n', b"[1, 2]\n", b'{"train_loss": 1.0}\n', b"\xff\n",
                                    None])
def test_a_damaged_or_missing_metrics_log_makes_the_checkpoint_damaged(tmp_path, shards, damage):
    """The metrics log is covered by the checkpoint's checksums: changed or deleted, the checkpoint is set aside
    as unreadable and training starts again, as for any damaged checkpoint, rather than resumed on a log that
    is not its own."""
    run(tmp_path, shards, dataclasses.replace(SETTINGS, steps=2))
    metrics = tmp_path / "ckpt" / "metrics.jsonl"
    if damage is None:
        metrics.unlink()
    else:
        metrics.write_bytes(metrics.read_bytes().splitlines(keepends=True)[0] + b"\n" + damage)
    before = snapshot(tmp_path / "ckpt")
    notes: list[str] = []
    summary = run(tmp_path, shards, notes=notes)
    assert summary.start_step == 0 and summary.step == 6
    assert notes[0].startswith("the previous checkpoint is unreadable (checkpoint ")
    assert "metrics.jsonl beside it" in notes[0]
    assert snapshot(tmp_path / "ckpt-unreadable") == before


def test_shards_from_another_tokenizer_are_refused_before_anything_moves(tmp_path, shards):
    run(tmp_path, shards)
    with pytest.raises(TokenizerMismatchError, match=f"{TOKENIZER.fingerprint}.*{RETRAINED.fingerprint}"):
        run(tmp_path, shards, tokenizer=RETRAINED)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "shards"]


def test_vocab_size_and_max_id_disagreements_are_refused(tmp_path):
    wider = (write_shards(tmp_path / "a", "train", DOCS, vocab_size=300), None)
    with pytest.raises(TokenizerMismatchError, match="records vocab size 300, the tokenizer has 259"):
        run(tmp_path, wider)
    model_config = training.model_config_for(SETTINGS, TOKENIZER)
    out_of_range = write_shards(tmp_path / "b", "train", [[1, 2, 3]])
    out_of_range.manifest = dataclasses.replace(out_of_range.manifest, max_id=259)
    with pytest.raises(ShardError, match="token ID 259, outside the model's vocab size 259"):
        training.check_agreement(TOKENIZER, model_config, out_of_range)


def test_unreadable_checkpoint_is_set_aside_not_deleted(tmp_path, shards):
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "checkpoint.safetensors").write_bytes(b"not a checkpoint")
    notes = []
    assert run(tmp_path, shards, notes=notes).step == 6
    assert (tmp_path / "ckpt-unreadable" / "checkpoint.safetensors").read_bytes() == b"not a checkpoint"
    assert notes[0].startswith("the previous checkpoint is unreadable")



def edit_resume_state(path, edit) -> None:
    """Re-save a checkpoint with ``edit`` applied to its metadata's JSON document."""
    def edited(metadata):
        edit(metadata)
        return metadata

    resave_checkpoint(path, metadata=edited)


@pytest.mark.parametrize(
    "edit",
    [
        lambda m: m.update(numpy_rng_state={"bit_generator": "PCG64", "state": 5}),
        lambda m: m.update(numpy_rng_state={**m["numpy_rng_state"], "bit_generator": "MT19937"}),
        lambda m: m["optimizer"].update(param_groups=5),
        lambda m: m["optimizer"]["param_groups"][0].update(params=[0, 1, 2]),
        lambda m: m["optimizer"]["param_groups"][0].pop("betas"),
        lambda m: m["optimizer"]["param_groups"][0].update(betas="x"),
        lambda m: m["optimizer"]["param_groups"][0].update(lr="x"),
    ],
    ids=["rng-state", "rng-kind", "groups", "params", "no-betas", "betas", "lr"],
)
def test_a_checkpoint_that_cannot_be_resumed_is_set_aside_as_unreadable(tmp_path, shards, edit):
    """Malformed optimizer or RNG state is found when the checkpoint is read, not half-way into resuming."""
    run(tmp_path, shards, settings=dataclasses.replace(SETTINGS, steps=3))
    edit_resume_state(tmp_path / "ckpt" / "checkpoint.safetensors", edit)
    with pytest.raises(CheckpointError, match="malformed"):
        read_checkpoint(tmp_path / "ckpt")
    notes = []
    assert run(tmp_path, shards, notes=notes).step == 6
    assert notes[0].startswith("the previous checkpoint is unreadable")
    assert (tmp_path / "ckpt-unreadable" / "checkpoint.safetensors").exists()

def test_a_diverging_loss_stops_at_once_and_keeps_the_old_checkpoint(tmp_path, shards):
    run(tmp_path, shards)
    before = snapshot(tmp_path / "ckpt")
    with pytest.raises(TrainingError, match=r"^the train loss became (nan|inf) at step \d+ \(train.lr=1e\+30\); "
                                            r"training stopped and nothing was saved; lower train.lr$"):
        run(tmp_path, shards, dataclasses.replace(SETTINGS, lr=1e30, steps=50))
    assert snapshot(tmp_path / "ckpt") == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "shards"]


def test_a_shape_beyond_physical_memory_is_refused_before_training(tmp_path, shards, monkeypatch):
    monkeypatch.setattr(training, "_physical_memory", lambda: 2**28)
    huge = dataclasses.replace(SETTINGS, dim=65_536, batch_size=1024, context=1024)
    with pytest.raises(TrainingError, match=r"^train.dim=65536, train.batch_size=1024 and train.context=1024 with "
                                            r"vocab size 259 need about 0.7 GiB, more than this machine's 0.2 GiB "
                                            r"of memory; lower them$"):
        run(tmp_path, shards, huge)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shards"]


def test_cli_diverging_training_is_one_line_and_keeps_the_checkpoint(tmp_path, tiny_project):
    from click.testing import CliRunner

    from stages.cli.main import cli

    tiny_project(tokenizer={"workers": 1}, encode={"workers": 1}, train={"steps": 30, "eval_every": 10})
    assert CliRunner().invoke(cli, ["run", "--config", "lmprep.yaml"]).exit_code == 0
    before = snapshot(tmp_path / "out" / "ckpt")
    result = CliRunner().invoke(cli, ["run", "--config", "lmprep.yaml", "--set", "train.lr=1e30"])
    assert result.exit_code == 2
    assert re.fullmatch(r"error: the train loss became (nan|inf) at step \d+ \(train.lr=1e\+30\); training stopped "
                        r"and nothing was saved; lower train.lr", result.output.splitlines()[-1])
    assert snapshot(tmp_path / "out" / "ckpt") == before


KILLED_RUN = """
import dataclasses, os, signal, sys
sys.path[:0] = [{tests!r}, {here!r}]
from test_train_loop import SETTINGS, TOKENIZER
from pipeline.model import training
from pipeline.shards.format import ShardSet

real_step = training._step

def step(run, batch):
    if run.step == 7:
        os.kill(os.getpid(), signal.SIGKILL)
    return real_step(run, batch)

training._step = step
settings = dataclasses.replace(SETTINGS, steps=12, checkpoint_every=3, output_dir={out!r})
training.train_checkpoint_dir(settings, tokenizer=TOKENIZER, train_set=ShardSet.open({shards!r}, "train"),
                              val_set=ShardSet.open({shards!r}, "val"))
"""


def test_a_killed_run_resumes_from_its_periodic_checkpoint_bit_identically(tmp_path, shards):
    import subprocess
    import sys
    from pathlib import Path

    settings = dataclasses.replace(SETTINGS, steps=12, checkpoint_every=3)
    here = Path(__file__).resolve()
    script = KILLED_RUN.format(tests=str(here.parents[1]), here=str(here.parent), out=str(tmp_path / "ckpt"),
                               shards=str(tmp_path / "shards"))
    killed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert killed.returncode == -9, killed.stderr
    assert not (tmp_path / "ckpt").exists() and read_checkpoint(tmp_path / "ckpt.partial").step == 6
    notes = []
    run(tmp_path, shards, settings, notes=notes)
    assert "continuing the interrupted run from its checkpoint at step 6" in " ".join(notes)
    assert not (tmp_path / "ckpt.partial").exists()
    run(tmp_path / "whole", shards, settings)
    resumed, whole = read_checkpoint(tmp_path / "ckpt"), read_checkpoint(tmp_path / "whole" / "ckpt")
    pairs = zip(resumed.model.state_dict().values(), whole.model.state_dict().values())
    assert all(torch.equal(a, b) for a, b in pairs)
    assert str(resumed.optimizer_state) == str(whole.optimizer_state)
    records = [[{key: value for key, value in json.loads(line).items() if key not in ("resumed", "new_shards")}
                for line in (directory / "metrics.jsonl").read_text().splitlines()]
               for directory in (tmp_path / "ckpt", tmp_path / "whole" / "ckpt")]
    assert records[0] == records[1]  # the same figures; the resumed run marks where it resumed


def test_a_partial_checkpoint_of_another_run_is_not_resumed(tmp_path, shards, monkeypatch):
    interrupt_after(monkeypatch, 4)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, shards, dataclasses.replace(SETTINGS, steps=12, checkpoint_every=3))
    assert read_checkpoint(tmp_path / "ckpt.partial").step == 3
    monkeypatch.undo()
    notes = []
    run(tmp_path, shards, dataclasses.replace(SETTINGS, steps=12, checkpoint_every=3, lr=0.01), notes=notes)
    assert not any("interrupted" in note for note in notes)
    assert read_checkpoint(tmp_path / "ckpt").train_config["lr"] == 0.01
