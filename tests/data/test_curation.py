"""Which documents go in: prepare's chain of steps, per-source accounting and the rejected output."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import lmprep_in_cwd

from pipeline.config.schema import PrepareConfig, SourceConfig, StepConfig
from pipeline.data.dedup import ExactDedupStep
from pipeline.data.documents import iter_documents, iter_records, iter_split_documents
from pipeline.data.language import LanguageStep
from pipeline.data.near_dedup import NearDedupStep
from pipeline.data.prepare import prepare_corpus
from pipeline.data.sources import expand_sources
from pipeline.engine.executor import Tasks

SOURCES = (SourceConfig("raw/*.txt", separator="blank_line"), SourceConfig("raw/*.jsonl"),
           SourceConfig("raw/*.parquet", field="name"))
STORY = "the quick brown fox jumps over the lazy dog while the cat watches from the warm window sill"


@pytest.fixture
def raw(tmp_path) -> Path:
    (tmp_path / "raw").mkdir()
    texts = ["Q: hi\nA: hello", "Q: x\nA: y", "\x00", "Q: hi\nA: hello", STORY, STORY.replace("cat", "owl")]
    (tmp_path / "raw" / "qa.txt").write_text("\n\n".join(texts))
    (tmp_path / "raw" / "empty.jsonl").write_text("")
    names = pa.table({"name": [f"file_{i}.py" for i in range(5)], "content": ["print(1)"] * 5})
    pq.write_table(names, tmp_path / "raw" / "code.parquet")
    return tmp_path


def prepare(root: Path, *steps: StepConfig, workers: int = 2, **settings) -> dict:
    out = root / "prepared"
    files = expand_sources(SOURCES, root=root)
    with ThreadPoolExecutor(workers) as pool:
        prepare_corpus(files, PrepareConfig(val_fraction=0.0, steps=steps, **settings), out, tasks=Tasks(pool),
                       source_names=[f"data.sources[{i}] {s.glob}" for i, s in enumerate(SOURCES)], names_root=root)
    return json.loads((out / "stats.json").read_text())


EXACT = StepConfig("exact_dedup", ExactDedupStep())
NEAR = StepConfig("near_dedup", NearDedupStep(shingle_size=2, threshold=0.7, buckets=3))


def rejected(root: Path) -> list[tuple]:
    stats = json.loads((root / "prepared" / "stats.json").read_text())
    return [row for part in stats["rejected"] for row in iter_records(root / "prepared" / part["file"])]


def test_stats_account_for_every_document_per_source_and_step(raw):
    stats = prepare(raw, EXACT)
    qa, empty, code = stats["sources"]
    assert qa == {"source": "data.sources[0] raw/*.txt", "documents_read": 6, "documents_kept": 4,
                  "characters_read": sum(map(len, ["Q: hi\nA: hello", "Q: x\nA: y", "\x00", "Q: hi\nA: hello", STORY,
                                                   STORY.replace("cat", "owl")])),
                  "characters_kept": 14 + 9 + 2 * len(STORY), "name_like": 0,
                  "dropped": {"exact_dedup/duplicate": 1, "length/empty": 1}, "lines_removed": {}}
    assert empty["documents_read"] == 0 and code["documents_read"] == code["name_like"] == 5
    assert code["dropped"] == {} and code["documents_kept"] == 5
    assert stats["dropped"] == {"duplicate": 1, "empty": 1}
    assert stats["documents_read"] == 11 and stats["documents_kept"] == 9


def test_every_removed_document_is_in_the_rejected_parts_with_its_reason(raw):
    prepare(raw, EXACT, min_chars=10)
    rows = rejected(raw)
    assert rows == [("Q: x\nA: y", 0, "raw/qa.txt#1", "length", "too_short", ""),  # by round, then corpus order
                    ("", 0, "raw/qa.txt#2", "length", "empty", ""),
                    *[(f"file_{i}.py", 2, f"raw/code.parquet#{i}", "length", "too_short", "") for i in range(5)],
                    ("Q: hi\nA: hello", 0, "raw/qa.txt#3", "exact_dedup", "duplicate", "raw/qa.txt#0")]
    kept = list(iter_split_documents(raw / "prepared", "train"))
    assert sorted(kept + [row[0] for row in rows]) == sorted(
        ["Q: hi\nA: hello", "Q: x\nA: y", "", "Q: hi\nA: hello", STORY, STORY.replace("cat", "owl")]
        + [f"file_{i}.py" for i in range(5)])
    assert list(iter_documents(raw / "prepared" / "rejected" / "part-00000.arrow"))[0] == rows[0][0]


def test_the_summary_is_a_table_with_a_warning_for_each_suspicious_source(raw):
    out = raw / "prepared"
    with ThreadPoolExecutor(1) as pool:
        stats = prepare_corpus(expand_sources(SOURCES, root=raw), PrepareConfig(), out, tasks=Tasks(pool),
                               source_names=["qa", "dialogues", "code"])
    lines = stats.summary().splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("source "))
    assert lines[header + 2].split()[:3] == ["dialogues", "0", "0"]
    assert "warning: dialogues yields 0 documents" in lines
    assert ("warning: code: 5 of its 5 documents are a single word under 64 characters, like names rather than "
            "text; is its field the text column?") in lines
    assert not any(line.startswith("warning: qa") for line in lines)


def test_an_empty_chain_keeps_duplicates_and_steps_run_in_the_order_given(raw):
    assert prepare(raw)["dropped"] == {"empty": 1}
    both = prepare(raw, EXACT, NEAR)
    assert both["dropped"] == {"duplicate": 1, "empty": 1, "near_duplicate": 1}
    assert [row[3:] for row in rejected(raw) if row[4] == "near_duplicate"] == [
        ("near_dedup", "near_duplicate", "raw/qa.txt#4")]
    assert prepare(raw, NEAR, EXACT)["dropped"] == {"empty": 1, "near_duplicate": 2}  # near-dedup sees the copy first


@pytest.mark.parametrize("workers", [1, 3])
def test_the_output_does_not_depend_on_the_workers_or_the_partitions(raw, tmp_path_factory, workers):
    for i in range(30):
        (raw / "raw" / f"more-{i:02d}.txt").write_text(f"{STORY} number {i % 7}\n\nshort {i % 3}")
    reference = tmp_path_factory.mktemp("reference")
    (reference / "raw").mkdir()
    for path in (raw / "raw").iterdir():
        (reference / "raw" / path.name).write_bytes(path.read_bytes())
    prepare(reference, EXACT, NEAR, workers=1, partition_bytes=10**9)
    prepare(raw, EXACT, NEAR, workers=workers, partition_bytes=300)
    merged = {split: list(iter_split_documents(raw / "prepared", split)) for split in ("train", "val")}
    assert merged == {split: list(iter_split_documents(reference / "prepared", split)) for split in ("train", "val")}
    assert sorted(rejected(raw)) == sorted(rejected(reference))  # the same decisions; parts follow partitions


def test_a_changed_step_setting_reruns_prepare_and_names_the_key(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "a.txt").write_text("\n\n".join([STORY, STORY + " again", "Q: hi"] * 3))
    config = ("data: {sources: [{glob: 'raw/*.txt', separator: blank_line}]}\n"
              "prepare: {output_dir: out/prepared, val_fraction: 0.0, "
              "steps: [{exact_dedup: {}}, {near_dedup: {threshold: 0.8}}]}\nstate_dir: state\n")
    Path("lmprep.yaml").write_text(config)
    result = lmprep_in_cwd("run", "prepare")
    assert result.exit_code == 0, result.output
    assert "dropped: 6 duplicate, 1 near_duplicate" in result.output
    Path("lmprep.yaml").write_text(config.replace("threshold: 0.8", "threshold: 0.95"))
    status = lmprep_in_cwd("status").output
    assert "param prepare.steps[1].near_dedup.threshold changed 0.8 → 0.95" in status


def test_near_dedup_cuts_sharply_at_its_threshold(tmp_path):
    """Pairs well above the threshold go, pairs well below stay, though the bands make most of them
    candidates: the signatures verify each candidate pair."""
    import random

    rng = random.Random(11)
    vocabulary = [f"w{i}" for i in range(5000)]
    originals = [[rng.choice(vocabulary) for _ in range(300)] for _ in range(40)]
    near = [o[:285] + [rng.choice(vocabulary) for _ in range(15)] for o in originals[:20]]  # J about 0.9
    far = [o[:150] + [rng.choice(vocabulary) for _ in range(150)] for o in originals[20:]]  # J about 0.33
    half = [o[:230] + [rng.choice(vocabulary) for _ in range(70)] for o in originals[:20]]  # J about 0.6
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "d.jsonl").write_text("".join(
        json.dumps({"text": " ".join(words)}) + "\n" for words in originals + near + far + half))
    with ThreadPoolExecutor(2) as pool:
        stats = prepare_corpus(expand_sources([SourceConfig("raw/*.jsonl")], root=tmp_path),
                               PrepareConfig(steps=(NEAR_DEFAULTS,), val_fraction=0.0), tmp_path / "out",
                               tasks=Tasks(pool), names_root=tmp_path)
    rows = [row for part in stats.rejected for row in iter_records(tmp_path / "out" / part["file"])]
    assert sorted(int(row[2].rpartition("#")[2]) for row in rows) == list(range(40, 60))
    assert all(row[5] == f"raw/d.jsonl#{int(row[2].rpartition('#')[2]) - 40}" for row in rows)


NEAR_DEFAULTS = StepConfig("near_dedup", NearDedupStep())


def test_near_dedup_verifies_its_candidates_a_chunk_at_a_time_with_the_same_result(raw, monkeypatch):
    from pipeline.data import near_dedup

    for i in range(40):
        (raw / "raw" / f"more-{i:02d}.txt").write_text(f"{STORY} number {i % 7} and {i % 5}")
    whole = prepare(raw, EXACT, NEAR)
    monkeypatch.setattr(near_dedup, "_GATHER_ROWS", 3)
    assert prepare(raw, EXACT, NEAR) == whole and whole["dropped"]["near_duplicate"] > 10


def test_kept_parts_name_each_documents_source_and_id_and_its_language_when_identified(raw):
    prepare(raw, EXACT)
    rows = list(iter_records(raw / "prepared" / "train" / "part-00000.arrow"))
    assert rows[:2] == [("Q: hi\nA: hello", 0, "raw/qa.txt#0"), ("Q: x\nA: y", 0, "raw/qa.txt#1")]
    assert rows[-1] == ("file_4.py", 2, "raw/code.parquet#4")  # its field is the name column
    # the language identified in the first round reaches the kept parts across the de-duplication round
    language = StepConfig("language", LanguageStep(languages=(), min_score=0.0))
    prepare(raw, language, EXACT)
    rows = list(iter_records(raw / "prepared" / "train" / "part-00000.arrow"))
    story = next(row for row in rows if row[0] == STORY)
    assert story[1:4] == (0, "raw/qa.txt#4", "en") and 0.9 < story[4] <= 1.0
    assert all(len(row) == 5 and isinstance(row[3], str) and row[3] for row in rows)
    assert list(iter_documents(raw / "prepared" / "train" / "part-00000.arrow")) == [row[0] for row in rows]
