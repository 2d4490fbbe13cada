"""tiktoken export: an Encoding built from our ranks file gives our IDs."""

from __future__ import annotations

import pytest
import tiktoken
from hypothesis import given, settings
from hypothesis import strategies as st
from tiktoken.load import load_tiktoken_bpe

from pipeline.errors import TokenizerError
from pipeline.tokenizer.tiktoken_export import tiktoken_pattern

from test_tokenizer_hf import MULTILINGUAL


@pytest.fixture(scope="session")
def tiktoken_pairs(trained_tokenizers, tmp_path_factory):
    directory = tmp_path_factory.mktemp("tiktoken")
    pairs = []
    for i, tok in enumerate(t for t in trained_tokenizers if t.kind == "byte"):
        path = directory / f"{i}.tiktoken"
        tok.export_tiktoken(path)
        encoding = tiktoken.Encoding(f"lmprep{i}", pat_str=tiktoken_pattern(tok),
                                     mergeable_ranks=load_tiktoken_bpe(str(path)), special_tokens=tok.special_tokens)
        pairs.append((tok, encoding))
    return pairs


def test_tiktoken_gives_identical_ids(tiktoken_pairs, tokenizer_corpus):
    for ours, encoding in tiktoken_pairs:
        for text in [*MULTILINGUAL, *tokenizer_corpus]:
            assert encoding.encode_ordinary(text) == ours.encode_ordinary(text)
            assert encoding.encode(text, allowed_special="all") == ours.encode(text, allowed_special="all")
        assert encoding.encode_ordinary_batch(MULTILINGUAL) == ours.encode_batch(MULTILINGUAL)


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=200))
def test_tiktoken_parity_on_any_text(tiktoken_pairs, text):
    for ours, encoding in tiktoken_pairs:
        assert encoding.encode_ordinary(text) == ours.encode_ordinary(text)


def test_ranks_file_format(byte_tokenizer, tmp_path):
    byte_tokenizer.export_tiktoken(tmp_path / "x.tiktoken")
    lines = (tmp_path / "x.tiktoken").read_text("ascii").splitlines()
    assert lines[65] == "QQ== 65"  # base64(b"A") and its rank
    assert len(lines) == byte_tokenizer.vocab_size - len(byte_tokenizer.special_tokens)


def test_char_kind_cannot_be_exported(char_tokenizer, tmp_path):
    with pytest.raises(TokenizerError, match="byte-level"):
        char_tokenizer.export_tiktoken(tmp_path / "x.tiktoken")
    assert not (tmp_path / "x.tiktoken").exists()
