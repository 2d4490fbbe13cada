"""The native writer of a byte-level tokenizer.json's vocab and merges (``_native_json.h``): the file's bytes are
the Python path's, for any tokenizer, and a malformed call is refused with a Python error, not a crash."""

from __future__ import annotations

import json

import pytest
from conftest import UNICODE_TEXTS, needs_native_core
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.tokenizer import Tokenizer, backend, hf_json

native = backend.native
pytestmark = needs_native_core()


def python_dumps(tokenizer: Tokenizer) -> bytes:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(backend, "native", None)
        return hf_json.dumps(tokenizer)


@settings(max_examples=60, deadline=None)
@given(texts=st.lists(UNICODE_TEXTS.filter(lambda text: not any(0xD800 <= ord(c) < 0xE000 for c in text)),
                      min_size=1, max_size=6),
       merges=st.integers(0, 60), specials=st.lists(st.sampled_from(["<|endoftext|>", "<pad>", '"\\', "é"]),
                                                    unique=True, max_size=3))
def test_the_file_is_the_python_paths_byte_for_byte(texts, merges, specials):
    tokenizer = Tokenizer.train(texts, kind="byte", merges=merges, special_tokens=specials, min_frequency=1)
    written = hf_json.dumps(tokenizer)
    assert written == python_dumps(tokenizer)
    assert hf_json.loads(written, name="tokenizer.json").fingerprint == tokenizer.fingerprint


def test_quotes_backslashes_and_control_bytes_are_escaped_as_json_escapes_them(tokenizer_corpus):
    """Every byte is a token; a merge of ``"`` and ``\\`` puts both in a merge's names too."""
    tokenizer = Tokenizer.train(['"\\' * 50, *tokenizer_corpus], kind="byte", merges=40, min_frequency=1)
    written = hf_json.dumps(tokenizer)
    assert written == python_dumps(tokenizer)
    model = json.loads(written)["model"]
    assert model["vocab"]['"'] == tokenizer.encode('"')[0] and model["vocab"]["\\"] == tokenizer.encode("\\")[0]
    assert ['"', "\\"] in model["merges"]


def test_a_merge_of_an_id_that_is_not_regular_is_refused():
    spelling = [bytes([b]) for b in range(256)]
    tokens = [bytes([b]) for b in range(256)] + [b"<s>"]
    with pytest.raises(ValueError, match="merge 0 names ID 256, which is not a regular token"):
        native.merges_json(tokens, list(range(256)), [256], [1], spelling, spelling, "\n", "  ")
    with pytest.raises(ValueError, match="as many left IDs as right ones"):
        native.merges_json(tokens, list(range(256)), [1, 2], [1], spelling, spelling, "\n", "  ")


@pytest.mark.parametrize("bad", [[b"a"] * 255, [b"a"] * 255 + ["a"], None])
def test_a_spelling_that_is_not_256_bytes_objects_is_refused(bad):
    tokens = [bytes([b]) for b in range(256)]
    with pytest.raises((ValueError, TypeError), match="256 bytes objects|bytes"):
        native.vocab_json(tokens, list(range(256)), bad, [bytes([b]) for b in range(256)], "\n", "  ")


def test_an_id_outside_the_tokens_or_a_token_that_is_not_bytes_is_refused():
    spelling = [bytes([b]) for b in range(256)]
    with pytest.raises(ValueError, match="outside the vocabulary"):
        native.vocab_json([b"a"], [0, 1], spelling, spelling, "\n", "  ")
    with pytest.raises(TypeError, match="item 1 is str, not bytes"):
        native.vocab_json([b"a", "b"], [0], spelling, spelling, "\n", "  ")
