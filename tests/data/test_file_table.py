"""The driver's table of raw files: the same SourceFiles as a list of them, a view per partition, and a task's
pickle holding its own files alone."""

from __future__ import annotations

import os
import pickle

from pipeline.config import SourceConfig
from pipeline.data.file_table import SourceFiles, reader_code_files
from pipeline.data.prepare import Job
from pipeline.data.reading import SourceFile
from pipeline.data.sources import expand_sources, plan_partitions


def _corpus(root, files: int) -> None:
    for number in range(files):
        directory = root / f"{number // 100:03d}"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"{number:05d}.{'jsonl' if number % 3 else 'txt'}").write_text(f'{{"text": "d {number}"}}\n')


def test_the_table_gives_each_file_as_a_source_file(tmp_path):
    _corpus(tmp_path, 250)
    name = os.fsdecode(b"odd-\xff.txt")  # a name that is not UTF-8, as the file system gives it
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / name).write_text("odd")
    files = expand_sources([SourceConfig("**/*.jsonl"), SourceConfig("**/*.txt")], root=tmp_path)
    expected = [SourceFile(path, fmt, "document", "text", source=source)
                for source, (ext, fmt) in enumerate((("jsonl", "jsonl"), ("txt", "txt")))
                for path in sorted((str(path) for path in tmp_path.glob(f"**/*.{ext}")), key=lambda p: p.split("/"))]
    assert isinstance(files, SourceFiles) and list(files) == expected and len(files) == 251
    assert files[-1].path.endswith(name) and files[-1] == files[250] and list(files[3:5]) == expected[3:5]
    assert list(files.of_source(1).paths) == [file.path for file in expected[166:]]
    assert len(files.kinds) == 2 and reader_code_files(files) == [] and files.stamps() == {}


def test_a_view_pickles_its_own_files_alone(tmp_path):
    _corpus(tmp_path, 3000)
    files = expand_sources([SourceConfig("**/*.txt"), SourceConfig("**/*.jsonl")], root=tmp_path)
    view = files[1990:2010]
    again = pickle.loads(pickle.dumps(view))
    assert list(again) == list(view) == list(files)[1990:2010]
    assert len(pickle.dumps(view)) < len(pickle.dumps(files)) / 50


def test_a_task_of_small_files_is_sent_with_its_own_files(tmp_path):
    """A partition of whole files holds their sizes and a view of the table, not a piece each; pickled for its task,
    it takes its own files' paths alone (under 40 bytes a file here, against the whole corpus's)."""
    _corpus(tmp_path, 3000)
    files = expand_sources([SourceConfig("**/*.jsonl")], root=tmp_path)
    partitions = plan_partitions(files, 2000)
    assert [piece.file for partition in partitions for piece in partition.pieces] == list(files)
    job = pickle.dumps(Job(partitions[1]))
    pieces = list(pickle.loads(job).partition.pieces)
    assert pieces == list(partitions[1].pieces) and len(job) < 40 * len(pieces) + 1000
