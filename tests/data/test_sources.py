"""Raw-file readers: every format, gzip, separators, sorted globs and errors that name file and place."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from unittest import mock

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import lmprep_in_cwd
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.config import SourceConfig
from pipeline.data.readers import unsplit_warning
from pipeline.data.sources import (
    SourceFile,
    TextDecoder,
    expand_sources,
    plan_partitions,
    read_document_pieces,
    read_documents,
    read_partition,
)
from pipeline.errors import DataError, StorageError


def read_all(root: Path, *sources: SourceConfig, on_error: str = "error") -> list[str]:
    decoder = TextDecoder(on_error)
    return [text for file in expand_sources(sources, root=root) for text in read_documents(file, decoder)]


def write(path: Path, data: bytes | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    path.write_bytes(gzip.compress(raw, mtime=0) if path.suffix == ".gz" else raw)
    return path


@pytest.mark.parametrize("name", ["a.txt", "a.txt.gz"])
@pytest.mark.parametrize(
    "separator, content, expected",
    [
        ("document", "one\ntwo\n\nthree", ["one\ntwo\n\nthree"]),
        ("line", "one\r\ntwo\n\nthree", ["one", "two", "", "three"]),
        ("blank_line", "Q: a\nA: b\n\n \t\n\nQ: c\r\nA: d\r\n", ["Q: a\nA: b", "Q: c\r\nA: d"]),
        ("<|endoftext|>", "x<|endoftext|>y\n<|endoftext|><|endoftext|>", ["x", "y\n", ""]),
    ],
)
def test_txt_separators(tmp_path, name, separator, content, expected):
    write(tmp_path / name, content)
    assert read_all(tmp_path, SourceConfig(name, separator=separator)) == expected


@given(pieces=st.lists(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="|"), max_size=30),
                       min_size=1, max_size=8))
@settings(max_examples=60, deadline=None)
def test_literal_separator_round_trips(tmp_path_factory, pieces):
    root = tmp_path_factory.mktemp("lit")
    write(root / "a.txt", "<|sep|>".join(pieces))
    got = read_all(root, SourceConfig("a.txt", separator="<|sep|>"))
    assert got == (pieces if pieces[-1] else pieces[:-1])


def test_literal_separator_across_chunk_boundary(tmp_path, monkeypatch):
    import pipeline.data.readers as readers

    monkeypatch.setattr(readers, "CHUNK", 4)
    write(tmp_path / "a.txt", "abc<|SEP|>defgh<|SEP|>i")
    assert read_all(tmp_path, SourceConfig("a.txt", separator="<|SEP|>")) == ["abc", "defgh", "i"]


def test_a_literal_separator_that_never_occurs_in_a_file_is_noted(tmp_path):
    write(tmp_path / "a.txt", "Q: one\n\nQ: two")  # 'blankline' misspelt: a literal that never occurs
    write(tmp_path / "b.txt", "x blankline y")
    write(tmp_path / "empty.txt", "")  # nothing to split: no note
    decoder = TextDecoder()
    files = expand_sources([SourceConfig("*.txt", separator="blankline")], root=tmp_path)
    assert [text for file in files for text in read_documents(file, decoder)] == ["Q: one\n\nQ: two", "x ", " y"]
    assert decoder.unsplit == [("blankline", str(tmp_path / "a.txt"))]
    assert unsplit_warning("blankline", ["raw/a.txt"]) == (
        "warning: the separator 'blankline' never occurs in raw/a.txt: it is one document; did you mean 'blank_line'?")
    assert unsplit_warning("<|end|>", [f"{n}.txt" for n in range(5)]) == (
        "warning: the separator '<|end|>' never occurs in 0.txt, 1.txt, 2.txt and 2 more files: each is one document")


UTF8_PIECES = [b"a", b" ", b"\n", "\u00e9".encode(), "\u65e5".encode(), "\U0001f600".encode(),
               b"\xff", b"\x80", b"\xe6\x97", b"\xf0\x9f\x98"]  # the last four are invalid UTF-8


@given(data=st.lists(st.sampled_from(UTF8_PIECES), max_size=20).map(b"".join), chunk=st.integers(1, 6),
       on_error=st.sampled_from(["error", "replace"]), name=st.sampled_from(["a.txt", "a.txt.gz"]))
@settings(max_examples=200, deadline=None)
def test_a_document_read_in_pieces_decodes_as_when_read_whole(tmp_path_factory, data, chunk, on_error, name):
    file = SourceFile(write(tmp_path_factory.mktemp("pieces") / name, data), "txt", "document", "text")
    whole = outcome(lambda: list(read_documents(file, TextDecoder(on_error))))
    with mock.patch("pipeline.data.sources.CHUNK", chunk):
        pieces = outcome(lambda: list(read_document_pieces(file, TextDecoder(on_error))))
    if isinstance(whole, str):
        assert pieces == whole  # the same error, naming the same byte offset
    else:
        assert [ends for _, ends in pieces] == [False] * (len(pieces) - 1) + [True]
        assert ["".join(text for text, _ in pieces)] == whole


def outcome(read):
    """What ``read()`` returns, or the message of the DataError it raises."""
    try:
        return read()
    except DataError as error:
        return str(error)


@pytest.mark.parametrize("name", ["d.jsonl", "d.jsonl.gz"])
def test_jsonl_reads_field_and_skips_blank_lines(tmp_path, name):
    lines = [json.dumps({"body": "héllo", "id": 1}), "", json.dumps({"body": "a\nb"})]
    write(tmp_path / name, "\n".join(lines) + "\n")
    assert read_all(tmp_path, SourceConfig(name, field="body")) == ["héllo", "a\nb"]


@pytest.mark.parametrize(
    "line, message",
    [
        ('{"text": "ok"', "d.jsonl:2: bad JSON line"),
        ('{"txt": "x"}', "d.jsonl:2: no field 'text' (fields: txt); set field: in data.sources"),
        ('{"text": 3}', "d.jsonl:2: field 'text' must be a string, got int"),
        ('["text"]', "d.jsonl:2: expected a JSON object, got list"),
        ('{"text": "x", "n": ' + "7" * 5000 + "}", "d.jsonl:2: bad JSON line (an integer of more than 4,300 digits)"),
        ("[" * 100_000 + "]" * 100_000, "d.jsonl:2: bad JSON line (nested too deeply)"),
    ],
    ids=["syntax", "field", "type", "list", "huge-int", "deep"],
)
def test_jsonl_errors_name_file_and_line(tmp_path, line, message):
    write(tmp_path / "d.jsonl", '{"text": "fine"}\n' + line + "\n")
    with pytest.raises(DataError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_all(tmp_path, SourceConfig("d.jsonl"))


def parquet_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, row_group_size=2)
    return sink.getvalue().to_pybytes()


@pytest.mark.parametrize("name", ["t.parquet", "t.parquet.gz"])
def test_parquet_column_in_batches(tmp_path, name):
    texts = ["alpha", None, "gamma", "delta", "ε"]
    write(tmp_path / name, parquet_bytes(pa.table({"id": list(range(5)), "content": texts})))
    assert read_all(tmp_path, SourceConfig(name, field="content")) == ["alpha", "", "gamma", "delta", "ε"]


def test_parquet_missing_or_non_string_column(tmp_path):
    write(tmp_path / "t.parquet", parquet_bytes(pa.table({"id": [1], "text2": ["x"]})))
    with pytest.raises(DataError, match=r"t.parquet: no column 'text' \(columns: id, text2\)"):
        read_all(tmp_path, SourceConfig("t.parquet"))
    with pytest.raises(DataError, match="column 'id' must hold strings, got int64"):
        read_all(tmp_path, SourceConfig("t.parquet", field="id"))


def corrupt_parquet(tmp_path, position: int, value: int | None = None) -> None:
    """A Parquet file of 200 documents with the byte at ``position`` (from the end if negative) changed."""
    texts = [f"document number {i} " * 5 for i in range(200)]
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"text": texts}), sink, row_group_size=50, compression="snappy")
    data = bytearray(sink.getvalue().to_pybytes())
    data[position] = data[position] ^ 0xFF if value is None else value
    write(tmp_path / "t.parquet", bytes(data))


def test_a_corrupt_parquet_page_is_a_data_error(tmp_path):
    corrupt_parquet(tmp_path, 4)  # the first data page's header
    with pytest.raises(DataError, match=r"t.parquet: corrupt parquet data \(Couldn't deserialize thrift"):
        read_all(tmp_path, SourceConfig("t.parquet"))


def test_invalid_utf8_in_a_parquet_string_is_a_data_error(tmp_path):
    corrupt_parquet(tmp_path, 32, 0x9A)  # inside the first dictionary page's text
    with pytest.raises(DataError, match="t.parquet: column 'text' holds invalid UTF-8"):
        read_all(tmp_path, SourceConfig("t.parquet"))


def test_invalid_utf8_names_file_and_byte_offset(tmp_path):
    write(tmp_path / "a.txt", b"good line\nbad \xff line\nlast\n")
    with pytest.raises(DataError, match=r"a.txt: invalid UTF-8 at byte offset 14; .*'replace' or 'skip'"):
        read_all(tmp_path, SourceConfig("a.txt", separator="line"))
    assert read_all(tmp_path, SourceConfig("a.txt", separator="line"), on_error="replace")[1] == "bad \ufffd line"
    assert read_all(tmp_path, SourceConfig("a.txt", separator="line"), on_error="skip") == ["good line", "last"]


def test_invalid_utf8_in_gzip_and_jsonl(tmp_path):
    write(tmp_path / "a.txt.gz", b"abc\xc3")
    with pytest.raises(DataError, match="byte offset 3 of the decompressed data"):
        read_all(tmp_path, SourceConfig("a.txt.gz"))
    write(tmp_path / "d.jsonl", b'{"text": "a"}\n{"text": "\xe9"}\n')
    with pytest.raises(DataError, match="d.jsonl: invalid UTF-8 at byte offset 24"):
        read_all(tmp_path, SourceConfig("d.jsonl"))
    decoder = TextDecoder("skip")
    (file,) = expand_sources([SourceConfig("d.jsonl")], root=tmp_path)
    assert list(read_documents(file, decoder)) == ["a"] and decoder.skipped == 1


def test_corrupt_gzip_is_a_data_error(tmp_path):
    write(tmp_path / "a.txt.gz", b"hello world")
    (tmp_path / "a.txt.gz").write_bytes((tmp_path / "a.txt.gz").read_bytes()[:-6])
    with pytest.raises(DataError, match="a.txt.gz: corrupt gzip data"):
        read_all(tmp_path, SourceConfig("a.txt.gz"))


def test_globs_expand_sorted_and_recursive(tmp_path):
    for name in ["b/2.txt", "a/1.txt", "a/deep/0.txt", "a/.hidden.txt"]:
        write(tmp_path / name, name)
    files = expand_sources([SourceConfig("**/*.txt")], root=tmp_path)
    assert [Path(f.path).relative_to(tmp_path).as_posix() for f in files] == ["a/1.txt", "a/deep/0.txt", "b/2.txt"]


def test_glob_matching_nothing_is_named_by_its_key_and_as_resolved(tmp_path):
    (tmp_path / "configs").mkdir()
    write(tmp_path / "data" / "a.txt", "a")
    sources = [SourceConfig("../data/*.txt"), SourceConfig("../data/raw/**/*.txt")]
    with pytest.raises(DataError) as refused:
        expand_sources(sources, root=tmp_path / "configs")
    assert str(refused.value) == (f"data.sources[1].glob '../data/raw/**/*.txt' matches no files "
                                  f"(looked for {tmp_path}/data/raw/**/*.txt)")
    with pytest.raises(DataError, match="data.sources is empty"):
        expand_sources([], root=tmp_path)



@pytest.mark.parametrize("pattern, searched", [
    ("/**/*.txt", "the whole file system"), ("/proc/**/status", "/proc, a file system of the kernel's,"),
    ("/sys/**", "/sys, a file system of the kernel's,"), ("{up}/**/*.txt", "the whole file system"),
])
def test_a_recursive_glob_of_the_whole_file_system_is_refused_before_listing(tmp_path, pattern, searched):
    """'/**/*.txt' listed every mounted disk (a status past 120 s); refused before glob lists anything."""
    pattern = pattern.format(up="/".join([".."] * len(tmp_path.parts)))
    with mock.patch("pipeline.engine.storage.glob.glob", side_effect=AssertionError("listed")), \
            pytest.raises(DataError) as refused:
        expand_sources([SourceConfig(pattern)], root=tmp_path)
    assert str(refused.value) == (f"data.sources[0].glob {pattern!r} searches {searched} with '**'; name the "
                                  "directory the data is in (such as raw/**/*.txt)")


def test_status_refuses_a_glob_of_the_whole_file_system_in_one_line(tiny_project):
    tiny_project()
    result = lmprep_in_cwd("status", "--set", "data.sources=[{glob: /**/*.txt}]")
    assert result.exit_code == 2
    assert result.output.splitlines() == ["error: data.sources[0].glob '/**/*.txt' searches the whole file system "
                                          "with '**'; name the directory the data is in (such as raw/**/*.txt)"]


def test_a_broken_symbolic_link_is_an_error_not_skipped(tmp_path):
    """A link to data not fetched (as DVC or git-annex leave) must not silently drop a file."""
    write(tmp_path / "raw" / "a.txt", "kept")
    (tmp_path / "raw" / "b.txt").symlink_to(tmp_path / "store" / "b.txt")
    with pytest.raises(DataError, match=r"raw/b.txt is a symbolic link to .*store/b.txt, which does not exist"):
        expand_sources([SourceConfig("raw/*.txt")], root=tmp_path)

@pytest.mark.parametrize("pattern", ["raw/**/*.txt", "raw/*/*.txt", "raw/locked/*.txt"])
def test_an_unreadable_directory_the_glob_searches_is_an_error_not_skipped(tmp_path, monkeypatch, pattern):
    """``glob`` skips a directory it cannot list; lmprep names it. Simulated, since root may list any directory."""
    write(tmp_path / "raw" / "open" / "a.txt", "kept")
    write(tmp_path / "raw" / "locked" / "b.txt", "silently missing")
    locked, real_scandir = tmp_path / "raw" / "locked", os.scandir

    def scandir(path="."):
        if Path(path).resolve() == locked.resolve():
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    with pytest.raises(StorageError, match=rf"^{locked}: cannot list this directory \(permission denied\), so the "
                                           "files in it would be missing from the data"):
        read_all(tmp_path, SourceConfig(glob=pattern))


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root lists unreadable directories")
def test_a_directory_without_read_permission_is_an_error(tmp_path):
    write(tmp_path / "raw" / "locked" / "b.txt", "silently missing")
    (tmp_path / "raw" / "locked").chmod(0)
    try:
        with pytest.raises(StorageError, match="cannot list this directory"):
            read_all(tmp_path, SourceConfig(glob="raw/**/*.txt"))
    finally:
        (tmp_path / "raw" / "locked").chmod(0o755)


def test_unknown_extension_needs_an_explicit_format(tmp_path):
    write(tmp_path / "notes.dat", "# hi")
    with pytest.raises(DataError, match="notes.dat: cannot tell the format"):
        expand_sources([SourceConfig("*.dat")], root=tmp_path)
    assert read_all(tmp_path, SourceConfig("*.dat", format="txt")) == ["# hi"]


def test_text_like_extensions_read_as_text(tmp_path):
    write(tmp_path / "notes.md", "# hi")
    write(tmp_path / "tool.py.gz", "print('hi')")
    assert read_all(tmp_path, SourceConfig("*.md")) + read_all(tmp_path, SourceConfig("*.py.gz")) == [
        "# hi", "print('hi')"]


@settings(max_examples=60, deadline=None)
@given(lines=st.lists(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r"), max_size=12),
                      max_size=30),
       partition_bytes=st.integers(min_value=1, max_value=40), crlf=st.booleans())
def test_byte_range_partitions_hold_every_line_once(tmp_path_factory, lines, partition_bytes, crlf):
    root = tmp_path_factory.mktemp("ranges")
    (root / "a.txt").write_bytes(("\r\n" if crlf else "\n").join(lines).encode())
    (root / "b.jsonl").write_bytes("".join(json.dumps({"text": line}) + "\n" for line in lines).encode())
    for source in (SourceConfig("a.txt", separator="line"), SourceConfig("b.jsonl")):
        files = expand_sources([source], root=root)
        whole = list(read_documents(files[0], TextDecoder()))
        partitions = plan_partitions(files, partition_bytes)
        assert [p.index for p in partitions] == list(range(len(partitions)))
        assert [text for p in partitions for text in read_partition(p, TextDecoder())] == whole


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.integers(min_value=0, max_value=30), min_size=1, max_size=12),
       partition_bytes=st.integers(min_value=1, max_value=80))
def test_small_files_are_packed_in_corpus_order_up_to_the_partition_size(tmp_path_factory, sizes, partition_bytes):
    root = tmp_path_factory.mktemp("packed")
    for index, size in enumerate(sizes):
        (root / f"{index:02d}.txt").write_text("x" * size)
    files = expand_sources([SourceConfig("*.txt")], root=root)
    partitions = plan_partitions(files, partition_bytes)
    assert [piece.file for p in partitions for piece in p.pieces] == list(files)
    assert all(p.size <= partition_bytes or len(list(p.pieces)) == 1 for p in partitions)
    assert all(a.size + next(b.pieces).size > partition_bytes for a, b in zip(partitions, partitions[1:]))
    assert [text for p in partitions for text in read_partition(p, TextDecoder())] == ["x" * n for n in sizes]


def test_a_packed_partition_is_named_by_its_first_and_last_files(tmp_path):
    for name in "abc":
        (tmp_path / f"{name}.txt").write_text(name)
    partitions = plan_partitions(expand_sources([SourceConfig("*.txt")], root=tmp_path), 100)
    assert len(partitions) == 1 and partitions[0].describe() == f"{tmp_path / 'a.txt'} to {tmp_path / 'c.txt'}, 3 files"


def test_parquet_partitions_are_runs_of_row_groups(tmp_path):
    texts = [f"row {i}" for i in range(100)]
    pq.write_table(pa.table({"text": texts}), tmp_path / "t.parquet", row_group_size=10)
    files = expand_sources([SourceConfig("t.parquet")], root=tmp_path)
    partitions = plan_partitions(files, 1)
    assert len(partitions) == 10 and partitions[3].describe().endswith("t.parquet row groups 3-4")
    assert [text for p in partitions for text in read_partition(p, TextDecoder())] == texts


def test_a_bad_json_line_in_a_later_partition_names_its_line_number(tmp_path):
    (tmp_path / "c.jsonl").write_text("".join(f'{{"text": "line {i}"}}\n' for i in range(50)) + "{oops\n")
    (file,) = expand_sources([SourceConfig("c.jsonl")], root=tmp_path)
    last = plan_partitions([file], 100)[-1]
    with pytest.raises(DataError, match=r"c.jsonl:51: bad JSON line"):
        list(read_partition(last, TextDecoder()))
