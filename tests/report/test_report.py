"""The report's data without a browser: the rejected sample (bounded, deterministic), the page's size bound,
differences of near-duplicates, corrupt inputs as one line, and the optional stage."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner

from pipeline.config import parse_config
from pipeline.data.documents import DocumentWriter
from pipeline.report import MAX_PAGE_BYTES, gather, render
from pipeline.report.rejected import MAX_TEXT_CHARS, differences, raw_file, sample_rejected
from stages.cli.main import cli
from stages.registry import STAGES, declared

SMALL = """\
data:
  sources:
    - {glob: "raw/*.txt", separator: line}
prepare: {output_dir: out/prepared, val_fraction: 0.2}
tokenizer: {output: out/tokenizer.json, vocab_size: 280}
encode: {output_dir: out/shards, shard_tokens: 300}
train: {output_dir: out/ckpt, steps: 2, eval_every: 1, eval_batches: 1, batch_size: 2, context: 8, dim: 8}
stats: {output_dir: out/stats}
state_dir: state
"""


REJECTED_SCHEMA = pa.schema([pa.field("text", pa.large_string(), nullable=False), pa.field("source", pa.int32()),
                             *(pa.field(name, pa.large_string()) for name in ("document", "step", "rule",
                                                                               "duplicate_of", "language"))])


def write_rejected(path: Path, rows: list[tuple]) -> str:
    with DocumentWriter(path, schema=REJECTED_SCHEMA) as writer:
        for row in rows:
            writer.write(*row)
    return str(path)


def rejected(count: int) -> list[tuple]:
    rules = [("length", "empty"), ("exact_dedup", "duplicate"), ("c4", "javascript")]
    return [(f"text {i} " * (1 + i % 700), i % 3, f"raw/f{i % 5}.txt#{i}", *rules[i % 3],
             f"raw/f0.txt#{i // 2}" if i % 3 == 1 else "", "en") for i in range(count)]


def test_the_sample_is_bounded_deterministic_and_the_same_however_the_parts_are_cut(tmp_path):
    rows = rejected(3_000)
    one = sample_rejected([write_rejected(tmp_path / "all.arrow", rows)], 7)
    cut = [write_rejected(tmp_path / f"part-{i}.arrow", rows[i::3]) for i in range(3)]
    three = sample_rejected(cut, 7)
    assert one.counts == three.counts == {"c4/javascript": 1_000, "exact_dedup/duplicate": 1_000,
                                          "length/empty": 1_000}
    assert {reason: [s.document for s in items] for reason, items in one.sample.items()} == \
           {reason: [s.document for s in items] for reason, items in three.sample.items()}
    for items in one.sample.values():
        assert len(items) == 7 and all(item.metadata == {"language": "en"} for item in items)
        assert all(len(item.text) <= MAX_TEXT_CHARS and item.chars >= len(item.text) for item in items)
    assert sample_rejected(cut, 0).sample == {} and sample_rejected(cut, 0).counts == one.counts


def test_a_page_of_a_huge_sample_stays_within_its_bound(tmp_path):
    data = gather(parse_config({}), [])  # nothing ran: every section says why it is empty
    assert all(section["missing"] for name, section in data["sections"].items() if name != "dropped")
    item = {"text": "ж" * MAX_TEXT_CHARS, "chars": 10**6, "source": 0, "source_name": "s", "document": "f#1",
            "file": "f", "reason": "r/x"}
    data["sections"]["dropped"] |= {"counts": {f"r/{i}": 10**6 for i in range(40)},
                                    "sample": {f"r/{i}": [item] * 100 for i in range(40)}, "sample_size": 100}
    page = render(data, title="t", generated="now")
    assert len(page.encode("utf-8")) <= MAX_PAGE_BYTES
    assert 'class="rej"' in page


def test_differences_mark_what_changed_on_word_pieces():
    ops = differences("the cat sat on the mat", "the dog sat on the mat today")
    assert ops == [["=", "the ", ""], ["~", "cat", "dog"], ["=", " sat on the mat", ""], ["+", "", " today"]]
    assert differences("same", "same") == [["=", "same", ""]]


def test_a_document_id_names_its_raw_file():
    assert raw_file("data/raw/a.jsonl bytes 0-4096#12") == "data/raw/a.jsonl"
    assert raw_file("data/raw/g.parquet row groups 2-end#0") == "data/raw/g.parquet"
    assert raw_file("data/raw/a.txt#3") == "data/raw/a.txt"


@pytest.fixture
def small(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "a.txt").write_text("".join(f"line {i % 40} of the small corpus\n" for i in range(60)))
    (tmp_path / "lmprep.yaml").write_text(SMALL)
    result = CliRunner().invoke(cli, ["run", "--config", "lmprep.yaml"])
    assert result.exit_code == 0, result.output
    return tmp_path


def report(*args: str) -> tuple[int, list[str]]:
    result = CliRunner().invoke(cli, ["report", "--config", "lmprep.yaml", *args])
    return result.exit_code, result.output.splitlines()


def test_a_corrupt_json_file_is_one_line_naming_it(small):
    code, lines = report("--out", "r.html")
    assert code == 0 and lines == [f"report: {lines[0].split(': ', 1)[1]}"] and "→ r.html" in lines[0]
    (small / "out" / "stats" / "stats.json").write_text('{"splits": [')
    code, lines = report("--out", "r.html")
    assert code == 2 and len(lines) == 1
    assert lines[0].startswith("error: ") and "out/stats/stats.json: the stats summary is not valid JSON" in lines[0]
    (small / "out" / "stats" / "stats.json").write_text("[]")
    code, lines = report("--out", "r.html")
    assert code == 2 and lines == ["error: out/stats/stats.json: the stats summary is not a JSON object; the stats "
                                   "stage writes it: run that again (lmprep run --force)"]
    (small / "out" / "stats" / "stats.json").write_text('{"splits": {"train": {"documents": 3}}}')
    code, lines = report("--out", "r.html")
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: out/stats/stats.json: not as the stages write")
    (small / "out" / "stats" / "stats.json").unlink()
    with open(small / "out" / "ckpt" / "metrics.jsonl", "a") as metrics:
        metrics.write("{not json\n")
    code, lines = report("--out", "r.html")
    assert code == 2 and len(lines) == 1 and "metrics.jsonl line 3: the training log is not valid JSON" in lines[0]


def test_a_missing_stats_output_leaves_the_page_with_the_reason(small):
    (small / "out" / "stats" / "stats.json").unlink()
    code, lines = report()
    assert code == 0 and lines[0].endswith("→ report.html; incomplete: Sources")
    page = (small / "report.html").read_text("utf-8")
    assert "out/stats/stats.json is missing (stats summary: the stats stage writes it)" in page
    assert 'id="sources-table"' in page  # the manifests' counts stand in


def test_the_report_stage_is_declared_by_report_output_and_runs_last(small):
    report_stage = next(spec for spec in STAGES if spec.name == "report")
    assert report_stage.optional and not declared(report_stage, parse_config({}))
    text = (small / "lmprep.yaml").read_text() + "report: {output: out/report.html, sample: 3}\n"
    (small / "lmprep.yaml").write_text(text)
    result = CliRunner().invoke(cli, ["run", "--config", "lmprep.yaml"])
    assert result.exit_code == 0, result.output
    assert "running 'report': never run" in result.output
    assert "report: " in result.output and (small / "out" / "report.html").is_file()
    status = CliRunner().invoke(cli, ["status", "--json", "--config", "lmprep.yaml"])
    stages = json.loads(status.output)["stages"]
    assert list(stages)[-1] == "report"
    again = CliRunner().invoke(cli, ["run", "--config", "lmprep.yaml"])
    assert "'report' is up to date" in again.output


def test_shards_of_another_tokenizer_are_said_to_be_so(small):
    retrain = ["run", "tokenizer", "--config", "lmprep.yaml", "--set", "tokenizer.vocab_size=270"]
    result = CliRunner().invoke(cli, retrain)
    assert result.exit_code == 0, result.output
    code, lines = report()
    assert code == 0 and "incomplete: Documents and tokens" in lines[0]
    page = (small / "report.html").read_text("utf-8")
    assert "the shards were encoded with tokenizer " in page and "not with out/tokenizer.json" in page
