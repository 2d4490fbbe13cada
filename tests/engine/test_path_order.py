"""Local glob matches as strings: the text and the order of their ``Path`` s, without building one."""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.engine import storage
from pipeline.engine.locations import path_order, path_text

# names that trip a plain string sort or a normalisation: dots, dashes, spaces, unicode, prefixes of each other
_NAME = st.text(alphabet=st.sampled_from(["a", "b", "-", ".", " ", "_", "~", "é", "ß", "\u00a0", "日", "0", "Z"]),
                min_size=1, max_size=4)
_PATH = st.lists(st.one_of(_NAME, st.sampled_from(["", ".", ".."])), min_size=1, max_size=4).map("/".join)


@settings(max_examples=500, deadline=None)
@given(st.sampled_from(["", "/", "//", "///", "./"]), _PATH)
def test_path_text_is_the_text_of_the_path(root, path):
    assert path_text(root + path) == str(Path(root + path))


@settings(max_examples=500, deadline=None)
@given(st.sampled_from(["", "/", "/data/raw/"]),
       st.lists(_PATH.filter(lambda path: not path.startswith("/")), min_size=2, max_size=12))
def test_path_order_sorts_as_paths_sort(root, paths):
    """Paths of one root, as one glob's matches are (all relative or all absolute)."""
    texts = [path_text(root + path) for path in paths]
    assert sorted(texts, key=path_order) == [str(path) for path in sorted(map(Path, texts))]


def test_a_glob_gives_strings_in_the_order_of_their_paths(tmp_path):
    """``a/x`` comes before ``a-b/x`` and ``a.b/x``, as sorting Paths put them (a string sort puts it last)."""
    for name in ("a-b/x.txt", "a/x.txt", "a.b/x.txt", "a/b/x.txt", "ab/x.txt", "é/x.txt", "a/x.txt.txt"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x\n")
    found = storage.glob_files("**/*.txt", tmp_path)
    assert all(type(path) is str for path in found)
    assert [os.path.relpath(path, tmp_path) for path in found] == [
        "a/b/x.txt", "a/x.txt", "a/x.txt.txt", "a-b/x.txt", "a.b/x.txt", "ab/x.txt", "é/x.txt"]
    assert found == [str(path) for path in sorted(map(Path, found))]
