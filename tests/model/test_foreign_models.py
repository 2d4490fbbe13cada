"""The tokenizer guard for models trained elsewhere: stamps beside a nanoGPT ``ckpt.pt`` or a transformers
directory, read back without running pickled code."""

from __future__ import annotations

import json
import os

import pytest
import torch

from pipeline.errors import CheckpointError, TokenizerMismatchError
from pipeline.model import foreign

MERGES = [(104, 101), (256, 32), (116, 104)]


def nanogpt_checkpoint(directory, vocab_size: int, *, model_args: bool = True, prefix: str = "") -> None:
    """A ``ckpt.pt`` as nanoGPT's train.py saves it: model, optimizer, model_args, iter_num, best_val_loss, config."""
    directory.mkdir(parents=True, exist_ok=True)
    embedding = torch.nn.Embedding(vocab_size, 8)
    head = torch.nn.Linear(8, vocab_size, bias=False)
    model = {f"{prefix}transformer.wte.weight": embedding.weight.detach(),
             f"{prefix}lm_head.weight": head.weight.detach()}
    optimizer = torch.optim.AdamW([embedding.weight, head.weight])
    args = {"n_layer": 1, "n_head": 1, "n_embd": 8, "block_size": 16, "bias": False, "vocab_size": vocab_size,
            "dropout": 0.0}
    torch.save({"model": model, "optimizer": optimizer.state_dict(), **({"model_args": args} if model_args else {}),
                "iter_num": 100, "best_val_loss": torch.tensor(2.5), "config": {"dataset": "lmprep", "lr": 6e-4}},
               directory / "ckpt.pt")


def hf_directory(directory, vocab_size: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps({"model_type": "gpt2", "vocab_size": vocab_size}))


@pytest.mark.parametrize("model_args, prefix", [(True, ""), (False, ""), (False, "_orig_mod.")])
def test_the_vocabulary_size_of_a_nanogpt_checkpoint_is_read_from_its_args_or_its_embedding(
        tmp_path, model_args, prefix):
    nanogpt_checkpoint(tmp_path / "out", 304, model_args=model_args, prefix=prefix)
    for path in (tmp_path / "out", tmp_path / "out" / "ckpt.pt"):
        model = foreign.open_model(path)
        assert (model.tool, model.vocab_size, model.directory) == ("nanoGPT", 304, tmp_path / "out")


def test_stamp_then_check_accepts_the_same_tokenizer_and_names_the_first_differing_merge_of_another(
        tmp_path, fake_tokenizer):
    tokenizer = fake_tokenizer(MERGES)
    retrained = fake_tokenizer([(104, 101), (256, 32), (32, 116)])  # same size, last merge differs
    nanogpt_checkpoint(tmp_path / "out", tokenizer.vocab_size)
    stamped = foreign.stamp_model(tmp_path / "out", tokenizer)
    assert stamped.stamp_path == tmp_path / "out" / "lmprep.json"
    assert foreign.check_model(tmp_path / "out" / "ckpt.pt", tokenizer).vocab_size == tokenizer.vocab_size
    with pytest.raises(TokenizerMismatchError) as info:
        foreign.check_model(tmp_path / "out", retrained)
    assert tokenizer.fingerprint in str(info.value) and retrained.fingerprint in str(info.value)
    assert "first differing merge is #2: checkpoint 't'+'h' (IDs 116, 104) vs tokenizer ' '+'t' (IDs 32, 116)" \
        in str(info.value)


def test_a_padded_vocabulary_is_accepted_and_a_smaller_one_refused(tmp_path, fake_tokenizer):
    tokenizer = fake_tokenizer(MERGES)
    hf_directory(tmp_path / "padded", 320)  # nanoGPT and Megatron round the embedding up
    foreign.stamp_model(tmp_path / "padded", tokenizer)
    assert foreign.check_model(tmp_path / "padded", tokenizer).vocab_size == 320
    hf_directory(tmp_path / "small", tokenizer.vocab_size - 1)
    with pytest.raises(TokenizerMismatchError, match=f"declares a vocabulary of 258 IDs, fewer than the 259 of "
                                                     f"tokenizer {tokenizer.fingerprint}; it cannot have been"):
        foreign.stamp_model(tmp_path / "small", tokenizer)
    assert not (tmp_path / "small" / "lmprep.json").exists()


def test_a_model_without_a_stamp_is_not_vouched_for(tmp_path, fake_tokenizer):
    hf_directory(tmp_path / "hf", 300)
    with pytest.raises(TokenizerMismatchError, match=f"{tmp_path / 'hf'} has no lmprep.json, so nothing says which "
                                                     "tokenizer the model was trained with; run `lmprep stamp"):
        foreign.check_model(tmp_path / "hf", fake_tokenizer(MERGES))


def test_a_stamp_is_never_silently_replaced_by_another_tokenizers(tmp_path, fake_tokenizer):
    tokenizer, other = fake_tokenizer(MERGES), fake_tokenizer(MERGES[:2] + [(32, 116)])
    hf_directory(tmp_path / "hf", 300)
    foreign.stamp_model(tmp_path / "hf", tokenizer)
    foreign.stamp_model(tmp_path / "hf", tokenizer)  # the same one again: fine
    with pytest.raises(TokenizerMismatchError, match="already says the model was trained with tokenizer "
                                                     f"{tokenizer.fingerprint}, not {other.fingerprint}; pass --force"):
        foreign.stamp_model(tmp_path / "hf", other)
    foreign.check_model(tmp_path / "hf", tokenizer)
    foreign.stamp_model(tmp_path / "hf", other, force=True)
    foreign.check_model(tmp_path / "hf", other)


def test_a_model_retrained_with_another_vocabulary_after_its_stamp_is_refused(tmp_path, fake_tokenizer):
    tokenizer = fake_tokenizer(MERGES)
    nanogpt_checkpoint(tmp_path / "out", 300)
    foreign.stamp_model(tmp_path / "out", tokenizer)
    nanogpt_checkpoint(tmp_path / "out", 512)
    with pytest.raises(TokenizerMismatchError, match=r"ckpt.pt declares 512 IDs but 300 when .*lmprep.json was "
                                                     "written: the model changed since"):
        foreign.check_model(tmp_path / "out", tokenizer)


class RunsCode:
    """A pickle that would create a file when unpickled."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (os.mkdir, (self.path,))


def test_a_checkpoint_holding_code_is_refused_without_running_it(tmp_path):
    (tmp_path / "out").mkdir()
    torch.save({"model_args": {"vocab_size": 300}, "payload": RunsCode(str(tmp_path / "ran"))},
               tmp_path / "out" / "ckpt.pt")
    with pytest.raises(CheckpointError, match="cannot be read as weights alone, so lmprep does not load it"):
        foreign.open_model(tmp_path / "out")
    assert not (tmp_path / "ran").exists()


@pytest.mark.parametrize("content, reason", [
    ("{", "is not JSON: Expecting property name"),
    ('{"format": "other"}', "is not an lmprep stamp"),
    ('{"format": "lmprep-stamp/1", "model_vocab_size": 300}', "is malformed (KeyError: 'tokenizer')"),
])
def test_a_malformed_stamp_is_one_error(tmp_path, fake_tokenizer, content, reason):
    hf_directory(tmp_path / "hf", 300)
    (tmp_path / "hf" / "lmprep.json").write_text(content)
    with pytest.raises(CheckpointError, match=reason.replace("(", r"\(").replace(")", r"\)")):
        foreign.check_model(tmp_path / "hf", fake_tokenizer(MERGES))


@pytest.mark.parametrize("config, reason", [
    ({"model_type": "gpt2"}, "gives no vocab_size (a positive integer), got None"),
    ({"vocab_size": "300"}, "gives no vocab_size (a positive integer), got '300'"),
])
def test_a_config_without_a_vocabulary_size_is_named(tmp_path, config, reason):
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=reason.replace("(", r"\(").replace(")", r"\)")):
        foreign.open_model(tmp_path)


def test_a_composite_config_gives_its_text_models_vocabulary(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llava", "text_config": {"vocab_size": 320}}))
    assert foreign.open_model(tmp_path).vocab_size == 320
