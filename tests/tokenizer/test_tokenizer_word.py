"""The word kind: a whitespace-preserving word-level baseline, through the library, HF and the pipeline."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer as HFTokenizer

from pipeline.config import load_config
from pipeline.errors import ConfigError, TokenizerError
from pipeline.tokenizer import Tokenizer
from stages.cli.main import cli

SPECIAL = "<|endoftext|>"
TEXTS = ["Hello world! Hello there.\n", "  world! peace\tand quiet\u3000here\n", "Hello <unk> " + SPECIAL]
# every Unicode White_Space character, some lookalikes that are not (\x1c, U+200B, U+180E, U+FEFF), letters
WHITESPACE = "\t\n\v\f\r \x85\xa0\u1680\u2000\u2003\u200a\u2028\u2029\u202f\u205f\u3000"
ALPHABET = WHITESPACE + "\x1c\u200b\u180e\ufeffHelo wrd!.日😀"


@pytest.fixture(scope="module")
def word_tokenizer():
    return Tokenizer.train(TEXTS * 2, vocab_size=12, kind="word", special_tokens=[SPECIAL], workers=1)


def pieces(tokenizer, ids):
    return [tokenizer.token_bytes(i).decode() for i in ids]


def test_hello_world_is_cut_into_runs_with_punctuation_attached():
    tokenizer = Tokenizer.train(["Hello world!"], vocab_size=10, kind="word", min_frequency=1, workers=1)
    assert pieces(tokenizer, tokenizer.encode("Hello world!")) == ["Hello", " ", "world!"]
    assert tokenizer.decode(tokenizer.encode("Hello world!")) == "Hello world!"


def test_vocabulary_is_by_count_then_bytes_and_unknown_is_id_0(word_tokenizer):
    # counts in TEXTS * 2: ' ' 8, 'Hello' 6, 'world!' 4, '\n' 4, then count 2: '  ', '\t', '\u3000', 'and',
    # 'here', 'peace', 'quiet', 'there.' (UTF-8 order); '<unk>' and the special token are never pieces
    vocab = [word_tokenizer.token_bytes(i).decode() for i in range(word_tokenizer.vocab_size)]
    assert vocab == ["<unk>", " ", "Hello", "\n", "world!", "\t", "  ", "and", "here", "peace", "quiet", SPECIAL]
    assert word_tokenizer.encode("Hello there.") == [2, 1, 0]
    assert word_tokenizer.decode([2, 1, 0]) == "Hello <unk>"
    assert word_tokenizer.encode(SPECIAL) == [0]  # plain text unless allowed
    assert word_tokenizer.encode(SPECIAL, allowed_special="all") == [11]


def test_training_is_deterministic_and_the_file_round_trips(tmp_path, word_tokenizer):
    again = Tokenizer.train(list(reversed(TEXTS * 2)), vocab_size=12, kind="word", special_tokens=[SPECIAL],
                            workers=2)
    assert again.fingerprint == word_tokenizer.fingerprint
    path = tmp_path / "word.json"
    word_tokenizer.save(path)
    loaded = Tokenizer.load(path)
    assert loaded.kind == "word" and loaded.fingerprint == word_tokenizer.fingerprint


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=ALPHABET, max_size=40))
def test_hf_word_level_file_gives_the_same_ids(tmp_path_factory, word_tokenizer, text):
    path = tmp_path_factory.getbasetemp() / "word-hf.json"
    if not path.exists():
        word_tokenizer.save(path)
    hf = HFTokenizer.from_file(str(path))
    ids = word_tokenizer.encode(text)
    assert hf.encode(text).ids == ids
    assert hf.decode(ids) == word_tokenizer.decode(ids)


def test_word_kind_rejects_merges_and_unknown_kinds(tmp_path):
    with pytest.raises(TokenizerError, match="word kind has no merges"):
        Tokenizer.train(TEXTS, merges=5, kind="word")
    config = tmp_path / "c.yaml"
    config.write_text("tokenizer: {kind: word, vocab_size: null, merges: 5}\n")
    with pytest.raises(ConfigError, match="tokenizer.merges does not apply to the word kind"):
        load_config(config)
    config.write_text("tokenizer: {kind: words}\n")
    with pytest.raises(ConfigError, match="tokenizer.kind must be one of 'byte', 'char', 'word'; got 'words'"):
        load_config(config)
    result = CliRunner().invoke(cli, ["tokenizer", "train", str(config), "--kind", "words"])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1


def test_eval_shows_the_unknown_share_beside_bpe(tmp_path, word_tokenizer, byte_tokenizer):
    word_path, byte_path, text = tmp_path / "word.json", tmp_path / "byte.json", tmp_path / "t.txt"
    word_tokenizer.save(word_path)
    byte_tokenizer.save(byte_path)
    text.write_text("Hello world! Goodbye world!")  # 7 pieces, 'Goodbye' unknown
    result = CliRunner().invoke(cli, ["tokenizer", "eval", str(text), "--tokenizer", str(word_path),
                                      "--tokenizer", str(byte_path)])
    header, row = result.output.splitlines()
    assert "word.json unknown" in header and "byte.json unknown" in header
    assert row.split()[2:5] == ["7", "3.86", "14.29%"] and row.split()[7] == "0.00%"


def test_pipeline_trains_encodes_and_guards_with_the_word_kind(tmp_path, tiny_project):
    tiny_project(tokenizer={"kind": "word", "vocab_size": 20})
    (tmp_path / "raw" / "a.txt").write_text("\n\n".join(f"Q: what is {i}?\nA: it is {i % 7}." for i in range(40)))
    run = CliRunner().invoke(cli, ["run", "--config", "lmprep.yaml"])
    assert run.exit_code == 0, run.output
    assert "trained vocab 16 (0 merges) (only 14 distinct pieces occur at least 2 times)" in run.output
    assert Tokenizer.load("out/tokenizer.json").kind == "word"
    other = tmp_path / "other.json"
    Tokenizer.train(["Q: A: what is it"], vocab_size=20, kind="word", special_tokens=[SPECIAL],
                    min_frequency=1).save(other)
    same = CliRunner().invoke(cli, ["check", "out/ckpt", "--tokenizer", "out/tokenizer.json"])
    refused = CliRunner().invoke(cli, ["check", "out/ckpt", "--tokenizer", str(other)])
    assert same.exit_code == 0 and refused.exit_code == 1
