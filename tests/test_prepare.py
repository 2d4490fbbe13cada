"""The prepare step end to end on small mixed-format corpora."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from pipeline.config import PrepareConfig, SourceConfig
from pipeline.documents import iter_documents, prepared_path
from pipeline.errors import DataError
from pipeline.prepare import prepare_corpus
from pipeline.sources import expand_sources

SOURCES = (SourceConfig("raw/*.txt", separator="blank_line"), SourceConfig("raw/*.jsonl.gz"))


@pytest.fixture
def raw(tmp_path) -> Path:
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "qa.txt").write_text("Q: hi\r\nA: hello\n\nQ: x\nA: y\n\n\x00\n\nQ: hi\nA: hello\n")
    lines = [{"text": "Cafe\u0301"}, {"text": "Q: x\nA: y"}, {"text": "long " * 20}]
    (tmp_path / "raw" / "d.jsonl.gz").write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in lines).encode()))
    return tmp_path


def prepare(root: Path, **settings) -> tuple[dict, dict[str, list[str]]]:
    out = root / "prepared"
    prepare_corpus(expand_sources(SOURCES, root=root), PrepareConfig(**settings), out)
    docs = {split: list(iter_documents(prepared_path(out, split))) for split in ("train", "val")}
    return json.loads((out / "stats.json").read_text()), docs


def test_prepare_cleans_dedups_filters_and_records_stats(raw):
    stats, docs = prepare(raw, val_fraction=0.0, max_chars=50)
    assert docs == {"train": ["Q: hi\nA: hello", "Q: x\nA: y", "Café"], "val": []}
    assert stats["documents_read"] == 7 and stats["documents_kept"] == 3
    assert stats["dropped"] == {"duplicate": 2, "empty": 1, "too_long": 1}
    assert stats["splits"]["train"] == {"documents": 3, "characters": 27}


def test_split_is_a_partition_and_stable_when_documents_are_added(raw):
    _, before = prepare(raw, val_fraction=0.5)
    assert sorted(before["train"] + before["val"]) == sorted(["Q: hi\nA: hello", "Q: x\nA: y", "Café", "long " * 20])
    (raw / "raw" / "more.txt").write_text("\n\n".join(f"new document {i}" for i in range(50)))
    _, after = prepare(raw, val_fraction=0.5)
    for split in ("train", "val"):
        assert set(before[split]) <= set(after[split])


def test_an_error_leaves_previous_output_untouched(raw):
    prepare(raw)
    before = {p.name: p.read_bytes() for p in (raw / "prepared").iterdir()}
    (raw / "raw" / "z.txt").write_bytes(b"fine\n\nbroken \xfe\n")
    with pytest.raises(DataError, match=r"z.txt: invalid UTF-8 at byte offset 13"):
        prepare(raw)
    assert {p.name: p.read_bytes() for p in (raw / "prepared").iterdir()} == before
    assert [p.name for p in raw.iterdir() if p.name.startswith(".")] == []


def test_skip_counts_undecodable_documents(raw):
    (raw / "raw" / "z.txt").write_bytes(b"fine doc\n\nbroken \xfe\n")
    stats, docs = prepare(raw, on_decode_error="skip", val_fraction=0.0)
    assert stats["dropped"]["decode_error"] == 1 and "fine doc" in docs["train"]
    assert stats["documents_read"] == stats["documents_kept"] + sum(stats["dropped"].values())


def test_output_is_byte_identical_across_runs(raw):
    prepare(raw)
    first = {p.name: p.read_bytes() for p in (raw / "prepared").iterdir()}
    prepare(raw)
    assert {p.name: p.read_bytes() for p in (raw / "prepared").iterdir()} == first


def test_no_document_kept_is_refused_and_leaves_previous_output(raw):
    prepare(raw)
    before = {p.name: p.read_bytes() for p in (raw / "prepared").iterdir()}
    with pytest.raises(DataError, match=r"^0 documents kept from .*qa.txt, .*d.jsonl.gz \(read 7, dropped: "
                                        r"1 empty, 6 too_short\); check data.sources and the prepare filters"):
        prepare(raw, min_chars=1000)
    with pytest.raises(DataError, match=r"^0 of the 4 documents kept fell in the train split "
                                        r"\(prepare.val_fraction=0.999999\)"):
        prepare(raw, val_fraction=0.999999)
    assert {p.name: p.read_bytes() for p in (raw / "prepared").iterdir()} == before


CLI_CONFIG = """\
data:
  sources:
    - {glob: "raw/*.txt", separator: blank_line}
prepare: {output_dir: prepared}
state_dir: state
"""


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "a.txt").write_text("\n\n".join(f"document {i}" for i in range(20)))
    (tmp_path / "lmprep.yaml").write_text(CLI_CONFIG)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def lmprep(*args: str):
    from click.testing import CliRunner

    from stages.cli import cli

    return CliRunner().invoke(cli, [*args, "--config", "lmprep.yaml"])


def test_cli_empty_corpus_fails_at_prepare_and_keeps_the_previous_data(project):
    assert lmprep("run", "prepare").exit_code == 0
    before = {p.name: p.read_bytes() for p in (project / "prepared").iterdir()}
    (project / "raw" / "a.txt").write_text(" \n\n\t\n")
    result = lmprep("run", "prepare")
    assert result.exit_code == 2
    assert result.output.startswith("running 'prepare'")
    assert result.output.splitlines()[-1] == (
        "error: 0 documents kept from raw/a.txt (read 0, dropped: none); check data.sources and the prepare "
        "filters; the previous prepared data is left as it was")
    assert {p.name: p.read_bytes() for p in (project / "prepared").iterdir()} == before
    assert "prepare: stale" in lmprep("status").output


def test_cli_empty_separator_is_a_config_error(project):
    result = lmprep("run", "prepare", "--set", "data.sources.0.separator=''")
    assert result.exit_code == 2
    assert result.output == ("error: lmprep.yaml: data.sources[0].separator must not be empty; use 'document', "
                             "'blank_line', 'line' or a literal string such as '<|endoftext|>'\n")
