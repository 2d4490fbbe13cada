"""``storage.read_bounded`` on local files: a small file costs its size, not the bound, and a growing one is cut
at the bound."""

from __future__ import annotations

import tracemalloc

import pytest

from pipeline.engine import storage
from pipeline.errors import FileTooLargeError


def test_a_small_file_under_a_large_bound_takes_no_buffer_of_the_bound(tmp_path):
    """Each state file is read under a bound of 64 MB to 1 GB; a read asked for the bound allocated all of it."""
    path = tmp_path / "state.json"
    path.write_bytes(b"{}" * 50)
    tracemalloc.start()
    try:
        data = storage.read_bounded(path, 1 << 30, what="state file")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert data == b"{}" * 50 and peak < 1 << 20


@pytest.mark.parametrize(("most", "expected"), [(10_000, 5_000), (300, 300)])
def test_a_file_that_grew_after_its_size_was_taken_is_read_on_to_the_bound(tmp_path, most, expected):
    path = tmp_path / "growing"
    path.write_bytes(b"x" * 5_000)
    with open(path, "rb") as file:
        assert storage._read_at_most(file, 100, most) == b"x" * expected


def test_a_file_over_the_bound_is_still_refused(tmp_path):
    path = tmp_path / "big.json"
    path.write_bytes(b"x" * 101)
    with pytest.raises(FileTooLargeError, match="big.json"):
        storage.read_bounded(path, 100, what="state file")
