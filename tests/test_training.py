"""BPE training: goldens, a naive reference, rustbpe parity, determinism and options."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from collections import Counter
from pathlib import Path

import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.errors import TokenizerError
from pipeline.tokenizer import _train_count, _train_pairs
from pipeline.tokenizer.training import train_merges
from conftest import replace_pair

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


def replay(ids: list[int], merges: list[tuple[int, int]], first_id: int) -> list[int]:
    """Encode by applying the merges in training order (the definition of BPE encoding)."""
    for offset, pair in enumerate(merges):
        ids = replace_pair(ids, pair, first_id + offset)
    return ids


def reference_merges(texts, *, kind, pattern, num_merges, min_frequency=2, merge_newlines=True):
    """Recount every pair of every chunk before each merge: slow, obviously right, same tie rule."""
    pieces = [piece for text in texts for piece in (regex.findall(pattern, text) if pattern else [text]) if piece]
    if kind == "byte":
        alphabet, chunks, first_id, newline = [], [list(p.encode()) for p in pieces], 256, 10
    else:
        alphabet = sorted(set("".join(pieces)))
        ids = {char: i + 1 for i, char in enumerate(alphabet)}
        chunks, first_id = [[ids[c] for c in p] for p in pieces], len(alphabet) + 1
        newline = ids.get("\n")
    merges = []
    while len(merges) < num_merges:
        counts = Counter(pair for chunk in chunks for pair in zip(chunk, chunk[1:]))
        allowed = [(-n, pair) for pair, n in counts.items() if merge_newlines or newline not in pair]
        if not allowed or -min(allowed)[0] < min_frequency:
            break
        pair = min(allowed)[1]
        chunks = [replace_pair(chunk, pair, first_id + len(merges)) for chunk in chunks]
        merges.append(pair)
    return merges, alphabet


# --- goldens -----------------------------------------------------------------------------------


def test_ababab_byte_golden():
    result = train_merges(["ababab"], kind="byte", pattern="", num_merges=2, workers=1)
    assert result.merges == [(97, 98), (256, 256)]
    assert replay(list(b"ababab"), result.merges, 256) == [257, 256]
    assert result.stop_reason is None


def test_aaabdaaabac_byte_golden():
    # Counts tie at 2 between (97, 98) and (256, 97) after the first merge: the smaller pair wins.
    result = train_merges(["aaabdaaabac"], kind="byte", pattern="", num_merges=3, workers=1)
    assert result.merges == [(97, 97), (97, 98), (256, 257)]
    assert replay(list(b"aaabdaaabac"), result.merges, 256) == [258, 100, 258, 97, 99]


def test_low_lower_lowest_char_golden():
    result = train_merges(["low lower lowest"], kind="char", pattern="", num_merges=4, workers=1)
    assert result.alphabet == [" ", "e", "l", "o", "r", "s", "t", "w"]
    assert result.merges == [(3, 4), (9, 8), (1, 10), (11, 2)]
    assert token_strings(result) == ["lo", "low", " low", " lowe"]
    ids = [result.alphabet.index(c) + 1 for c in "low lower lowest"]
    assert len(ids) == 16
    assert len(replay(ids, result.merges, len(result.alphabet) + 1)) == 6


def test_overlapping_runs_merge_left_to_right():
    result = train_merges(["aaaaa", "aaa"], kind="byte", pattern="", num_merges=3, min_frequency=1, workers=1)
    assert result.merges == [(97, 97), (256, 97), (256, 257)]


# --- against a naive reference -----------------------------------------------------------------

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
def test_matches_naive_reference(texts, kind, pattern, num_merges, min_frequency, merge_newlines):
    options = dict(kind=kind, pattern=pattern, num_merges=num_merges, min_frequency=min_frequency,
                   merge_newlines=merge_newlines)
    result = train_merges(texts, workers=1, **options)
    merges, alphabet = reference_merges(texts, **options)
    assert result.merges == merges
    assert result.alphabet == alphabet
    assert (result.stop_reason is None) == (len(merges) == num_merges)
    with pytest.MonkeyPatch.context() as patch:  # every merge through the numpy path
        patch.setattr(_train_pairs, "BULK_CHUNKS", 1)
        assert train_merges(texts, workers=1, **options).merges == merges


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
    with pytest.MonkeyPatch.context() as patch:  # every merge through the numpy path
        patch.setattr(_train_pairs, "BULK_CHUNKS", 1)
        assert train_merges(texts, kind="byte", pattern=GPT4_PATTERN, num_merges=vocab_size - 256).merges == result.merges


# --- determinism -------------------------------------------------------------------------------


def test_same_result_for_any_worker_count():
    texts = stdlib_texts(60_000)
    results = [train_merges(texts, kind="byte", pattern=GPT4_PATTERN, num_merges=300, workers=n) for n in (1, 2, 3)]
    assert results[0] == results[1] == results[2]


def test_same_result_for_any_hash_seed(tmp_path):
    script = (
        "from pipeline.tokenizer.training import train_merges\n"
        "texts = ['the cat sat on the mat, the end. ' * 3 + str(i) for i in range(50)] + ['zz yy xx ww']\n"
        "print(train_merges(texts, kind='char', pattern=r'\\S+|\\s+', num_merges=40, min_frequency=1, workers=2))\n"
    )
    outputs = set()
    for seed in ("0", "1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True,
                             cwd=Path(__file__).resolve().parents[1])
        outputs.add(run.stdout)
    assert len(outputs) == 1


# --- options and stopping ----------------------------------------------------------------------


def test_pairs_never_cross_texts_or_chunks():
    assert train_merges(["a", "b"] * 10, kind="byte", pattern="", num_merges=5, workers=1).merges == []
    result = train_merges(["a b"] * 10, kind="byte", pattern=r"\S+|\s+", num_merges=5, workers=1)
    assert result.merges == []


def test_stops_when_no_pair_is_frequent_enough():
    result = train_merges(["abcd", "ab"], kind="byte", pattern="", num_merges=10, workers=1)
    assert result.merges == [(97, 98)]
    assert result.stop_reason == "no pair occurs at least 2 times after 1 merges"
    assert train_merges(["abcd", "ab"], kind="byte", pattern="", num_merges=10, min_frequency=3,
                        workers=1).merges == []


@pytest.mark.parametrize("kind", ["byte", "char"])
def test_merge_newlines_false_keeps_newline_out_of_learned_tokens(kind):
    texts = ["ab\nab\n\nc\n" * 20, "xy\n\nxy\n" * 20]
    result = train_merges(texts, kind=kind, pattern="", num_merges=50, merge_newlines=False, workers=1)
    learned = token_strings(result) if kind == "char" else [t.decode("utf-8", "replace")
                                                            for t in token_bytes(result.merges)[256:]]
    assert result.merges
    assert not any("\n" in token for token in learned)
    allowed = train_merges(texts, kind=kind, pattern="", num_merges=50, workers=1)
    assert len(allowed.merges) > len(result.merges)


def test_char_alphabet_is_sorted_distinct_characters():
    result = train_merges(["b\u00e9a", "\U0001f600a"], kind="char", pattern="", num_merges=0, workers=1)
    assert result.alphabet == ["a", "b", "\u00e9", "\U0001f600"]
    assert result.merges == [] and result.stop_reason is None


def test_empty_input():
    result = train_merges([], kind="byte", pattern=GPT4_PATTERN, num_merges=3, workers=1)
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


def test_utf8_words_fall_back_when_a_chunk_holds_the_separator():
    chunks = ["a\U0010ffffb", "\u00e9"]
    assert _train_pairs.utf8_words(chunks) == [c.encode().decode("latin-1") for c in chunks]
    assert _train_pairs.utf8_words(["x", "\u00e9"]) == ["x", "\xc3\xa9"]


@settings(max_examples=300, deadline=None)
@given(texts=st.lists(st.text(alphabet=" \n\r\t\x0b\x1c\u00a0aA.\u00e9'1s", max_size=30), max_size=6))
def test_segment_counting_equals_whole_text_counting(texts):
    assert GPT4_PATTERN in _train_count.LINE_SAFE_PATTERNS
    whole = Counter(chunk for text in texts for chunk in regex.findall(GPT4_PATTERN, text))
    assert _train_count._count_block(GPT4_PATTERN, texts) == whole


def test_segment_counting_on_real_text():
    texts = stdlib_texts(100_000) + ["a\n\nb", "x \nfoo", "  \n  \n x", "foo.\n\nbar\n", "\r\n\tx\n"]
    whole = Counter(chunk for text in texts for chunk in regex.findall(GPT4_PATTERN, text))
    assert _train_count._count_block(GPT4_PATTERN, texts) == whole
