"""Tokenizer core: goldens, the fast encoder against the reference BPE, special tokens, decoding errors, batches."""

from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import TOKENIZER_CORPUS, reference_ids
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.errors import TokenizerError
from pipeline.tokenizer import Tokenizer, backend, hf_json, patterns, reference

SPECIAL = "<|endoftext|>"


# ---- goldens from the seeds -----------------------------------------------------------------


def test_golden_aaabdaaabac():
    tok = Tokenizer.train(["aaabdaaabac"], vocab_size=259, pattern="none", min_frequency=1, workers=1)
    assert tok.merges == ((97, 97), (97, 98), (256, 257))
    assert tok.encode("aaabdaaabac") == [258, 100, 258, 97, 99]


def test_golden_ababab():
    tok = Tokenizer.train(["ababab"], vocab_size=258, pattern="none", min_frequency=1, workers=1)
    assert tok.merges == ((97, 98), (256, 256))
    assert tok.encode("ababab") == [257, 256]


def test_golden_low_lower_lowest_char_kind():
    text = "low lower lowest"
    tok = Tokenizer.train([text], vocab_size=1 + 8 + 4, kind="char", min_frequency=1, workers=1)
    assert tok.alphabet == [" ", "e", "l", "o", "r", "s", "t", "w"]
    assert [tok.decode([tok.merges.index(m) + 9]) for m in tok.merges] == ["lo", "low", " low", " lowe"]
    ids = tok.encode(text)
    assert len(text) == 16 and len(ids) == 6
    assert [tok.decode([i]) for i in ids] == ["low", " lowe", "r", " lowe", "s", "t"]


def test_char_kind_unknown_characters_are_id_0_and_decode_to_replacement():
    tok = Tokenizer.train(["cat sat"], vocab_size=20, kind="char", workers=1)
    assert tok.encode("Cat 😀") == [0, *tok.encode("at "), 0]
    assert tok.decode(tok.encode("C")) == "\ufffd"


def test_char_kind_never_merges_newline(char_tokenizer):
    newline = char_tokenizer.alphabet.index("\n") + 1
    for token_id in range(char_tokenizer.vocab_size):
        text = char_tokenizer.decode_bytes([token_id])
        if token_id != newline and token_id not in char_tokenizer.special_tokens.values():
            assert b"\n" not in text


def test_byte_kind_can_be_told_not_to_merge_newlines(tokenizer_corpus):
    tok = Tokenizer.train(tokenizer_corpus, vocab_size=320, pattern="none", merge_newlines=False, workers=1)
    assert all(b"\n" not in tok.token_bytes(i) for i in range(256, tok.vocab_size))


# ---- the fast encoder against the reference -----------------------------------------------------


def test_encoding_equals_the_reference(trained_tokenizers, tokenizer_corpus):
    text = "".join(tokenizer_corpus) + " unseen wörds ☃ " + "x" * 300 + " " * 100
    for tok in trained_tokenizers:
        assert tok.encode(text) == reference_ids(tok, text), tok


@pytest.mark.parametrize("backend_name", ["native", "python"])
@settings(max_examples=80, deadline=None)
@given(
    training=st.lists(st.text(alphabet="ab \nc\u00e9\u4e2d", max_size=80), max_size=8),
    texts=st.lists(st.text(alphabet="ab \nc\u00e9\u4e2dz\U0001f600", max_size=80), min_size=1, max_size=8),
    kind=st.sampled_from(["byte", "char"]),
    pattern=st.sampled_from(["", patterns.GPT4, r"\S+|\s+"]),
    num_merges=st.integers(0, 40),
)
def test_both_encoders_match_the_reference_on_random_text(backend_name, training, texts, kind, pattern, num_merges):
    """The native encoder (when built) and the Python one; unseen characters are the char kind's unknown ID."""
    merges, alphabet, _ = reference.train(training, kind=kind, pattern=pattern, num_merges=num_merges,
                                          min_frequency=1)
    expected = [reference.encode(text, kind=kind, pattern=pattern, merges=merges, alphabet=alphabet) for text in texts]
    with pytest.MonkeyPatch.context() as patch:
        if backend_name == "python":
            patch.setattr(backend, "native", None)
        tok = Tokenizer.from_merges(kind=kind, pattern=pattern, merges=merges, alphabet=alphabet)
        ids, offsets = tok.encode_batch_flat(texts)
        assert [ids[a:b].tolist() for a, b in zip(offsets, offsets[1:])] == expected
        assert [tok.encode_ordinary(text) for text in texts] == expected


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_byte_round_trip_any_text(byte_tokenizer, text):
    assert byte_tokenizer.decode(byte_tokenizer.encode(text)) == text
    assert byte_tokenizer.encode(text) == reference_ids(byte_tokenizer, text)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(sorted(set("".join(TOKENIZER_CORPUS))))))
def test_char_round_trip_on_known_characters(char_tokenizer, text):
    assert char_tokenizer.decode(char_tokenizer.encode(text)) == text


@settings(max_examples=100, deadline=None)
@given(st.binary())
def test_decode_bytes_of_byte_ids_is_exact(byte_tokenizer, data):
    assert byte_tokenizer.decode_bytes(list(data)) == data


def test_batches_match_single_encoding(byte_tokenizer, tokenizer_corpus):
    texts = [*tokenizer_corpus, "", SPECIAL]
    singles = [byte_tokenizer.encode(t) for t in texts]
    assert byte_tokenizer.encode_batch(texts) == singles
    ids, offsets = byte_tokenizer.encode_batch_flat(texts)
    assert ids.dtype == np.uint32 and offsets.dtype == np.int64 and len(offsets) == len(texts) + 1
    assert [ids[offsets[i]:offsets[i + 1]].tolist() for i in range(len(texts))] == singles


@settings(max_examples=100, deadline=None)
@given(texts=st.lists(st.one_of(st.sampled_from(" ".join(TOKENIZER_CORPUS).split(" ")),
                                st.text(st.characters(blacklist_categories=["Cs"]), max_size=40)), max_size=12),
       which=st.integers(min_value=0, max_value=5))
def test_encode_batch_is_encode_text_by_text(trained_tokenizers, texts, which):
    reference = trained_tokenizers[which]
    cold = hf_json.from_dict(hf_json.to_dict(reference))  # an empty chunk cache: every chunk of the batch is new
    assert cold.encode_batch(iter(texts)) == [reference.encode(text) for text in texts]


def test_encode_array_uses_smallest_dtype(byte_tokenizer):
    array = byte_tokenizer.encode_array("hello")
    assert array.dtype == np.uint16 and array.tolist() == byte_tokenizer.encode("hello")


def test_lone_surrogate_is_a_clear_error(byte_tokenizer):
    with pytest.raises(TokenizerError, match="surrogate"):
        byte_tokenizer.encode("a\ud800b")


# ---- a read-only surface ------------------------------------------------------------------------


def test_public_state_is_read_only_so_it_cannot_desync_the_encoder_or_fingerprint():
    specials = {"<s>": 257}
    tok = Tokenizer(kind="byte", pattern="", tokens={i: bytes([i]) for i in range(256)} | {256: b"ab"},
                    merges=[(97, 98)], special_tokens=specials)
    fingerprint, ids = tok.fingerprint, tok.encode("abab")
    specials["<t>"] = 258  # the caller's dict is copied
    for name in ("kind", "pattern", "merges", "special_tokens", "unk_id", "merge_newlines", "stop_reason",
                 "fingerprint"):
        with pytest.raises(AttributeError):
            setattr(tok, name, getattr(tok, name))
    with pytest.raises(TypeError):
        tok.special_tokens["<t>"] = 258
    with pytest.raises(AttributeError):
        tok.merges.append((256, 256))
    assert tok.special_tokens == {"<s>": 257} and tok.merges == ((97, 98),)
    assert (tok.fingerprint, tok.encode("abab")) == (fingerprint, ids) == (fingerprint, [256, 256])


def test_what_training_learned_is_given_at_construction():
    stopped = Tokenizer.train(["abab"], merges=5, pattern="none", workers=1)
    assert stopped.stop_reason == "no pair occurs at least 2 times after 1 merge"
    rebuilt = Tokenizer.from_merges(kind="byte", pattern="", merges=stopped.merges, stop_reason=stopped.stop_reason)
    assert (rebuilt.stop_reason, rebuilt.fingerprint) == (stopped.stop_reason, stopped.fingerprint)
    assert Tokenizer.from_merges(kind="byte", pattern="", merges=stopped.merges).stop_reason is None


# ---- special tokens -----------------------------------------------------------------------------


def _with_merges(merges, extra=None):
    tokens = {i: bytes([i]) for i in range(256)} | (extra or {256: b"ab", 257: b"abc"})
    return Tokenizer(kind="byte", pattern="", tokens=tokens, merges=merges)


@pytest.mark.parametrize(("merges", "extra", "message"), [
    ([(97, 98), (256, 300)], None, "merge #1 (256, 300) uses an ID that is not a regular token"),
    ([(97, 98), (256, 99), (-1, 97)], None, "merge #2 (-1, 97) uses an ID that is not a regular token"),
    ([(97, 99), (97, 300)], None, "merge #0 (97, 99) makes b'ac', which is not in the vocabulary"),
    ([(97, 98), (98, 97)], {256: b"ab", 257: b"ba", 258: b"ab"}, "IDs 256 and 258 are the same token b'ab'"),
    ([(97, 98), (97, 98)], None, "two merges make the same token"),
    ([(256, 99), (97, 98)], None, "merge #0 (256, 99) uses token 256 before the merge that makes it"),
])
def test_a_bad_merge_is_named_first_in_merge_order(merges, extra, message):
    with pytest.raises(TokenizerError, match=re.escape(message)):
        _with_merges(merges, extra)


def test_the_ids_each_merge_makes():
    assert _with_merges([(97, 98), (256, 99)]).merge_results == [256, 257]


@settings(max_examples=25, deadline=None)
@given(st.randoms(use_true_random=False), st.booleans())
def test_merge_results_are_the_same_in_any_id_layout(byte_tokenizer, rng, special_first):
    """The trainer's layout is checked without a lookup by bytes; shuffling the IDs the merges make (and putting
    the special token before them) takes the lookup, and both must find the same tokens."""
    merged = list(range(256, 256 + len(byte_tokenizer.merges)))
    new_id = dict(zip(merged, rng.sample(merged, len(merged)), strict=True))
    if special_first:
        new_id = {old: moved + 1 for old, moved in new_id.items()}
    renamed = new_id.get
    tokens = {renamed(i, i): byte_tokenizer.token_bytes(i) for i in range(256 + len(merged))}
    merges = [(renamed(a, a), renamed(b, b)) for a, b in byte_tokenizer.merges]
    special = {SPECIAL: 256 if special_first else byte_tokenizer.vocab_size - 1}
    shuffled = Tokenizer(kind="byte", pattern="", tokens=tokens, merges=merges, special_tokens=special)
    assert shuffled.merge_results == [new_id[i] for i in byte_tokenizer.merge_results]


def test_special_tokens_get_ids_after_the_merges(byte_tokenizer):
    assert byte_tokenizer.special_tokens == {SPECIAL: byte_tokenizer.vocab_size - 1}
    assert byte_tokenizer.vocab_size == 256 + len(byte_tokenizer.merges) + 1


def test_special_token_text_is_plain_text_by_default(byte_tokenizer):
    special_id = byte_tokenizer.special_tokens[SPECIAL]
    text = f"a{SPECIAL}b"
    assert special_id not in byte_tokenizer.encode(text)
    assert byte_tokenizer.encode(text) == byte_tokenizer.encode_ordinary(text)
    allowed = byte_tokenizer.encode(text, allowed_special={SPECIAL})
    assert allowed == [*byte_tokenizer.encode("a"), special_id, *byte_tokenizer.encode("b")]
    assert byte_tokenizer.encode(text, allowed_special="all") == allowed
    assert byte_tokenizer.decode(allowed) == text


def test_allowing_an_unknown_special_token_is_an_error(byte_tokenizer):
    with pytest.raises(TokenizerError, match="<|bos|>"):
        byte_tokenizer.encode("x", allowed_special={"<|bos|>"})


def test_special_tokens_in_training_text_are_ordinary_text():
    tok = Tokenizer.train([SPECIAL * 50], vocab_size=300, special_tokens=[SPECIAL], workers=1)
    assert len(tok.encode(SPECIAL)) >= 1 and tok.special_tokens[SPECIAL] not in tok.encode(SPECIAL)


# ---- decoding errors ----------------------------------------------------------------------------


@pytest.mark.parametrize("bad, position", [([1, -1, 2], 1), ([5, 400, -3], 1), ([1, 2, "7"], 2), ([3.0], 0),
                                           ([True], 0), ([1, None], 1)])
def test_decode_names_first_invalid_id_and_position(byte_tokenizer, bad, position):
    with pytest.raises(TokenizerError, match=f"invalid token ID {bad[position]!r} at position {position}"):
        byte_tokenizer.decode(bad)


@pytest.mark.parametrize("bad", [-1, 400, "7", 3.0, True, None])
def test_token_bytes_names_an_invalid_id(byte_tokenizer, bad):
    with pytest.raises(TokenizerError, match=f"invalid token ID {bad!r} at position 0"):
        byte_tokenizer.token_bytes(bad)


def test_decode_numpy_ids(byte_tokenizer):
    ids = byte_tokenizer.encode_array("héllo")
    assert byte_tokenizer.decode(ids) == "héllo"
    with pytest.raises(TokenizerError, match="invalid token ID 999 at position 1"):
        byte_tokenizer.decode(np.array([1, 999]))


def test_invalid_utf8_raises_unless_replace(byte_tokenizer):
    ids = list("é".encode())[:1]
    with pytest.raises(TokenizerError, match="not valid UTF-8"):
        byte_tokenizer.decode(ids)
    assert byte_tokenizer.decode(ids, errors="replace") == "\ufffd"
    assert byte_tokenizer.decode_bytes(ids) == b"\xc3"


def test_token_bytes_of_special_and_unknown(char_tokenizer):
    assert char_tokenizer.token_bytes(0) == "\ufffd".encode()
    assert char_tokenizer.token_bytes(char_tokenizer.special_tokens[SPECIAL]) == SPECIAL.encode()


# ---- training options ---------------------------------------------------------------------------


def test_vocab_size_is_an_upper_bound_with_a_stop_reason():
    tok = Tokenizer.train(["abcabc"], vocab_size=1000, workers=1)
    assert tok.vocab_size < 1000 and "2 times" in tok.stop_reason


@pytest.mark.parametrize("kwargs, message", [
    ({"vocab_size": 200}, "too small"),
    ({"vocab_size": 300, "kind": "unigram"}, "unknown tokenizer kind 'unigram'"),
    ({"vocab_size": 300, "pattern": "(unclosed"}, r"invalid split pattern '\(unclosed"),
    ({"vocab_size": 300, "special_tokens": ["", "x"]}, "non-empty"),
    ({"vocab_size": 300, "special_tokens": ["x", "x"]}, "more than once"),
    ({"vocab_size": 3, "kind": "char"}, "smaller than the 4 characters"),
])
def test_bad_training_options(kwargs, message):
    with pytest.raises(TokenizerError, match=message):
        Tokenizer.train(["abc abc"], workers=1, **kwargs)


def test_pattern_table():
    assert patterns.resolve_pattern(None, kind="byte") == patterns.GPT4
    assert patterns.resolve_pattern(None, kind="char") == ""
    assert patterns.resolve_pattern("gpt2", kind="byte") == patterns.GPT2
    custom = patterns.resolve_pattern(r"\d+", kind="byte")
    assert patterns.splitter(custom)("ab12") == ["a", "b", "12"]


def test_fingerprint_depends_on_merges_and_specials_not_only_size():
    a = Tokenizer.from_merges(kind="byte", pattern="", merges=[(97, 98)], special_tokens=["<s>"])
    b = Tokenizer.from_merges(kind="byte", pattern="", merges=[(98, 97)], special_tokens=["<s>"])
    c = Tokenizer.from_merges(kind="byte", pattern="", merges=[(97, 98)], special_tokens=["</s>"])
    d = Tokenizer.from_merges(kind="byte", pattern=patterns.GPT4, merges=[(97, 98)], special_tokens=["<s>"])
    assert a.vocab_size == b.vocab_size == c.vocab_size == d.vocab_size
    assert len({a.fingerprint, b.fingerprint, c.fingerprint, d.fingerprint}) == 4
    assert len(a.fingerprint) == 64


