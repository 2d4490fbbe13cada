"""``lmprep sample`` and ``lmprep check`` through click's CliRunner, on a tiny trained model."""

from __future__ import annotations

import dataclasses
import shutil

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from conftest import resave_checkpoint

from pipeline.config import TrainConfig
from pipeline.model import training
from pipeline.shards.format import ShardSet, ShardWriter
from pipeline.shards.manifest import ShardStamp
from pipeline.shards.origins import Origins
from pipeline.tokenizer import Tokenizer
from stages.cli.main import cli

EOS = "<|endoftext|>"
SETTINGS = TrainConfig(dim=16, context=8, batch_size=16, steps=60, lr=0.1, eval_every=60, eval_batches=1)
STORY = ["the cat sat on the mat", "the dog sat on the log", "a cat and a dog met"] * 5
OTHER_STORY = ["zebras zig and zag", "quick quiet quails", "jazz quizzes fizz"] * 5


def make_tokenizer(path, texts, **options):
    tokenizer = Tokenizer.train(texts, special_tokens=(EOS,), **options)
    tokenizer.save(path)
    return tokenizer


def train_model(directory, tokenizer, texts, **settings):
    """Encode ``texts`` (EOS after each) into shards, train with ``settings`` changed, return the checkpoint
    directory."""
    eos = tokenizer.special_tokens[EOS]
    docs = [tokenizer.encode(text) + [eos] for text in texts]
    stamp = ShardStamp(split="train", tokenizer_fingerprint=tokenizer.fingerprint,
                       vocab_size=tokenizer.vocab_size, special_ids={"bos": None, "eos": eos},
                       prepared_fingerprint="p" * 64)
    writer = ShardWriter(directory / "shards", stamp, shard_tokens=10_000)
    writer.write(np.array([i for doc in docs for i in doc], dtype=np.uint32),
                 np.cumsum([0] + [len(doc) for doc in docs], dtype=np.int64), Origins.numbered(len(docs)))
    writer.close()
    settings = dataclasses.replace(SETTINGS, output_dir=str(directory / "ckpt"), **settings)
    training.train_checkpoint_dir(settings, tokenizer=tokenizer, val_set=None,
                                  train_set=ShardSet.open(directory / "shards", "train"))
    return directory / "ckpt"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A byte tokenizer, a model trained with it, and a same-size tokenizer trained on other text."""
    root = tmp_path_factory.mktemp("model")
    tokenizer = make_tokenizer(root / "tok.json", STORY, vocab_size=270, min_frequency=1)
    other = make_tokenizer(root / "other.json", OTHER_STORY, vocab_size=270, min_frequency=1)
    assert other.vocab_size == tokenizer.vocab_size and other.fingerprint != tokenizer.fingerprint
    config = root / "config.yaml"
    config.write_text("encode:\n  eos_token: '<|endoftext|>'\n")
    return root, train_model(root, tokenizer, STORY), config


def invoke(*args):
    return CliRunner().invoke(cli, [str(arg) for arg in args])


def sample_args(trained, tokenizer="tok.json", *extra):
    root, checkpoint, config = trained
    return ("sample", "--config", config, "--checkpoint", checkpoint, "--tokenizer", root / tokenizer, *extra)


def test_sample_continues_the_prompt_until_end_of_text(trained):
    result = invoke(*sample_args(trained, "tok.json", "--prompt", "the ", "--temperature", "0.5", "--seed", "1"))
    assert result.exit_code == 0, result.output
    assert result.output.startswith("the ")
    assert EOS not in result.output
    again = invoke(*sample_args(trained, "tok.json", "--prompt", "the ", "--temperature", "0.5", "--seed", "1"))
    assert again.output == result.output


def test_several_samples_per_call_are_seeded_and_top_k_1_is_greedy(trained):
    def run(*options):
        result = invoke(*sample_args(trained, "tok.json", "--prompt", "the", "--max-tokens", "8", *options))
        assert result.exit_code == 0, result.output
        return result.output

    three = run("--num-samples", "3", "--seed", "5", "--temperature", "2")
    samples = three.split("---\n")
    assert len(samples) == 4 and samples[-1] == "" and len(set(samples[:3])) > 1
    assert run("--num-samples", "3", "--seed", "5", "--temperature", "2") == three
    assert run("--seed", "5", "--temperature", "2") == samples[0]  # the first of several is the one sample
    greedy = run("--temperature", "0")
    assert run("--top-k", "1", "--num-samples", "2", "--temperature", "2") == greedy + "---\n" + greedy + "---\n"
    assert run("--top-p", "1e-9", "--seed", "3") == greedy


def test_a_padded_vocab_trains_samples_and_keeps_the_guard(tmp_path):
    from pipeline.model.checkpoint import read_checkpoint

    tokenizer = make_tokenizer(tmp_path / "tok.json", STORY, vocab_size=270, min_frequency=1)
    other = make_tokenizer(tmp_path / "other.json", OTHER_STORY, vocab_size=270, min_frequency=1)
    checkpoint = train_model(tmp_path, tokenizer, STORY, pad_vocab_to=64)
    model = read_checkpoint(checkpoint).model
    assert model.config.vocab_size == 320 and model.embed.weight.shape == (320, 16)  # 270 rounded up to 5 × 64
    (tmp_path / "config.yaml").write_text("encode:\n  eos_token: '<|endoftext|>'\n")
    trained = (tmp_path, checkpoint, tmp_path / "config.yaml")
    assert invoke("check", checkpoint, "--tokenizer", tmp_path / "tok.json").output.startswith("compatible: ")
    refused = invoke("check", checkpoint, "--tokenizer", tmp_path / "other.json")
    assert refused.exit_code == 1 and other.fingerprint in refused.output
    sampled = invoke(*sample_args(trained, "tok.json", "--prompt", "the", "--temperature", "50", "--num-samples", "5"))
    assert sampled.exit_code == 0, sampled.output
    assert invoke(*sample_args(trained, "other.json", "--prompt", "the")).exit_code == 2


def test_sample_respects_max_tokens_and_an_empty_prompt(trained):
    result = invoke(*sample_args(trained, "tok.json", "--prompt", "", "--max-tokens", "1", "--temperature", "0"))
    assert result.exit_code == 0, result.output
    assert 0 < len(result.output.rstrip("\n").encode()) <= 6  # one token of STORY's vocabulary


def test_sample_refuses_a_tokenizer_of_equal_size_with_exit_2(trained):
    result = invoke(*sample_args(trained, "other.json", "--prompt", "the"))
    assert result.exit_code == 2
    assert result.output.startswith("error: checkpoint ")
    assert "vocab size 270" in result.output and "first differing merge is #0" in result.output


def test_check_answers_with_exit_status(trained):
    root, checkpoint, config = trained
    good = invoke("check", checkpoint, "--tokenizer", root / "tok.json", "--config", config)
    assert good.exit_code == 0 and good.output.startswith("compatible: ")
    bad = invoke("check", checkpoint, "--tokenizer", root / "other.json", "--config", config)
    assert bad.exit_code == 1 and bad.output.startswith("incompatible: ")
    fingerprints = [Tokenizer.load(root / name).fingerprint for name in ("tok.json", "other.json")]
    assert all(fingerprint in bad.output for fingerprint in fingerprints)


def test_check_needs_no_config_file_outside_a_project(trained, tmp_path, monkeypatch):
    root, checkpoint, _ = trained
    monkeypatch.chdir(tmp_path)
    result = invoke("check", checkpoint, "--tokenizer", root / "tok.json")
    assert result.exit_code == 0 and result.output.startswith("compatible: ")
    named = invoke("check", checkpoint, "--tokenizer", root / "tok.json", "--config", "nope.yaml")
    assert named.exit_code == 2 and "config file nope.yaml not found" in named.output


def test_check_refuses_a_pickled_checkpoint_without_running_it(trained, tmp_path):
    root, _, config = trained
    pickled = tmp_path / "evil.safetensors"
    torch.save({"weights": torch.zeros(1)}, pickled)
    result = invoke("check", pickled, "--tokenizer", root / "tok.json", "--config", config)
    assert result.exit_code == 2
    assert "unpickling can run arbitrary code" in result.output


def test_char_mode_generation_ends_at_a_newline(tmp_path):
    lines = ["ab\n" * 20] * 10
    tokenizer = make_tokenizer(tmp_path / "tok.json", lines, vocab_size=100, kind="char", min_frequency=10**9)
    checkpoint = train_model(tmp_path, tokenizer, lines)
    (tmp_path / "config.yaml").write_text("encode:\n  eos_token: '<|endoftext|>'\n")
    result = invoke(*sample_args((tmp_path, checkpoint, tmp_path / "config.yaml"), "tok.json",
                                 "--prompt", "a", "--temperature", "0", "--max-tokens", "50"))
    assert result.exit_code == 0, result.output
    assert result.output == "ab\n"


def test_building_the_pipeline_does_not_import_torch():
    import subprocess
    import sys

    code = ("import sys; import stages.cli.main, stages.train; from pipeline.config import parse_config; "
            "stages.train.build(parse_config({})); "
            "assert 'torch' not in sys.modules and 'matplotlib' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def test_train_stage_declares_shards_and_tokenizer_as_inputs():
    from pipeline.config import parse_config
    from stages import train

    stage = train.build(parse_config({"train": {"output_dir": "checkpoints/small"}}))
    assert (stage.name, stage.params, stage.outs) == ("train", ("train",), ("checkpoints/small",))
    assert stage.deps == ("data/shards", "data/tokenizer/tokenizer.json")


def test_sample_stops_at_the_eos_the_shards_carried_even_if_the_config_names_none(trained, tmp_path):
    root, checkpoint, _ = trained
    config = tmp_path / "no_eos.yaml"
    config.write_text("encode:\n  eos_token: null\n")
    result = invoke("sample", "--config", config, "--checkpoint", checkpoint, "--tokenizer", root / "tok.json",
                    "--prompt", "", "--temperature", "0", "--max-tokens", "500")
    assert result.exit_code == 0, result.output
    assert EOS not in result.output and len(result.output) < 400


def test_check_of_a_missing_checkpoint_says_to_give_its_path(trained, tmp_path):
    root, _, config = trained
    result = invoke("check", tmp_path / "absent", "--tokenizer", root / "tok.json", "--config", config)
    assert result.exit_code == 2
    assert result.output == (f"error: no checkpoint at {tmp_path / 'absent' / 'checkpoint.safetensors'}; train one "
                             "with `lmprep run train` or give the path of an existing checkpoint\n")


def test_a_file_given_as_a_checkpoint_is_named_as_not_one(trained):
    """A file that is not a .safetensors one (the tokenizer, say) is named as given, not as a directory."""
    root, _, config = trained
    result = invoke("sample", "--config", config, "--checkpoint", root / "tok.json", "--tokenizer", root / "tok.json",
                    "--prompt", "")
    assert result.exit_code == 2
    assert result.output == (f"error: {root / 'tok.json'} is not a checkpoint: give a .safetensors file or the "
                             "directory that holds checkpoint.safetensors\n")


@pytest.fixture
def project(tiny_project):
    """A tiny project whose whole pipeline has run once."""
    root = tiny_project(train={"steps": 3, "eval_every": 3})
    assert invoke("run", "--config", "lmprep.yaml").exit_code == 0
    return root


def test_forced_train_with_a_complete_checkpoint_retrains_and_keeps_the_old_one(project):
    before = (project / "out" / "ckpt" / "checkpoint.safetensors").read_bytes()
    result = invoke("run", "train", "--force", "--config", "lmprep.yaml")
    assert result.exit_code == 0, result.output
    assert "train: retraining as forced (the checkpoint was at step 3); training from scratch" in result.output
    assert "trained steps 0→3" in result.output
    assert (project / "out" / "ckpt-forced" / "checkpoint.safetensors").read_bytes() == before


def test_interrupted_retrain_keeps_the_checkpoint_in_place(project, monkeypatch):
    before = (project / "out" / "ckpt" / "checkpoint.safetensors").read_bytes()

    def interrupt(run, batch):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(training, "_step", interrupt)
        interrupted = invoke("run", "train", "--set", "train.seed=9", "--config", "lmprep.yaml")
    assert interrupted.exit_code == 130 and "interrupted; the previous outputs are intact" in interrupted.output
    assert (project / "out" / "ckpt" / "checkpoint.safetensors").read_bytes() == before
    assert sorted(path.name for path in (project / "out").iterdir()) == [  # prepared.partial: prepare's first round
        "ckpt", "prepared", "prepared.partial", "shards", "special_tokens_map.json", "tokenizer.json",
        "tokenizer_config.json"]
    result = invoke("run", "train", "--set", "train.seed=9", "--config", "lmprep.yaml")
    assert "train: moved the old checkpoint to out/ckpt-old-seed" in result.output
    assert (project / "out" / "ckpt-old-seed" / "checkpoint.safetensors").read_bytes() == before


def test_check_reads_the_header_without_importing_torch(trained):
    import subprocess
    import sys

    root, checkpoint, _ = trained
    code = ("import sys; from stages.cli.main import cli; "
            f"cli(['check', {str(checkpoint)!r}, '--tokenizer', {str(root / 'tok.json')!r}], standalone_mode=False); "
            "assert 'torch' not in sys.modules, 'torch was imported'")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("compatible: ") and "(step 60)" in result.stdout


def test_sample_refuses_nan_weights_with_one_line(trained, tmp_path):
    root, checkpoint, config = trained

    def nan_weight(tensors):
        tensors["model.embed.weight"][5, 0] = float("nan")

    resave_checkpoint(checkpoint / "checkpoint.safetensors", tensors=nan_weight,
                      target=tmp_path / "checkpoint.safetensors")
    result = invoke("sample", "--config", config, "--checkpoint", tmp_path, "--tokenizer", root / "tok.json",
                    "--prompt", "the")
    assert result.exit_code == 2
    assert result.output == (f"error: checkpoint {tmp_path / 'checkpoint.safetensors'}: model.embed.weight holds "
                             "NaN or infinite weights; retrain it with `lmprep run train`\n")


# -- models trained elsewhere: `lmprep stamp`, then `lmprep check`


def hf_model(directory, vocab_size: int):
    """A tiny GPT-2 as transformers saves it (config.json, model.safetensors)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=vocab_size, n_positions=16, n_embd=8, n_layer=1, n_head=2)
    GPT2LMHeadModel(config).save_pretrained(directory)
    return directory


def nanogpt_model(directory, vocab_size: int):
    """A ckpt.pt as nanoGPT's train.py writes it."""
    directory.mkdir()
    model = torch.nn.ModuleDict({"wte": torch.nn.Embedding(vocab_size, 8), "lm_head": torch.nn.Linear(8, vocab_size)})
    state = {f"transformer.{name}" if name.startswith("wte") else name: value
             for name, value in model.state_dict().items()}
    args = {"n_layer": 1, "n_head": 2, "n_embd": 8, "block_size": 16, "bias": True, "vocab_size": vocab_size,
            "dropout": 0.0}
    torch.save({"model": state, "optimizer": torch.optim.AdamW(model.parameters()).state_dict(),
                "model_args": args, "iter_num": 0, "best_val_loss": 1e9, "config": {"dataset": "lmprep"}},
               directory / "ckpt.pt")
    return directory


@pytest.mark.parametrize("make_model", [hf_model, nanogpt_model])
def test_stamp_then_check_a_model_trained_elsewhere(trained, tmp_path, make_model):
    root, _, config = trained
    tokenizer = Tokenizer.load(root / "tok.json")
    model = make_model(tmp_path / "model", tokenizer.vocab_size)
    unstamped = invoke("check", model, "--tokenizer", root / "tok.json", "--config", config)
    assert unstamped.exit_code == 1 and f"incompatible: {model} has no lmprep.json" in unstamped.output

    stamped = invoke("stamp", model, "--tokenizer", root / "tok.json", "--config", config)
    assert stamped.exit_code == 0, stamped.output
    assert stamped.output.startswith(f"stamped {model / 'lmprep.json'}: {model} (")
    good = invoke("check", model, "--tokenizer", root / "tok.json", "--config", config)
    assert good.exit_code == 0, good.output
    assert good.output.startswith(f"compatible: {model} (") and f"vocab size {tokenizer.vocab_size}" in good.output

    bad = invoke("check", model, "--tokenizer", root / "other.json", "--config", config)  # retrained, same size
    assert bad.exit_code == 1 and bad.output.startswith("incompatible: ")
    assert "first differing merge is #0" in bad.output and tokenizer.fingerprint in bad.output
    restamp = invoke("stamp", model, "--tokenizer", root / "other.json", "--config", config)
    assert restamp.exit_code == 2 and "pass --force to replace the stamp" in restamp.output


def test_transformers_loads_a_stamped_directory_unchanged(trained, tmp_path):
    from transformers import GPT2LMHeadModel

    root, _, config = trained
    model = hf_model(tmp_path / "hf", Tokenizer.load(root / "tok.json").vocab_size)
    files = sorted(path.name for path in model.iterdir())
    assert invoke("stamp", model, "--tokenizer", root / "tok.json", "--config", config).exit_code == 0
    assert sorted(path.name for path in model.iterdir()) == sorted([*files, "lmprep.json"])
    assert GPT2LMHeadModel.from_pretrained(model).config.vocab_size == 270


def test_a_model_too_small_for_the_tokenizer_cannot_be_stamped(trained, tmp_path):
    root, _, config = trained
    model = hf_model(tmp_path / "hf", 260)
    result = invoke("stamp", model, "--tokenizer", root / "tok.json", "--config", config)
    assert result.exit_code == 2
    assert result.output.startswith(f"error: {model / 'config.json'} declares a vocabulary of 260 IDs, fewer than ")


def damaged_copy(checkpoint, tmp_path):
    """A copy of the checkpoint directory with one byte of its last tensor's data inverted."""
    copy = tmp_path / "copy"
    shutil.copytree(checkpoint, copy)
    data = bytearray((copy / "checkpoint.safetensors").read_bytes())
    data[-5] ^= 0xFF
    (copy / "checkpoint.safetensors").write_bytes(bytes(data))
    return copy / "checkpoint.safetensors"


def test_a_damaged_checkpoint_is_refused_by_sample_and_check_verify_in_one_line(trained, tmp_path):
    root, checkpoint, config = trained
    damaged = damaged_copy(checkpoint, tmp_path)
    sampled = invoke("sample", "--config", config, "--checkpoint", damaged, "--tokenizer", root / "tok.json",
                     "--prompt", "the")
    assert sampled.exit_code == 2
    assert sampled.output.startswith(f"error: checkpoint {damaged} is damaged: tensor ")
    assert sampled.output.endswith("does not match its checksum; retrain it with `lmprep run train`\n")
    assert sampled.output.count("\n") == 1
    header_only = invoke("check", damaged, "--tokenizer", root / "tok.json")
    assert header_only.exit_code == 0 and header_only.output.startswith("compatible: ")
    verified = invoke("check", damaged, "--tokenizer", root / "tok.json", "--verify")
    assert verified.exit_code == 2 and verified.output == sampled.output
    assert invoke("check", checkpoint, "--tokenizer", root / "tok.json", "--verify").exit_code == 0


@pytest.mark.parametrize("damage", ["flip tokenizer.json", "delete tokenizer.json", "truncate metrics.jsonl"])
def test_a_damaged_companion_file_is_never_recorded_as_up_to_date(project, damage):
    """tokenizer.json (which sample and the guard read) and metrics.jsonl (which a resume continues) are
    covered by the checkpoint's checksums: one changed or missing makes the checkpoint damaged, so
    the run sets it aside and retrains, and sample refuses it in one line meanwhile."""
    directory = project / "out" / "ckpt"
    verb, name = damage.split()
    if verb == "delete":
        (directory / name).unlink()
    else:
        data = bytearray((directory / name).read_bytes())
        if verb == "flip":
            data[len(data) // 2] ^= 0x01
        (directory / name).write_bytes(bytes(data[:-20] if verb == "truncate" else data))
    sampled = invoke("sample", "--config", "lmprep.yaml", "--prompt", "the")
    assert sampled.exit_code == 2 and sampled.output.count("\n") == 1, sampled.output
    assert sampled.output.startswith(f"error: checkpoint out/ckpt/checkpoint.safetensors is damaged: {name} "
                                     "beside it "), sampled.output
    result = invoke("run", "train", "--config", "lmprep.yaml")
    assert result.exit_code == 0, result.output
    assert "nothing to train" not in result.output and "the previous checkpoint is unreadable" in result.output
    assert (project / "out" / "ckpt-unreadable").is_dir()
    assert invoke("sample", "--config", "lmprep.yaml", "--prompt", "the").exit_code == 0
    assert "up to date" in invoke("status", "--config", "lmprep.yaml").output


def test_the_checkpoint_bytes_do_not_depend_on_the_working_directory(project, monkeypatch):
    """train.output_dir, as a path from where the command ran, is not recorded in the checkpoint."""
    before = (project / "out" / "ckpt" / "checkpoint.safetensors").read_bytes()
    monkeypatch.chdir(project.parent)
    result = invoke("run", "train", "--force", "--config", project / "lmprep.yaml")
    assert result.exit_code == 0, result.output
    assert (project / "out" / "ckpt" / "checkpoint.safetensors").read_bytes() == before
