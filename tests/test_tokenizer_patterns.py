"""Custom split patterns: chunks are HF ``Split(isolated)``'s pieces, whatever the pattern's groups or empty matches."""

from __future__ import annotations

import pytest
import tokenizers
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Regex, pre_tokenizers

from pipeline.tokenizer import Tokenizer
from pipeline.tokenizer.patterns import resolve_pattern, splitter

# Pieces that mean the same in Python's ``regex`` and in Oniguruma: groups, lookarounds, pieces
# that match the empty string.
ATOMS = [r"\p{L}+", r" ?\p{L}+", r"\p{N}{1,3}", r"\s+", r"\s+(?!\S)", r"[^\s\p{L}\p{N}]+", r"'s", r"[a-z]*",
         r"x?", r"(?=\s)", r"(?<=\p{L})\p{N}", r"(?<! )\s", r"\b", r"(?:)", r"(?:\p{N}+)?", r"(a|)", r"[\p{Han}\p{Hiragana}]+"]
TEXT = st.lists(st.sampled_from([*"ab xyz'-.\n\t1234éß日本語😀Ж\u00a0", "  ", "don't", "Zebra", "\r\n"]),
                max_size=30).map("".join)


@st.composite
def custom_patterns(draw):
    alternatives = draw(st.lists(st.sampled_from(ATOMS), min_size=1, max_size=4))
    wrapped = [draw(st.sampled_from(["{}", "({})", "(?:{})"])).format(a) for a in alternatives]
    return "|".join(wrapped)


def hf_pieces(pattern: str, text: str) -> list[str]:
    return [piece for piece, _ in pre_tokenizers.Split(Regex(pattern), "isolated").pre_tokenize_str(text)]


@settings(max_examples=300, deadline=None)
@given(custom_patterns(), TEXT, st.booleans())
def test_chunks_are_hf_split_pieces(pattern, text, completed):
    if completed:
        pattern = resolve_pattern(pattern, kind="byte")
    chunks = splitter(pattern)(text)
    assert chunks == hf_pieces(pattern, text)
    assert "".join(chunks) == text


@pytest.mark.parametrize("pattern, text, chunks", [
    (r"(\p{L}+)|\s+|[^\s\p{L}]+", "Hi, you!", ["Hi", ",", " ", "you", "!"]),
    (r"a*|b+", "abb", ["a", "b", "b"]),  # after the empty match before 'b', the search moves on one character
    (r"(?=b)", "abba", ["a", "b", "ba"]),  # the text between empty matches
    (r"(?:)", "ab", ["a", "b"]),
])
def test_whole_matches_and_the_text_between_them_are_chunks(pattern, text, chunks):
    assert splitter(pattern)(text) == chunks == hf_pieces(pattern, text)


@pytest.fixture(scope="module")
def merges(byte_tokenizer):
    return byte_tokenizer.merges


@settings(max_examples=40, deadline=None)
@given(custom_patterns(), TEXT)
def test_custom_pattern_round_trips_and_matches_hf_ids(merges, tmp_path_factory, pattern, text):
    tok = Tokenizer.from_merges(kind="byte", pattern=resolve_pattern(pattern, kind="byte"), merges=merges)
    path = tmp_path_factory.mktemp("pattern") / "tokenizer.json"
    tok.save(path)
    ids = tok.encode_ordinary(text)
    assert tok.decode(ids) == text
    assert tokenizers.Tokenizer.from_file(str(path)).encode(text).ids == ids


def test_training_with_a_capture_group_keeps_every_character(tokenizer_corpus, tmp_path):
    pattern = r"(\p{L}+)|\s+|[^\s\p{L}]+"
    tok = Tokenizer.train(tokenizer_corpus * 2, vocab_size=320, pattern=pattern, workers=1)
    tok.save(tmp_path / "tokenizer.json")
    hf = tokenizers.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    assert any(b" " in tok.token_bytes(i) or b"," in tok.token_bytes(i) for i in range(256, tok.vocab_size))
    for text in tokenizer_corpus:
        assert tok.decode(tok.encode_ordinary(text)) == text
        assert hf.encode(text).ids == tok.encode_ordinary(text)
