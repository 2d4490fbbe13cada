"""prepare.max_chars while reading: a document longer than it is never held whole (a gzip bomb, a huge line)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import textwrap

import pytest
from conftest import lmprep_in_cwd
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.data.cleaning import clean_bounded, clean_text
from pipeline.data.documents import iter_documents
from pipeline.data.readers import TxtReader
from pipeline.data.reading import CHUNK, Piece, SourceFile, TextDecoder
from pipeline.data.sources import read_documents
from pipeline.errors import DataError

# Characters that cleaning changes or that decide where a text may be cut: line breaks, control characters,
# combining marks (composing with what precedes them, in a canonical order), compatibility forms, CJK.
TRICKY = "a e\r\n\t\x00\x85\u0301\u0323\u0302\u0308\u00e9\u1100\u1161\u11a8\uac00\u3099\u304b\u4e00\ufb01\u2460"


def in_pieces(text: str, cuts: list[int]) -> list[str]:
    points = sorted({min(cut, len(text)) for cut in cuts})
    return [text[start:end] for start, end in zip([0, *points], [*points, len(text)])]


@given(text=st.text(st.sampled_from(TRICKY), max_size=80), cuts=st.lists(st.integers(0, 80), max_size=8),
       normalize=st.sampled_from(["NFC", "NFKC", "none"]))
@settings(max_examples=300, deadline=None)
def test_cleaning_in_pieces_is_cleaning_whole(text, cuts, normalize):
    """Cut anywhere, a text cleans piece by piece to what it cleans to whole; past max_chars, to its start."""
    pieces = in_pieces(text, cuts)
    whole = clean_text(text, normalize=normalize)
    assert clean_bounded(iter(pieces), normalize=normalize, max_chars=1000) == whole
    short = clean_bounded(iter(pieces), normalize=normalize, max_chars=10)
    assert short == (whole[:11] if len(whole) > 10 else whole)


def test_cleaning_stops_taking_pieces_once_too_long():
    taken = []

    def pieces():
        for number in range(10_000):
            taken.append(number)
            yield "word " * 1000

    assert clean_bounded(pieces(), normalize="NFC", max_chars=12_000) == ("word " * 3000)[:12_001]
    assert len(taken) == 3


def test_a_text_with_nowhere_to_cut_is_too_long_at_four_times_max_chars():
    """Combining marks alone can be cut nowhere: the run is held until it must clean to more than is left."""
    taken = []

    def pieces():
        for number in range(10_000):
            taken.append(number)
            yield "\u0301" * 100

    assert len(clean_bounded(pieces(), normalize="NFC", max_chars=1000)) == 1001
    assert len(taken) == 41


@pytest.mark.parametrize("separator", ["document", "line"])
def test_a_decode_error_names_its_offset_when_read_in_parts(tmp_path, separator):
    bad = b"x" * (3 * CHUNK + 5) + b"\xff" + b"y" * 10
    (tmp_path / "a.txt").write_bytes(b"short\n" + bad if separator == "line" else bad)
    file = SourceFile(tmp_path / "a.txt", "txt", separator, "text")
    with pytest.raises(DataError, match=f"invalid UTF-8 at byte offset {len(bad) - 11 + 6 * (separator == 'line')};"):
        list(read_documents(file, TextDecoder(max_chars=10 * CHUNK)))
    assert list(read_documents(file, TextDecoder("skip", max_chars=10 * CHUNK))) == (
        ["short"] if separator == "line" else [])
    replaced = list(read_documents(file, TextDecoder("replace", max_chars=10 * CHUNK)))
    assert replaced[-1] == "x" * (3 * CHUNK + 5) + "\ufffd" + "y" * 10


def test_lines_in_parts_are_the_lines(tmp_path):
    """Each line of a byte range, its CRs and LF dropped as before, whatever the parts' sizes."""
    lines = [b"a\r\r\n", b"\r" * (CHUNK + 3) + b"b\n", b"c" * (2 * CHUNK) + b"\r\n", b"\n", b"tail\r"]
    (tmp_path / "a.txt").write_bytes(b"".join(lines))
    file = SourceFile(tmp_path / "a.txt", "txt", "line", "text")
    expected = ["a", "\r" * (CHUNK + 3) + "b", "c" * (2 * CHUNK), "", "tail\r"]
    assert list(read_documents(file, TextDecoder(max_chars=10 * CHUNK))) == expected
    for start, end in [(5, CHUNK + 10), (3, 4), (0, 5), (CHUNK + 9, None)]:  # starting and ending within lines
        read = {}
        for max_chars in (None, 10 * CHUNK):
            with open(file.path, "rb") as stream:
                piece = Piece(file, start, end)
                decoder = TextDecoder(max_chars=max_chars)
                read[max_chars] = [text for text, _ in TxtReader().read(piece, stream, decoder)]
        assert read[10 * CHUNK] == read[None], (start, end)


BOMB = textwrap.dedent("""
    import gzip, resource, sys
    from pathlib import Path
    from pipeline.data.reading import SourceFile, TextDecoder
    from pipeline.data.sources import read_documents

    path, separator, max_chars = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    in_use = int(next(line for line in open("/proc/self/status") if line.startswith("VmSize")).split()[1]) << 10
    resource.setrlimit(resource.RLIMIT_AS, (in_use + (96 << 20),) * 2)  # the document inflates to 256 MB
    try:
        texts = list(read_documents(SourceFile(path, "txt", separator, "text"), TextDecoder(max_chars=max_chars)))
    except MemoryError:
        sys.exit("memory error")
    print([len(text) for text in texts])
""")


@pytest.mark.parametrize("separator, expected", [("document", [1001]), ("line", [1, 1001, 1])])
def test_a_gzip_bomb_is_cut_within_a_bounded_memory(tmp_path, separator, expected):
    """A .txt.gz of 256 KB inflating to one 256 MB document, read under an address space limit of 96 MB
    more than the interpreter holds: the document is cut once certainly longer than max_chars."""
    member = gzip.compress(b"bomb " * (CHUNK // 5), mtime=0)
    (tmp_path / "bomb.txt.gz").write_bytes(gzip.compress(b"x\n", mtime=0) + member * 256
                                           + gzip.compress(b"\ny\n", mtime=0))
    script = tmp_path / "bomb.py"
    script.write_text(BOMB)
    found = subprocess.run([sys.executable, str(script), str(tmp_path / "bomb.txt.gz"), separator, "1000"],
                           capture_output=True, text=True, timeout=300)
    assert found.returncode == 0, found.stderr[-2000:]
    assert found.stdout.strip() == str(expected)


def test_prepare_drops_a_gzip_bomb_as_too_long(tiny_project, tmp_path):
    """End to end: the document goes to rejected/ as its first max_chars + 1 characters, counted too_long."""
    tiny_project(prepare={"max_chars": 500}, data={"sources": [{"glob": "raw/*.txt", "separator": "blank_line"},
                                                                {"glob": "raw/*.txt.gz"}]})
    (tmp_path / "raw" / "bomb.txt.gz").write_bytes(gzip.compress(b"bomb " * (CHUNK // 5), mtime=0) * 64)
    result = lmprep_in_cwd("run", "prepare")
    assert result.exit_code == 0, result.output
    stats = json.loads((tmp_path / "out" / "prepared" / "stats.json").read_text())
    assert stats["sources"][1]["documents_read"] == 1, stats["sources"]
    assert stats["sources"][1]["dropped"] == {"length/too_long": 1}
    rejected = list(iter_documents(tmp_path / "out" / "prepared" / "rejected" / "part-00000.arrow"))
    assert rejected == [("bomb " * 101)[:501]]


def test_a_mark_after_the_last_piece_that_fits_still_composes():
    """The rest ends with a character that a later piece's combining mark composes with (found by the test above)."""
    text = "a" * 11 + "\u0301"
    pieces = iter(["a" * 11, "\u0301"])
    assert clean_bounded(pieces, normalize="NFC", max_chars=10) == clean_text(text, normalize="NFC")[:11]
