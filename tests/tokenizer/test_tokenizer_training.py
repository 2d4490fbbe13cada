"""BPE training: goldens, the reference BPE as oracle, rustbpe parity, determinism and options.

Everything trained here is trained on both backends (the native core, when built, and the Python path,
which is ``reference.train``), each result held to the reference, to rustbpe, or to the other backend's;
what needs thousands of merges (rustbpe parity) runs on the backend in use, the reference being too slow
for it, and native = reference is held on random text.
"""

from __future__ import annotations

import contextlib
import os
import random
import string
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import regex
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.config import MAX_TRAINED_IDS, parse_config
from pipeline.errors import ConfigError, TokenizerError
from pipeline.tokenizer import Tokenizer, _train_pairs, backend, reference
from pipeline.tokenizer.trainer import TrainResult, train_merges
from stages.cli.main import cli

GPT4_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+"""
)


def token_strings(result) -> list[str]:
    """The learned tokens of a char-kind result, in merge order."""
    vocab = ["\ufffd", *result.alphabet]
    for left, right in result.merges:
        vocab.append(vocab[left] + vocab[right])
    return vocab[len(result.alphabet) + 1 :]


def token_bytes(merges: list[tuple[int, int]]) -> list[bytes]:
    vocab = [bytes([i]) for i in range(256)]
    for left, right in merges:
        vocab.append(vocab[left] + vocab[right])
    return vocab


@contextlib.contextmanager
def python_backend():
    """The Python path forced, as ``LMPREP_BACKEND=python`` does (a no-op without the native core)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(backend, "native", None)
        yield patch


def on_both_backends(texts, **options) -> TrainResult:
    """``train_merges`` on the Python path and, when built, on the native core: the same result."""
    with python_backend():
        result = train_merges(texts, **options)
    if backend.native is not None:
        assert train_merges(texts, **options) == result
    return result


# --- goldens -----------------------------------------------------------------------------------


def train_both(texts, **options) -> TrainResult:
    """The trainer's result on both backends, checked equal to the reference's."""
    result = on_both_backends(texts, workers=1, **options)
    assert result == TrainResult(*reference.train(texts, **options))
    return result


def test_ababab_byte_golden():
    result = train_both(["ababab"], kind="byte", pattern="", num_merges=2)
    assert result.merges == [(97, 98), (256, 256)]
    assert reference.encode("ababab", kind="byte", pattern="", merges=result.merges) == [257, 256]
    assert result.stop_reason is None


def test_aaabdaaabac_byte_golden():
    # Counts tie at 2 between (97, 98) and (256, 97) after the first merge: the smaller pair wins.
    result = train_both(["aaabdaaabac"], kind="byte", pattern="", num_merges=3)
    assert result.merges == [(97, 97), (97, 98), (256, 257)]
    assert reference.encode("aaabdaaabac", kind="byte", pattern="", merges=result.merges) == [258, 100, 258, 97, 99]


def test_low_lower_lowest_char_golden():
    result = train_both(["low lower lowest"], kind="char", pattern="", num_merges=4)
    assert result.alphabet == [" ", "e", "l", "o", "r", "s", "t", "w"]
    assert result.merges == [(3, 4), (9, 8), (1, 10), (11, 2)]
    assert token_strings(result) == ["lo", "low", " low", " lowe"]
    assert len(reference.base_ids("low lower lowest", "char", reference.char_ids(result.alphabet))) == 16
    ids = reference.encode("low lower lowest", kind="char", pattern="", merges=result.merges, alphabet=result.alphabet)
    assert len(ids) == 6


def test_overlapping_runs_merge_left_to_right():
    result = train_both(["aaaaa", "aaa"], kind="byte", pattern="", num_merges=3, min_frequency=1)
    assert result.merges == [(97, 97), (256, 97), (256, 257)]
    assert reference.merge([97] * 5, (97, 97), 256) == [256, 256, 97]


def test_identical_chunks_weigh_their_count():
    # "ab" three times outweighs "cd" twice however the chunks are laid out
    assert reference.train_from_counts({"ab": 3, "cd": 2}, kind="byte", num_merges=2)[0] == [(97, 98), (99, 100)]
    assert train_both(["ab cd ab cd ab"], kind="byte", pattern=r"\S+|\s+", num_merges=2).merges == [(97, 98), (99, 100)]


# --- against the reference BPE -----------------------------------------------------------------

texts_strategy = st.lists(st.text(alphabet="ab \nc\u00e9\u4e2d", max_size=40), max_size=8)


@settings(max_examples=150, deadline=None)
@given(
    texts=texts_strategy,
    kind=st.sampled_from(["byte", "char"]),
    pattern=st.sampled_from(["", GPT4_PATTERN, r"\S+|\s+"]),
    num_merges=st.integers(0, 30),
    min_frequency=st.integers(1, 3),
    merge_newlines=st.booleans(),
)
def test_matches_the_reference(texts, kind, pattern, num_merges, min_frequency, merge_newlines):
    options = dict(kind=kind, pattern=pattern, num_merges=num_merges, min_frequency=min_frequency,
                   merge_newlines=merge_newlines)
    expected = TrainResult(*reference.train(texts, **options))
    with python_backend():
        assert train_merges(texts, workers=1, **options) == expected
    assert train_merges(texts, workers=1, **options) == expected  # the native core, when built


# --- parity with rustbpe on real text ----------------------------------------------------------


def stdlib_texts(limit_bytes: int) -> list[str]:
    """Real text available wherever Python runs: the standard library's own sources."""
    texts, size = [], 0
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        texts.append(text)
        size += len(text.encode())
        if size >= limit_bytes:
            break
    return texts


def test_byte_merges_identical_to_rustbpe():
    rustbpe = pytest.importorskip("rustbpe")
    texts = stdlib_texts(200_000)
    vocab_size = 1000
    result = train_merges(texts, kind="byte", pattern=GPT4_PATTERN, num_merges=vocab_size - 256, workers=2)
    oracle = rustbpe.Tokenizer()
    oracle.train_from_iterator(iter(texts), vocab_size, pattern=GPT4_PATTERN)
    expected = [token for token, _rank in sorted(oracle.get_mergeable_ranks(), key=lambda item: item[1])]
    assert result.stop_reason is None
    assert token_bytes(result.merges) == expected


# --- ids past the surrogate block (U+D800..U+DFFF) ---------------------------------------------


def random_words_texts(words: int) -> list[str]:
    """Distinct random 8-letter words, each text 100 of them, everything twice: every pair occurs
    at least twice until the words are whole tokens, so training runs to ~2.9 merges per word."""
    rng = random.Random(0)
    vocabulary = ["".join(rng.choices(string.ascii_lowercase, k=8)) for _ in range(words)]
    return [" ".join(vocabulary[i : i + 100]) for i in range(0, words, 100)] * 2


@pytest.fixture(scope="module")
def past_surrogates():
    """Texts, rustbpe trained on them to 58,000 ids (the last 656 merges get ids past U+DFFF), and the native
    core's merges (the reference would take hours for as many merges)."""
    rustbpe = pytest.importorskip("rustbpe")
    if backend.native is None:
        pytest.skip("the native core is off: 58,000 merges would take the reference hours")
    texts = random_words_texts(20_000)
    oracle = rustbpe.Tokenizer()
    oracle.train_from_iterator(iter(texts), 58_000, pattern=GPT4_PATTERN)
    expected = [token for token, _rank in sorted(oracle.get_mergeable_ranks(), key=lambda item: item[1])]
    result = train_merges(texts, kind="byte", pattern=GPT4_PATTERN, num_merges=len(expected) - 256, workers=1)
    return texts, oracle, expected, result


def test_ids_past_the_surrogate_block_identical_to_rustbpe(past_surrogates):
    _texts, _oracle, expected, result = past_surrogates
    assert result.stop_reason is None
    assert token_bytes(result.merges) == expected


@pytest.mark.parametrize("backend_name", ["python", "native"])
def test_char_alphabet_across_the_surrogate_block_matches_reference(backend_name):
    # 60,000 distinct characters: base ids run through 55,296..57,343 and past it.
    letters = [chr(c) for c in range(0x4E00, 0x4E00 + 20_000)] + [chr(c) for c in range(0x20000, 0x20000 + 40_000)]
    texts = ["".join(letters[i : i + 200]) for i in range(0, len(letters), 200)]
    texts += [letters[-1] + letters[-2] + letters[0]] * 3 + [letters[56_000] + letters[57_500]] * 2
    options = dict(kind="char", pattern="", num_merges=4)
    if backend_name == "native" and backend.native is None:
        pytest.skip("the native core is off")
    with contextlib.nullcontext() if backend_name == "native" else python_backend():
        result = train_merges(texts, workers=1, **options)
    assert (result.merges, result.alphabet) == reference.train(texts, **options)[:2]
    assert max(max(pair) for pair in result.merges) > 57_343


def test_tokenizer_past_the_surrogate_block_encodes_like_rustbpe(past_surrogates):
    texts, oracle, _expected, result = past_surrogates
    tokenizer = Tokenizer.from_merges(kind="byte", pattern=GPT4_PATTERN, merges=result.merges)
    text = " ".join(texts[-1].split()[::-1]) + " unseen words, \u00fcn\u00efcode"
    ids = tokenizer.encode_ordinary(text)
    assert max(ids) > 57_343
    assert ids == oracle.encode(text)
    assert tokenizer.decode(ids) == text


def test_id_limit_is_the_documented_vocabulary_maximum():
    assert _train_pairs.MAX_ID + 1 == MAX_TRAINED_IDS == 1_112_063
    assert _train_pairs.symbol_of(_train_pairs.MAX_ID) == 0x10FFFE  # the last code point below the separator
    with pytest.raises(TokenizerError, match="holds at most 1112063"):
        train_merges(["abab"], kind="byte", pattern="", num_merges=MAX_TRAINED_IDS - 255, workers=1)


def test_ids_above_the_maximum_are_refused_by_config_cli_and_trainer(tmp_path):
    with pytest.raises(ConfigError, match=r"tokenizer.vocab_size must be at most 1112064 \(1112063 base tokens and "
                                          r"merges, the most training can hold, and 1 special token\), got 1112065"):
        parse_config({"tokenizer": {"vocab_size": MAX_TRAINED_IDS + 2}})
    assert parse_config({"tokenizer": {"vocab_size": MAX_TRAINED_IDS + 1}}).tokenizer.vocab_size == MAX_TRAINED_IDS + 1
    with pytest.raises(ConfigError, match=r"tokenizer.merges must be at most 1111807 for a byte-level tokenizer"):
        parse_config({"tokenizer": {"vocab_size": None, "merges": MAX_TRAINED_IDS - 255}})
    word = {"kind": "word", "vocab_size": MAX_TRAINED_IDS * 2}  # no merges: the limit is BPE training's
    assert parse_config({"tokenizer": word}).tokenizer.vocab_size == MAX_TRAINED_IDS * 2
    (tmp_path / "a.txt").write_text("abab", "utf-8")
    result = CliRunner().invoke(cli, ["tokenizer", "train", str(tmp_path / "a.txt"), "--vocab-size", "1112065"])
    assert result.exit_code == 2
    assert "training would need 1112064 ids for base tokens and merges, but it holds at most 1112063" in result.output
    assert "Traceback" not in result.output


# --- determinism -------------------------------------------------------------------------------


def test_same_result_for_any_worker_count():
    texts = stdlib_texts(60_000)
    options = dict(kind="byte", pattern=GPT4_PATTERN, num_merges=300)
    results = [train_merges(texts, workers=n, **options) for n in (1, 2, 3)]
    with python_backend():
        results.append(train_merges(texts, workers=2, **options))
    assert results[0] == results[1] == results[2] == results[3]


def test_same_result_for_any_hash_seed(tmp_path):
    script = (
        "from pipeline.tokenizer.trainer import train_merges\n"
        "texts = ['the cat sat on the mat, the end. ' * 3 + str(i) for i in range(50)] + ['zz yy xx ww']\n"
        "print(train_merges(texts, kind='char', pattern=r'\\S+|\\s+', num_merges=40, min_frequency=1, workers=2))\n"
        f"print(train_merges(texts, kind='byte', pattern={GPT4_PATTERN!r}, num_merges=40, workers=2))\n"
    )
    outputs = set()
    for seed, backend_name in (("0", "native"), ("1", "native"), ("12345", "native"), ("1", "python")):
        env = {**os.environ, "PYTHONHASHSEED": seed, backend.ENVIRONMENT_VARIABLE: backend_name}
        run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True,
                             cwd=Path(__file__).resolve().parents[1])
        outputs.add(run.stdout)
    assert len(outputs) == 1


# --- options and stopping ----------------------------------------------------------------------


def test_pairs_never_cross_texts_or_chunks():
    assert on_both_backends(["a", "b"] * 10, kind="byte", pattern="", num_merges=5, workers=1).merges == []
    result = on_both_backends(["a b"] * 10, kind="byte", pattern=r"\S+|\s+", num_merges=5, workers=1)
    assert result.merges == []


def test_stops_when_no_pair_is_frequent_enough():
    result = on_both_backends(["abcd", "ab"], kind="byte", pattern="", num_merges=10, workers=1)
    assert result.merges == [(97, 98)]
    assert result.stop_reason == "no pair occurs at least 2 times after 1 merge"
    assert on_both_backends(["abcd", "ab"], kind="byte", pattern="", num_merges=10, min_frequency=3,
                            workers=1).merges == []


@pytest.mark.parametrize("kind", ["byte", "char"])
def test_merge_newlines_false_keeps_newline_out_of_learned_tokens(kind):
    texts = ["ab\nab\n\nc\n" * 20, "xy\n\nxy\n" * 20]
    result = on_both_backends(texts, kind=kind, pattern="", num_merges=50, merge_newlines=False, workers=1)
    learned = token_strings(result) if kind == "char" else [t.decode("utf-8", "replace")
                                                            for t in token_bytes(result.merges)[256:]]
    assert result.merges
    assert not any("\n" in token for token in learned)
    allowed = on_both_backends(texts, kind=kind, pattern="", num_merges=50, workers=1)
    assert len(allowed.merges) > len(result.merges)


def test_char_alphabet_is_sorted_distinct_characters():
    result = on_both_backends(["b\u00e9a", "\U0001f600a"], kind="char", pattern="", num_merges=0, workers=1)
    assert result.alphabet == ["a", "b", "\u00e9", "\U0001f600"]
    assert result.merges == [] and result.stop_reason is None


def test_empty_input():
    result = on_both_backends([], kind="byte", pattern=GPT4_PATTERN, num_merges=3, workers=1)
    assert result.merges == [] and result.stop_reason == "no pair occurs at least 2 times after 0 merges"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (dict(kind="word"), "unknown tokenizer kind 'word'"),
        (dict(pattern="(unclosed"), "invalid split pattern"),
        (dict(num_merges=-1), "number of merges must be >= 0"),
        (dict(min_frequency=0), "min_frequency must be >= 1"),
        (dict(workers=-2), "workers must be >= 0"),
    ],
)
def test_bad_options_are_clear_errors(options, message):
    arguments = {"kind": "byte", "pattern": "", "num_merges": 1, **options}
    with pytest.raises(TokenizerError, match=regex.escape(message)):
        train_merges(["abab"], **arguments)


def test_utf8_symbols_keep_chunks_apart_whatever_they_hold():
    separator = _train_pairs.SEPARATOR_ID
    assert _train_pairs.utf8_symbols(["a\U0010ffffb", "\u00e9"]).tolist() == [
        separator, 97, 0xF4, 0x8F, 0xBF, 0xBF, 98, separator, 0xC3, 0xA9, separator]
    assert _train_pairs.utf8_symbols([]).tolist() == [separator, separator]
