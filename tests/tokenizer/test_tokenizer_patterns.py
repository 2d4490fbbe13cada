"""Custom split patterns: chunks are HF ``Split(isolated)``'s pieces, whatever the pattern's groups or empty matches."""

from __future__ import annotations

from unittest import mock

import pytest
import tokenizers
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Regex, pre_tokenizers

from pipeline.tokenizer import Tokenizer, patterns
from pipeline.tokenizer.patterns import GPT2, GPT4, WORD, chunk_aligned, resolve_pattern, splitter

# Pieces that mean the same in Python's ``regex`` and in Oniguruma: groups, lookarounds, pieces
# that match the empty string.
ATOMS = [r"\p{L}+", r" ?\p{L}+", r"\p{N}{1,3}", r"\s+", r"\s+(?!\S)", r"[^\s\p{L}\p{N}]+", r"'s", r"[a-z]*",
         r"x?", r"(?=\s)", r"(?<=\p{L})\p{N}", r"(?<! )\s", r"\b", r"(?:)", r"(?:\p{N}+)?", r"(a|)",
         r"[\p{Han}\p{Hiragana}]+"]
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


@st.composite
def documents_in_pieces(draw):
    """Documents, and each one cut at random places into ``(text, ends_document)`` pieces."""
    documents = draw(st.lists(TEXT, min_size=1, max_size=3))
    pieces = []
    for document in documents:
        bounds = [0, *sorted(draw(st.lists(st.integers(0, len(document)), max_size=5))), len(document)]
        pieces += [(document[start:end], end == len(document) and index == len(bounds) - 2)
                   for index, (start, end) in enumerate(zip(bounds, bounds[1:]))]
    return documents, pieces


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([GPT4, GPT2, WORD, "", resolve_pattern(r" ?\p{L}+", kind="byte")]), documents_in_pieces(),
       st.integers(1, 8))
def test_chunk_aligned_texts_give_the_chunks_of_the_whole_documents(pattern, documents_and_pieces, cut_chars):
    documents, pieces = documents_and_pieces
    with mock.patch.object(patterns, "CUT_CHARS", cut_chars):
        texts = list(chunk_aligned(pieces, pattern))
    split = splitter(pattern)
    assert [chunk for text in texts for chunk in split(text)] == [chunk for doc in documents for chunk in split(doc)]
    assert "".join(texts) == "".join(documents)


@pytest.mark.parametrize("pattern, texts", [
    (GPT4, ["ab", " cd ef\n", "gh"]),  # the last cut in what is held
    (GPT2, ["ab", " cd", " ef\ngh"]),  # a newline before a letter is no cut for GPT-2
    ("", ["ab cd ef\ngh"]),  # no pre-split: the document is one chunk
])
def test_chunk_aligned_cuts_a_long_document_where_no_chunk_crosses(pattern, texts, monkeypatch):
    monkeypatch.setattr(patterns, "CUT_CHARS", 3)
    pieces = [("ab c", False), ("d", False), (" ef\ngh", False), ("", True)]
    assert list(chunk_aligned(pieces, pattern)) == texts
