"""The native pre-tokenizer cuts every string exactly as ``regex``'s ``findall`` of the named pattern does.

Its character classes come from ``regex`` through a generated header; the first test regenerates it.
"""

from __future__ import annotations

import pytest
import regex
from conftest import SPLIT_PIECES, UNICODE_TEXTS, needs_native_core
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.tokenizer import backend, gen_unicode_tables, patterns

native = backend.native
needs_native = needs_native_core()

NAMED = {"gpt4": patterns.GPT4, "gpt2": patterns.GPT2, "word": patterns.WORD}


def test_the_unicode_tables_are_those_regex_gives():
    assert gen_unicode_tables.HEADER.read_text(encoding="utf-8") == gen_unicode_tables.render(), \
        "regenerate with python -m pipeline.tokenizer.gen_unicode_tables"


@needs_native
@settings(max_examples=600, deadline=None)
@given(text=UNICODE_TEXTS)
def test_native_split_gives_regex_chunks(text):
    for name, pattern in NAMED.items():
        mode = patterns.native_mode(pattern)
        assert native.split(mode, text) == regex.findall(pattern, text), name


# Long runs of one piece: the split reads classes 64 characters to a mask word, so runs that cross
# words (letters, digits, spaces ending in newlines, punctuation, in every width of str) must cut as
# regex does wherever the word boundary falls.
LONG_RUNS = st.lists(st.tuples(st.sampled_from(SPLIT_PIECES), st.integers(1, 140)), max_size=6).map(
    lambda runs: "".join(piece * count for piece, count in runs))


@needs_native
@settings(max_examples=300, deadline=None)
@given(text=LONG_RUNS)
def test_native_split_cuts_long_runs_as_regex_does(text):
    for name, pattern in NAMED.items():
        assert native.split(patterns.native_mode(pattern), text) == regex.findall(pattern, text), name


ASCII = "".join(map(chr, range(128)))


@needs_native
@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet=ASCII, min_size=64, max_size=400)
       | st.lists(st.sampled_from(ASCII), min_size=64).map("".join))
def test_native_split_of_ascii_text_gives_regex_chunks(text):
    """Blocks of 64 ASCII characters are classed from their bytes, not from the tables."""
    for name, pattern in NAMED.items():
        assert native.split(patterns.native_mode(pattern), text) == regex.findall(pattern, text), name


@needs_native
@pytest.mark.parametrize("pattern", list(NAMED.values()))
def test_native_split_on_every_ascii_character(pattern):
    every = ASCII * 2 + ASCII[::-1] * 2  # whole blocks of 64, each character beside every other kind
    assert native.split(patterns.native_mode(pattern), every) == regex.findall(pattern, every)


@needs_native
@pytest.mark.parametrize("pattern", list(NAMED.values()))
def test_native_split_on_every_code_point(pattern):
    """One text holding every code point in order, and its reverse: every character's class is exercised."""
    every = "".join(map(chr, range(0x110000)))
    for text in (every, every[::-1]):
        assert native.split(patterns.native_mode(pattern), text) == regex.findall(pattern, text)


@needs_native
def test_named_patterns_split_natively_and_custom_ones_with_regex():
    assert patterns.splitter(patterns.GPT4)("it's 12345") == native.split(native.SPLIT_MODES["gpt4"], "it's 12345")
    custom = patterns.resolve_pattern(r"\w+", kind="byte")
    assert patterns.native_mode(custom) is None
    assert patterns.splitter(custom)("ab, cd") == ["ab", ",", " ", "cd"]


@needs_native
def test_the_split_modes_are_the_native_cores_own():
    """Defined once, in _native_split.h: each pattern the core splits has a mode of its own, read by name."""
    assert sorted(native.SPLIT_MODES) == sorted(patterns.NATIVE_SPLIT_NAMES.values())
    assert len(set(native.SPLIT_MODES.values())) == len(native.SPLIT_MODES)
    assert native.split(patterns.native_mode(""), "one text") == ["one text"]


@needs_native
def test_native_split_refuses_what_is_not_a_text_or_a_mode():
    with pytest.raises(TypeError):
        native.split(native.SPLIT_MODES["gpt4"], b"bytes")
    with pytest.raises(ValueError, match="mode"):
        native.split(max(native.SPLIT_MODES.values()) + 1, "text")
