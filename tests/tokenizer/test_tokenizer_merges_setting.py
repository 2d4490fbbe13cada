"""``tokenizer.merges``: the number of merges as the tokenizer's size, instead of ``tokenizer.vocab_size``."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from pipeline.config import load_config, parse_config, resolved_size
from pipeline.errors import ConfigError
from pipeline.tokenizer import Tokenizer
from stages.cli.main import cli


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text, "utf-8")
    return path


def test_merges_alone_leaves_vocab_size_unset(tmp_path):
    config = load_config(write(tmp_path, "tokenizer: {merges: 12}\n"))
    assert (config.tokenizer.vocab_size, config.tokenizer.merges) == (None, 12)
    assert parse_config(config.to_dict()) == config


def test_both_keys_is_an_error_naming_both(tmp_path):
    with pytest.raises(ConfigError, match=r"tokenizer.vocab_size \(300\) and tokenizer.merges \(12\) are both set"):
        load_config(write(tmp_path, "tokenizer: {vocab_size: 300, merges: 12}\n"))
    with pytest.raises(ConfigError, match="both set"):
        load_config(write(tmp_path, "tokenizer: {vocab_size: 2048}\n"), ["tokenizer.merges=12"])
    with pytest.raises(ConfigError, match="both null"):
        load_config(write(tmp_path, "tokenizer: {vocab_size: null}\n"))


def test_an_override_can_switch_from_vocab_size_to_merges(tmp_path):
    config = load_config(write(tmp_path, "tokenizer: {vocab_size: 2048}\n"),
                         ["tokenizer.vocab_size=null", "tokenizer.merges=12"])
    assert (config.tokenizer.vocab_size, config.tokenizer.merges) == (None, 12)


@pytest.mark.parametrize("text, expected", [
    ("tokenizer: {merges: 12}\n", (269, 12)),                             # 256 bytes + 12 merges + 1 special
    ("tokenizer: {vocab_size: 300, special_tokens: []}\nencode: {eos_token: null}\n", (300, 44)),
    ("tokenizer: {kind: char, merges: 12}\n", (None, 12)),               # the alphabet comes from the text
])
def test_resolved_size(tmp_path, text, expected):
    assert resolved_size(load_config(write(tmp_path, text)).tokenizer) == expected


def test_config_show_gives_the_resolved_other_key_as_a_comment(tmp_path):
    path = write(tmp_path, "tokenizer: {merges: 12}\n")
    result = CliRunner().invoke(cli, ["config", "show", "--config", str(path)])
    assert "  vocab_size: null  # resolved: 269\n  merges: 12\n" in result.output
    default = CliRunner().invoke(cli, ["config", "show", "--config", str(write(tmp_path, ""))])
    assert "  vocab_size: 2048\n  merges: null  # resolved: 1791\n" in default.output


def test_train_with_merges_learns_that_many():
    text = "low lower lowest " * 20
    byte = Tokenizer.train([text], merges=5, workers=1)
    char = Tokenizer.train([text], merges=5, kind="char", special_tokens=["<|endoftext|>"], workers=1)
    assert (len(byte.merges), byte.vocab_size) == (5, 261)
    assert (len(char.merges), char.vocab_size) == (5, 1 + 8 + 5 + 1)  # unknown, ' elorstw', merges, special
    assert Tokenizer.train([text], vocab_size=300, merges=3, workers=1).merges == byte.merges[:3]


def test_cli_train_takes_merges_but_not_with_vocab_size(tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("low lower lowest " * 20)
    out = tmp_path / "tok.json"
    ok = CliRunner().invoke(cli, ["tokenizer", "train", str(text), "--merges", "5", "--out", str(out)])
    assert ok.exit_code == 0 and "(5 merges)" in ok.output
    both = CliRunner().invoke(cli, ["tokenizer", "train", str(text), "--merges", "5", "--vocab-size", "300"])
    assert both.exit_code == 2 and "give --vocab-size or --merges, not both" in both.output


def test_changing_merges_reruns_the_tokenizer_stage(tmp_path, tiny_project):
    tiny_project(tokenizer={"vocab_size": None, "merges": 20}, encode=None, train=None)

    def lmprep(*args):
        return CliRunner().invoke(cli, [*args, "--config", "lmprep.yaml"])

    assert lmprep("run", "tokenizer").exit_code == 0
    assert len(Tokenizer.load(tmp_path / "out" / "tokenizer.json").merges) == 20
    assert "tokenizer: up to date" in lmprep("status").output
    status = lmprep("status", "--set", "tokenizer.merges=30").output
    assert "tokenizer: stale" in status and "param tokenizer.merges changed 20 → 30" in status
    status = lmprep("status", "--set", "tokenizer.merges=null", "--set", "tokenizer.vocab_size=300").output
    assert "param tokenizer.vocab_size changed null → 300" in status
