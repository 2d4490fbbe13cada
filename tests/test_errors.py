"""The message-shortening helpers every error message goes through."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pipeline.errors import describe, shorten


def test_shorten_puts_a_text_on_one_line_and_keeps_its_spaces():
    assert shorten("Traceback:\n  line 1\r\n\n    boom  here ") == "Traceback: line 1 boom  here"
    assert shorten('"a  b"', 60) == '"a  b"'  # a JSON value whose spaces are the change


def test_shorten_cuts_a_long_text_with_an_ellipsis_within_the_limit():
    assert shorten("x" * 300) == "x" * 199 + "…"
    assert shorten("x" * 60, 60) == "x" * 60


@given(st.text(), st.integers(min_value=1, max_value=300))
def test_shorten_never_exceeds_the_limit_nor_breaks_a_line(text, limit):
    shown = shorten(text, limit)
    assert len(shown) <= limit
    assert shown.splitlines() in ([shown], [])


def test_describe_bounds_strings_containers_and_integers():
    assert describe("bogus") == "'bogus'"
    assert len(describe("x" * 10_000)) <= 80 and "..." in describe("x" * 10_000)
    assert describe(10**26) == str(10**26)
    assert describe(-(10**400)) == "<integer of 1329 bits>"
    assert describe([[[[1]]]]) == "[[[[...]]]]"  # three levels shown
    assert describe(list(range(100))) == "[0, 1, 2, 3, 4, 5, ...]"
