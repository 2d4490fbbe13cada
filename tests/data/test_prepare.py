"""The prepare step end to end on small mixed-format corpora."""

from __future__ import annotations

import gzip
import hashlib
import json
import pickle
import subprocess
import sys
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.config import PrepareConfig, SourceConfig
from pipeline.config.schema import StepConfig
from pipeline.data.dedup import ExactDedupStep
from pipeline.data.documents import iter_split_documents, text_column
from pipeline.data.prepare import prepare_corpus
from pipeline.data.sources import expand_sources
from pipeline.engine.executor import Tasks
from pipeline.errors import DataError

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
    with ThreadPoolExecutor(2) as pool:
        prepare_corpus(expand_sources(SOURCES, root=root), PrepareConfig(**settings), out, tasks=Tasks(pool))
    docs = {split: list(iter_split_documents(out, split)) for split in ("train", "val")}
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
    before = tree_bytes(raw / "prepared")
    (raw / "raw" / "z.txt").write_bytes(b"fine\n\nbroken \xfe\n")
    with pytest.raises(DataError, match=r"z.txt: invalid UTF-8 at byte offset 13"):
        prepare(raw)
    assert tree_bytes(raw / "prepared") == before
    assert [p.name for p in raw.iterdir() if p.name.startswith(".")] == []


def test_skip_counts_undecodable_documents(raw):
    (raw / "raw" / "z.txt").write_bytes(b"fine doc\n\nbroken \xfe\n")
    stats, docs = prepare(raw, on_decode_error="skip", val_fraction=0.0)
    assert stats["dropped"]["decode_error"] == 1 and "fine doc" in docs["train"]
    assert stats["documents_read"] == stats["documents_kept"] + sum(stats["dropped"].values())


def test_output_is_byte_identical_across_runs(raw):
    prepare(raw)
    first = tree_bytes(raw / "prepared")
    prepare(raw)
    assert tree_bytes(raw / "prepared") == first


def tree_bytes(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def test_dedup_across_partitions_and_buckets_keeps_exactly_the_first_copy(tmp_path):
    """Duplicates in other files, in other byte ranges of one file and in other buckets: first copy wins."""
    (tmp_path / "raw").mkdir()
    texts = [f"doc {i % 37}" for i in range(200)]  # each text repeated, scattered over the corpus
    (tmp_path / "raw" / "big.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts[:120]))
    for n in range(4):
        (tmp_path / "raw" / f"f{n}.txt").write_text("\n".join(texts[120 + 20 * n : 140 + 20 * n]))
    files = expand_sources([SourceConfig("raw/*.jsonl"), SourceConfig("raw/*.txt", separator="line")], root=tmp_path)
    first_copies = list(dict.fromkeys(texts))
    outputs = []
    for partition_bytes, buckets in ((10**9, 1), (300, 5), (300, 16)):
        out = tmp_path / f"out-{partition_bytes}-{buckets}"
        settings = PrepareConfig(val_fraction=0.0, partition_bytes=partition_bytes,
                                 steps=(StepConfig("exact_dedup", ExactDedupStep(buckets=buckets)),))
        with ThreadPoolExecutor(2) as pool:
            stats = prepare_corpus(files, settings, out, tasks=Tasks(pool))
        assert list(iter_split_documents(out, "train")) == first_copies
        assert stats.dropped == {"duplicate": 200 - 37}
        outputs.append(tree_bytes(out))
    assert len(outputs[1]) > 10 and outputs[1] == outputs[2]  # bucket count changes nothing
    digests = [hashlib.blake2b(t.encode(), digest_size=16).digest() for t in first_copies]
    assert len({int.from_bytes(d[:8], "little") % 16 for d in digests}) > 5  # the copies met in many buckets


def test_no_document_kept_is_refused_and_leaves_previous_output(raw):
    prepare(raw)
    before = tree_bytes(raw / "prepared")
    with pytest.raises(DataError, match=r"^0 documents kept from .*qa.txt, .*d.jsonl.gz \(read 7, dropped: "
                                        r"1 empty, 6 too_short\); check data.sources and the prepare filters"):
        prepare(raw, min_chars=1000)
    with pytest.raises(DataError, match=r"^0 of the 4 documents kept fell in the train split "
                                        r"\(prepare.val_fraction=0.999999\)"):
        prepare(raw, val_fraction=0.999999)
    assert tree_bytes(raw / "prepared") == before


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

    from stages.cli.main import cli

    return CliRunner().invoke(cli, [*args, "--config", "lmprep.yaml"])


def test_cli_warns_of_a_literal_separator_that_never_occurs(project):
    result = lmprep("run", "prepare", "--set", "data.sources.0.separator=blankline")
    assert result.exit_code == 0, result.output
    assert "read 1 document (" in result.output and "from 1 file\n" in result.output  # in the singular
    assert "kept 1 document\n" in result.output
    assert result.output.splitlines()[-1] == ("warning: the separator 'blankline' never occurs in raw/a.txt: it is "
                                              "one document; did you mean 'blank_line'?")


def test_cli_empty_corpus_fails_at_prepare_and_keeps_the_previous_data(project):
    assert lmprep("run", "prepare").exit_code == 0
    before = tree_bytes(project / "prepared")
    (project / "raw" / "a.txt").write_text(" \n\n\t\n")
    result = lmprep("run", "prepare")
    assert result.exit_code == 2
    assert result.output.startswith("running 'prepare'")
    assert result.output.splitlines()[-1] == (
        "error: 0 documents kept from raw/a.txt (read 0, dropped: none); check data.sources and the prepare "
        "filters; the previous prepared data is left as it was")
    assert tree_bytes(project / "prepared") == before
    assert "prepare: stale" in lmprep("status").output


def test_cli_empty_separator_is_a_config_error(project):
    result = lmprep("run", "prepare", "--set", "data.sources.0.separator=''")
    assert result.exit_code == 2
    assert result.output == ("error: --set: data.sources[0].separator must not be empty; use 'document', "
                             "'blank_line', 'line' or a literal string such as '<|endoftext|>'\n")


def test_the_largest_partitions_are_read_and_written_first(tmp_path, start_order):
    (tmp_path / "raw").mkdir()
    for name, count in (("a", 3), ("b", 40), ("c", 10)):
        (tmp_path / "raw" / f"{name}.txt").write_text("".join(f"{name} line {i}\n" for i in range(count)))
    files = expand_sources([SourceConfig("raw/*.txt", separator="blank_line")], root=tmp_path)
    prepare_corpus(files, PrepareConfig(val_fraction=0.0, partition_bytes=1), tmp_path / "prepared",
                   tasks=Tasks(start_order))
    reads = [label.split()[0] for label in start_order.labels if not label.startswith("dedup")]
    assert reads == ["1", "2", "0"] * 2  # scan, then write: b (the largest), c, a


def test_only_the_output_files_are_fsynced_not_the_intermediate_ones(raw, monkeypatch):
    import pipeline.engine.atomic

    synced: list[Path] = []
    real_fsync = pipeline.engine.atomic._fsync_file
    monkeypatch.setattr(pipeline.engine.atomic, "_fsync_file",
                        lambda path: (synced.append(Path(path)), real_fsync(path)))
    prepare(raw, partition_bytes=40)
    assert synced and not [path for path in synced if ".work" in path.parts]


def test_prepare_does_not_import_pandas(raw):
    """pyarrow's ``pa.array`` imports pandas where installed: 0.2 s of CPU in every worker."""
    script = ("import sys\n"
              "from concurrent.futures import ThreadPoolExecutor\n"
              "from pipeline.config import PrepareConfig, SourceConfig\n"
              "from pipeline.engine.executor import Tasks\n"
              "from pipeline.data.prepare import prepare_corpus\n"
              "from pipeline.data.sources import expand_sources\n"
              f"files = expand_sources({SOURCES!r}, root={str(raw)!r})\n"
              "with ThreadPoolExecutor(1) as pool:\n"
              f"    prepare_corpus(files, PrepareConfig(), {str(raw / 'prepared')!r}, tasks=Tasks(pool))\n"
              "print('pandas' in sys.modules)\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["False"]


@settings(deadline=None)  # the first pa.array call imports pandas
@given(st.lists(st.text(st.characters(exclude_categories=("Cs",))), max_size=20))
def test_text_column_is_the_column_pyarrow_builds(texts):
    assert text_column(texts).equals(pa.array(texts, type=pa.large_string()))


class _MeasuredTasks(Tasks):
    """Tasks that note the driver's traced memory as the first round's tasks start."""

    held: int | None = None

    def map(self, *args, **kwargs):
        if self.held is None:
            self.held = tracemalloc.get_traced_memory()[0]
        return super().map(*args, **kwargs)


def _held_while_tasks_run(root: Path, files: int) -> int:
    """The bytes prepare's driver holds, beyond the raw files' list, as the tasks of ``files`` small files start."""
    raw = root / f"raw-{files}"
    raw.mkdir()
    for number in range(files):
        (raw / f"{number:06d}.txt").write_text(f"document number {number}")
    sources = expand_sources([SourceConfig(f"{raw.name}/*.txt")], root=root)
    with ThreadPoolExecutor(1) as pool:
        tasks = _MeasuredTasks(pool)
        tracemalloc.start()
        try:
            start = tracemalloc.get_traced_memory()[0]
            prepare_corpus(sources, PrepareConfig(), root / f"prepared-{files}", tasks=tasks, names_root=root)
        finally:
            tracemalloc.stop()
    assert tasks.held is not None
    return tasks.held - start


def test_the_driver_holds_a_hundred_bytes_per_raw_file_beyond_their_list_while_the_tasks_run(tmp_path):
    """100,000 files of 1 KB took 3.8 KB each in prepare's driver (its plan held every file twice, as objects with
    a ``__dict__`` and ``Path``s, and every piece's stamp for the whole run), then some 150 bytes beyond the files'
    list (each piece's document-ID name, made by the tasks now): what the plan and the records hold per file,
    measured as the tasks start, stays below 110 bytes (a piece and its place in its partition)."""
    fewer, more = _held_while_tasks_run(tmp_path, 300), _held_while_tasks_run(tmp_path, 1500)
    assert (more - fewer) / 1200 < 110, f"{(more - fewer) / 1200:.0f} bytes per file"


class _PickledTasks(Tasks):
    """Tasks that note the bytes each round's task function takes pickled, as a process pool sends it."""

    def __init__(self, executor):
        super().__init__(executor)
        self.pickled: list[int] = []

    def map(self, function, *args, **kwargs):
        self.pickled.append(len(pickle.dumps(function)))
        return super().map(function, *args, **kwargs)


def _pickled_round_tasks(root: Path, files: int) -> list[int]:
    raw = root / f"raw-{files}"
    raw.mkdir()
    for number in range(files):
        (raw / f"{number:06d}.txt").write_text(f"document number {number % (files // 2)}")  # half of them twice
    sources = expand_sources([SourceConfig(f"{raw.name}/*.txt")], root=root)
    settings = PrepareConfig(steps=(StepConfig("exact_dedup", ExactDedupStep()),))
    with ThreadPoolExecutor(1) as pool:
        tasks = _PickledTasks(pool)
        stats = prepare_corpus(sources, settings, root / f"prepared-{files}", tasks=tasks, names_root=root)
    assert stats.documents_kept == files // 2
    return tasks.pickled


def test_a_round_after_a_deduplication_is_not_sent_every_pieces_name(tmp_path):
    """The second round's task took every piece's document-ID name and first position with it (3.8 MB pickled per
    task at 100,000 files); it reads those of the partitions it needs from the first round's work files, so what
    is sent per task does not grow with the files."""
    fewer, more = _pickled_round_tasks(tmp_path, 300), _pickled_round_tasks(tmp_path, 1500)
    assert len(fewer) == len(more) >= 2
    assert more[-1] - fewer[-1] < 500, f"{more[-1] - fewer[-1]:,} bytes more for 1,200 files more"
