"""Document origins: prepare's IDs parsed by Arrow's kernels as the plain rule reads them, and the shard columns."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.shards.origins import Origins

FILES = st.text(st.characters(codec="utf-8"), max_size=12)


def plain_rule(document_id: str) -> tuple[str, int] | None:
    """What an ID means, read by hand: the file before the last ``#``, then a number of ASCII digits."""
    file, hash_sign, number = document_id.rpartition("#")
    if not hash_sign or not number or not all("0" <= digit <= "9" for digit in number) or int(number) >= 1 << 63:
        return None
    return file, int(number)


def ids_array(ids: list[str]) -> pa.LargeStringArray:
    return pa.array(ids, pa.large_string())


@settings(deadline=None)  # the first example loads pyarrow.compute
@given(st.lists(st.tuples(FILES, st.integers(0, (1 << 63) - 1)), min_size=1, max_size=30))
def test_well_formed_ids_give_their_file_and_number(pairs):
    ids = [f"{file}#{number}" for file, number in pairs]
    origins = Origins.from_ids(np.zeros(len(ids), np.int32), ids_array(ids))
    assert list(zip(origins.files.to_pylist(), origins.numbers.tolist())) == [plain_rule(i) for i in ids]


@settings(deadline=None)
@given(st.lists(st.text(st.characters(codec="utf-8"), max_size=16), min_size=1, max_size=30))
def test_any_id_is_read_as_the_plain_rule_reads_it_or_refused_by_name(ids):
    wanted = [plain_rule(document_id) for document_id in ids]
    if None in wanted:
        first_bad = ids[wanted.index(None)]
        with pytest.raises(ValueError, match="is not <file>#<number>") as refused:
            Origins.from_ids(np.zeros(len(ids), np.int32), ids_array(ids))
        assert repr(first_bad) in str(refused.value)
    else:
        origins = Origins.from_ids(np.zeros(len(ids), np.int32), ids_array(ids))
        assert list(zip(origins.files.to_pylist(), origins.numbers.tolist())) == wanted


@pytest.mark.parametrize("document_id", ["raw/a.txt", "raw/a.txt#", "raw/a.txt#12a", "raw/a.txt#\u0663",
                                         "raw/a.txt#99999999999999999999", "raw/a.txt#9223372036854775808"])
def test_a_malformed_id_is_named(document_id):
    ids = ids_array(["raw/b.txt#0", document_id, "raw/c.txt#x"])
    with pytest.raises(ValueError, match=f"document ID {document_id!r} is not <file>#<number>"):
        Origins.from_ids(np.zeros(3, np.int32), ids)


def test_the_file_column_holds_each_file_of_its_rows_once_in_order_of_first_appearance():
    ids = ids_array(["b#0", "a#1", "b#2", "c#3", "a#4", "d#5"])
    origins = Origins.join([Origins.from_ids(np.arange(6, dtype=np.int32), ids)[1:4], Origins.numbered(2)])
    sources, files, numbers = origins.columns()
    assert files.type == pa.dictionary(pa.int32(), pa.large_string())
    assert files.dictionary.to_pylist() == ["a", "b", "c", "documents"]
    assert files.to_pylist() == ["a", "b", "c", "documents", "documents"]
    assert sources.to_pylist() == [1, 2, 3, 0, 0] and numbers.to_pylist() == [1, 2, 3, 0, 1]


def test_reading_origins_loads_no_pandas():
    """pyarrow converts a Python value given to a kernel through pandas, which it imports (0.2 s in every worker)."""
    script = ("import sys, numpy as np\n"
              "from pipeline.data.documents import text_column\n"
              "from pipeline.shards.origins import Origins\n"
              "Origins.from_ids(np.zeros(2, np.int32), text_column(['a#1', 'b#2'])).columns()\n"
              "print('pandas' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"
