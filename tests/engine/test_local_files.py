"""Source globs over local files that are not what they seem: a link loop under ``**``, a FIFO or a device."""

from __future__ import annotations

import os

import pytest

from pipeline.engine import storage
from pipeline.errors import StorageError


@pytest.fixture
def raw(tmp_path):
    (tmp_path / "raw" / "sub").mkdir(parents=True)
    (tmp_path / "raw" / "a.txt").write_text("a\n")
    (tmp_path / "raw" / "sub" / "b.txt").write_text("b\n")
    return tmp_path


def test_a_link_loop_under_a_recursive_glob_is_refused_naming_the_link(raw):
    """glob follows ``raw/loop -> .`` round until the path is too long: every file would be read ~40 times."""
    (raw / "raw" / "sub" / "loop").symlink_to("..")
    with pytest.raises(StorageError) as caught:
        storage.glob_files("raw/**/*.txt", raw)
    assert str(caught.value) == (f"{raw / 'raw' / 'sub' / 'loop'} is a symbolic link to .., a directory that "
                                 "contains it, so a ** glob would read the files under it again and again; "
                                 "remove the link or narrow the glob")


def test_a_link_to_a_directory_elsewhere_is_read_once(raw):
    (raw / "other").mkdir()
    (raw / "other" / "c.txt").write_text("c\n")
    (raw / "raw" / "linked").symlink_to(raw / "other")
    found = storage.glob_files("raw/**/*.txt", raw)
    assert [os.path.relpath(path, raw) for path in found] == ["raw/a.txt", "raw/linked/c.txt", "raw/sub/b.txt"]


@pytest.mark.parametrize("make, kind", [(os.mkfifo, "a FIFO"),
                                        (lambda path: path.symlink_to("/dev/zero"), "a character device")])
def test_a_fifo_or_a_device_matching_a_glob_is_refused_in_one_line(raw, make, kind):
    """Skipped, as before, it dropped data without a word; read, a FIFO blocks and /dev/zero never ends."""
    make(raw / "raw" / "c.txt")
    with pytest.raises(StorageError, match=f"^{raw / 'raw' / 'c.txt'} matches a source glob but is {kind}, not a "
                                           "regular file, so it cannot be read as data; remove it or narrow the glob$"):
        storage.glob_files("raw/*.txt", raw)
