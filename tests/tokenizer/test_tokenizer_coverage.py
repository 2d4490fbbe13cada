"""The char kind's ``character_coverage``: the most frequent characters covering a share of the text make
the alphabet, the rest are unknown (ID 0), as sentencepiece's option of that name."""

from __future__ import annotations

import pytest
import tokenizers
from click.testing import CliRunner

from pipeline.config import load_config, parse_config
from pipeline.errors import AlphabetTooLargeError, ConfigError, TokenizerError
from pipeline.tokenizer import Tokenizer
from pipeline.tokenizer._train_count import count_chunks
from pipeline.tokenizer.patterns import resolve_pattern
from stages.cli.main import cli

COMMON = "the cat sat on the mat"
TEXTS = [COMMON] * 50 + ["zebra ×ÿ✓ quiz"]  # 9 characters seen once each: 9 of 1,115
EOS = "<|endoftext|>"


def train(**options) -> Tokenizer:
    return Tokenizer.train(TEXTS, kind="char", special_tokens=[EOS], min_frequency=2, **options)


def test_the_rarest_characters_beyond_the_coverage_are_unknown_and_never_merged():
    tokenizer = train(vocab_size=40, character_coverage=0.99)
    assert tokenizer.alphabet == sorted(set(COMMON))
    assert tokenizer.encode("quiz ×") == [0, 0, 0, 0, tokenizer.encode(" ")[0], 0]
    assert all(0 not in pair for pair in tokenizer.merges)
    assert tokenizer.decode(tokenizer.encode(COMMON)) == COMMON
    assert tokenizer.coverage_note == ("9 of 19 characters (0.898% of the text) are outside character_coverage "
                                       "0.99 and encode as the unknown ID 0")


def test_a_vocab_smaller_than_the_characters_fits_with_a_coverage():
    size = 1 + len(set(COMMON)) + 1  # unknown, the common characters, the special token
    with pytest.raises(AlphabetTooLargeError, match=r"19 characters .* raise --vocab-size, or keep fewer characters "
                                                    r"with --character-coverage"):
        train(vocab_size=size)
    assert train(vocab_size=size, character_coverage=0.99).vocab_size == size


def test_full_coverage_is_the_plain_char_kind_and_counts_train_alike():
    plain = train(vocab_size=40)
    assert train(vocab_size=40, character_coverage=1.0).fingerprint == plain.fingerprint and plain.coverage_note is None
    covered = train(vocab_size=40, character_coverage=0.99)
    counts = count_chunks(TEXTS, pattern=resolve_pattern(None, kind="char"), workers=1)
    from_counts = Tokenizer.train_from_counts(counts, kind="char", special_tokens=[EOS], vocab_size=40,
                                              character_coverage=0.99)
    assert from_counts.fingerprint == covered.fingerprint != plain.fingerprint


def test_hf_tokenizers_encode_the_unknown_characters_as_lmprep_does(tmp_path):
    tokenizer = train(vocab_size=40, character_coverage=0.99)
    tokenizer.save(tmp_path / "tokenizer.json")
    hf = tokenizers.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    for text in ["the zebra sat on the quiz ✓✓", "×ÿ", COMMON]:
        assert hf.encode(text).ids == tokenizer.encode(text), text


def test_a_coverage_applies_to_the_char_kind_only():
    with pytest.raises(TokenizerError, match="applies to the char kind only"):
        Tokenizer.train(TEXTS, kind="byte", vocab_size=300, character_coverage=0.9)
    with pytest.raises(ConfigError, match=r"tokenizer.character_coverage 0.9 must be above 0, and below 1 only for "
                                          r"the char kind \(tokenizer.kind is 'byte'\)"):
        parse_config({"tokenizer": {"character_coverage": 0.9}})
    with pytest.raises(ConfigError, match="tokenizer.character_coverage 0.0 must be above 0"):
        parse_config({"tokenizer": {"kind": "char", "character_coverage": 0}})


def test_a_config_run_names_the_config_keys_and_says_what_the_coverage_left_out(tmp_path, tiny_project):
    tiny_project(tokenizer={"kind": "char", "vocab_size": 20, "workers": 1})
    (tmp_path / "raw" / "rare.txt").write_text("ÿ✓ and ¿¡ too")
    refused = CliRunner().invoke(cli, ["run", "tokenizer", "--config", "lmprep.yaml"])
    assert refused.exit_code == 2, refused.output
    error = refused.output.splitlines()[-1]
    assert "raise tokenizer.vocab_size, or keep fewer characters with tokenizer.character_coverage" in error
    assert "--" not in error
    result = CliRunner().invoke(cli, ["run", "tokenizer", "--config", "lmprep.yaml",
                                      "--set", "tokenizer.character_coverage=0.7"])
    assert result.exit_code == 0, result.output
    assert "are outside character_coverage 0.7 and encode as the unknown ID 0" in result.output
    assert Tokenizer.load(tmp_path / "out" / "tokenizer.json").vocab_size <= 20


def test_the_char_config_trains_on_real_text_with_more_characters_than_its_vocab():
    """Real text holds a long tail of characters: 1,290 distinct ones here, most of them once or twice."""
    from pathlib import Path

    settings = load_config(Path(__file__).resolve().parents[2] / "configs" / "char.yaml").tokenizer
    tail = [chr(code) for code in range(0x4E00, 0x4E00 + 1290 - len(set(COMMON)))]
    texts = [COMMON] * 200_000 + ["".join(tail)] + ["".join(tail[:100])]  # the tail: 0.03% of the text
    options = dict(kind=settings.kind, vocab_size=settings.vocab_size, special_tokens=settings.special_tokens)
    with pytest.raises(AlphabetTooLargeError, match="smaller than the 1,290 characters"):
        Tokenizer.train(texts, **options)
    tokenizer = Tokenizer.train(texts, character_coverage=settings.character_coverage, **options)
    assert tokenizer.vocab_size <= 512 and tokenizer.alphabet == sorted(set(COMMON))
    assert tokenizer.encode(tail[0]) == [0]
