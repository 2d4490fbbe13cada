"""tiktoken export: an Encoding built from our ranks file gives our IDs."""

from __future__ import annotations

import pytest
import tiktoken
from hypothesis import given, settings
from hypothesis import strategies as st
from test_tokenizer_hf import MULTILINGUAL
from tiktoken.load import load_tiktoken_bpe

from pipeline.errors import TokenizerError
from pipeline.tokenizer import Tokenizer
from pipeline.tokenizer.patterns import GPT4, pattern_name
from pipeline.tokenizer.tiktoken_export import tiktoken_pattern


@pytest.fixture(scope="session")
def tiktoken_pairs(trained_tokenizers, tmp_path_factory):
    directory = tmp_path_factory.mktemp("tiktoken")
    pairs = []
    for i, tok in enumerate(t for t in trained_tokenizers if t.kind == "byte" and pattern_name(t.pattern) != "custom"):
        path = directory / f"{i}.tiktoken"
        tok.export_tiktoken(path)
        encoding = tiktoken.Encoding(f"lmprep{i}", pat_str=tiktoken_pattern(tok),
                                     mergeable_ranks=load_tiktoken_bpe(str(path)),
                                     special_tokens=dict(tok.special_tokens))
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


def _encoding(tok, path):
    tok.export_tiktoken(path)
    return tiktoken.Encoding(path.stem, pat_str=tiktoken_pattern(tok), mergeable_ranks=load_tiktoken_bpe(str(path)),
                             special_tokens=dict(tok.special_tokens))


def test_merge_that_rank_order_never_reaches_is_refused(tmp_path):
    tok = Tokenizer.from_merges(kind="byte", pattern=GPT4, merges=[(97, 98), (98, 99), (97, 257)])
    ranks = {bytes([i]): i for i in range(256)} | {b"ab": 256, b"bc": 257, b"abc": 258}
    unchecked = tiktoken.Encoding("unchecked", pat_str=GPT4, mergeable_ranks=ranks, special_tokens={})
    assert (tok.encode_ordinary("abc"), unchecked.encode_ordinary("abc")) == ([256, 99], [258])
    with pytest.raises(TokenizerError, match="token 258 'abc' is not what the merges make"):
        tok.export_tiktoken(tmp_path / "x.tiktoken")
    assert not (tmp_path / "x.tiktoken").exists()


def test_merges_making_decreasing_ids_are_refused(tmp_path):
    tokens = {i: bytes([i]) for i in range(256)} | {256: b"bc", 257: b"ab"}
    tok = Tokenizer(kind="byte", pattern=GPT4, tokens=tokens, merges=[(97, 98), (98, 99)])
    with pytest.raises(TokenizerError, match="merge #1 makes ID 256, not above the 257"):
        tok.export_tiktoken(tmp_path / "x.tiktoken")


def test_custom_pattern_is_refused(tokenizer_corpus, tmp_path):
    tok = Tokenizer.train(tokenizer_corpus, vocab_size=260, pattern=r"\w+", workers=1)
    with pytest.raises(TokenizerError, match="pattern is custom"):
        tok.export_tiktoken(tmp_path / "x.tiktoken")


def test_hf_trained_file_exports_with_identical_ids(tokenizer_corpus, tmp_path):
    from test_tokenizer_hf import FOREIGN_TEXTS, _append_zebra, _hf_trained

    _hf_trained(tokenizer_corpus, tmp_path / "hf.json")
    encoding = _encoding(Tokenizer.load(tmp_path / "hf.json"), tmp_path / "hf.tiktoken")
    ours = Tokenizer.load(tmp_path / "hf.json")
    for text in [*FOREIGN_TEXTS, *tokenizer_corpus]:
        assert encoding.encode_ordinary(text) == ours.encode_ordinary(text)
    _hf_trained(tokenizer_corpus, tmp_path / "zebra.json", edit=_append_zebra)
    with pytest.raises(TokenizerError, match="token 450 ' zebra' is not what the merges make"):
        Tokenizer.load(tmp_path / "zebra.json").export_tiktoken(tmp_path / "zebra.tiktoken")


@st.composite
def merge_lists(draw):
    """Merges over the bytes of 'abc' in a valid order, each making a token not made before."""
    made = {97: b"a", 98: b"b", 99: b"c"}
    merges = []
    for _ in range(draw(st.integers(1, 12))):
        left, right = draw(st.sampled_from(sorted(made))), draw(st.sampled_from(sorted(made)))
        if made[left] + made[right] not in made.values():
            made[256 + len(merges)] = made[left] + made[right]
            merges.append((left, right))
    return merges


@settings(max_examples=150, deadline=None)
@given(merge_lists(), st.lists(st.text(alphabet="abc", max_size=12), min_size=1, max_size=8))
def test_whenever_the_export_is_allowed_tiktoken_gives_our_ids(tmp_path_factory, merges, texts):
    tok = Tokenizer.from_merges(kind="byte", pattern="", merges=merges)
    try:
        encoding = _encoding(tok, tmp_path_factory.mktemp("ranks") / "x.tiktoken")
    except TokenizerError:
        return
    assert encoding.encode_ordinary_batch(texts) == tok.encode_batch(texts)
