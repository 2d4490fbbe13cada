"""A glob's files as one digest in the lock and a listing beside it: changes named, old locks read, memory flat."""

from __future__ import annotations

import json
import os
import tracemalloc
from pathlib import Path

from pipeline.engine import atomic, file_sets
from pipeline.engine.file_sets import FileSet
from pipeline.engine.hashing import sha256_bytes
from pipeline.engine.runner import Pipeline, Stage


def make_files(root: Path, count: int, directory: str = "raw") -> list[str]:
    (root / directory).mkdir(exist_ok=True)
    for number in range(count):
        (root / directory / f"{number:06d}.txt").write_text(f"document {number}")
    return [f"{directory}/{number:06d}.txt" for number in range(count)]


def counting_pipeline(root: Path, log: list[str] | None = None, directory: str = "raw") -> Pipeline:
    """One stage writing how many files ``raw/*.txt`` matches, its files a file set."""
    paths = sorted(os.path.relpath(path, root) for path in (root / directory).glob("*.txt"))

    def run():
        atomic.write_text(root / "out" / "count.txt", str(len(paths)))

    stage = Stage("count", (), ("out/count.txt",), (), run,
                  file_sets=(FileSet(f"{directory}/*.txt", directory, tuple(paths)),))
    return Pipeline([stage], param_value=lambda key: None, state_dir="state", root=root,
                    log=(log if log is not None else []).append)


def reasons(pipeline: Pipeline) -> tuple[str, ...]:
    [status] = pipeline.status()
    return status.reasons


def test_the_lock_records_a_digest_per_glob_and_the_reasons_name_the_files_changed(tmp_path):
    make_files(tmp_path, 10)
    assert counting_pipeline(tmp_path).run() == ["count"]
    entry = json.loads((tmp_path / "state" / "lock.json").read_text())["stages"]["count"]
    assert entry["deps"] == {} and [name for name, _ in entry["globs"]] == ["raw/*.txt"]
    assert counting_pipeline(tmp_path).run() == []

    (tmp_path / "raw" / "000003.txt").write_text("edited")
    (tmp_path / "raw" / "000007.txt").unlink()
    (tmp_path / "raw" / "000010.txt").write_text("new")
    assert reasons(counting_pipeline(tmp_path)) == ("dependency 'raw/000003.txt' changed",
                                                    "dependency 'raw/000007.txt' removed",
                                                    "dependency 'raw/000010.txt' added")
    assert counting_pipeline(tmp_path).run() == ["count"] and counting_pipeline(tmp_path).run() == []


def test_many_changes_name_a_few_files_and_count_the_others(tmp_path):
    make_files(tmp_path, 20)
    counting_pipeline(tmp_path).run()
    for number in range(12):
        (tmp_path / "raw" / f"{number:06d}.txt").write_text("edited")
    for number in range(20, 25):
        (tmp_path / "raw" / f"{number:06d}.txt").write_text("new")
    assert reasons(counting_pipeline(tmp_path)) == (
        "dependency 'raw/000000.txt' changed", "dependency 'raw/000001.txt' changed",
        "dependency 'raw/000002.txt' changed", "and 14 more of the files of 'raw/*.txt': 5 added, 9 changed")


def test_a_file_that_keeps_its_stamp_is_not_read_again(tmp_path, monkeypatch):
    from pipeline.engine import hashing

    make_files(tmp_path, 5)
    counting_pipeline(tmp_path).run()
    read: list[str] = []
    sha256_file = hashing.sha256_file
    monkeypatch.setattr(hashing, "sha256_file", lambda path: read.append(os.fspath(path)) or sha256_file(path))
    os.utime(tmp_path / "raw" / "000002.txt")  # the same bytes, another stamp: read once, its new stamp listed
    assert counting_pipeline(tmp_path).run() == []
    assert counting_pipeline(tmp_path).run() == []
    assert [os.path.basename(path) for path in read] == ["000002.txt"]


def test_without_the_listing_a_change_is_still_found_but_not_named(tmp_path):
    make_files(tmp_path, 3)
    counting_pipeline(tmp_path).run()
    file_sets.listing_path(tmp_path / "state", "count").unlink()
    assert counting_pipeline(tmp_path).status()[0].reasons == ()
    (tmp_path / "raw" / "000001.txt").write_text("edited")
    assert reasons(counting_pipeline(tmp_path)) == ("the files of 'raw/*.txt' changed",)


def test_a_missing_file_is_named_and_refused(tmp_path):
    make_files(tmp_path, 3)
    counting_pipeline(tmp_path).run()
    pipeline = counting_pipeline(tmp_path)  # the glob listed the file, which then went
    (tmp_path / "raw" / "000001.txt").unlink()
    assert reasons(pipeline) == ("dependency 'raw/000001.txt' is missing",)


def test_a_lock_of_version_1_is_converted_without_a_run(tmp_path):
    """A lock written before file sets recorded a hash per raw file in ``deps``: it is read as this version's (the
    stage stays up to date, a change is named), and written as this version's at the next run."""
    paths = make_files(tmp_path, 4)
    log: list[str] = []
    counting_pipeline(tmp_path, log).run()
    lock_path = tmp_path / "state" / "lock.json"
    lock = json.loads(lock_path.read_text())
    entry = lock["stages"]["count"]
    del entry["globs"]
    entry["deps"] = {path: sha256_bytes((tmp_path / path).read_bytes()) for path in paths}
    lock_path.write_text(json.dumps({"version": 1, "stages": lock["stages"]}))
    file_sets.listing_path(tmp_path / "state", "count").unlink()

    assert reasons(counting_pipeline(tmp_path)) == ()
    (tmp_path / "raw" / "000002.txt").write_text("edited")
    assert reasons(counting_pipeline(tmp_path)) == ("dependency 'raw/000002.txt' changed",)
    (tmp_path / "raw" / "000002.txt").write_text("document 2")
    assert counting_pipeline(tmp_path, log).run() == []  # up to date: the lock is written in this version's form
    assert json.loads(lock_path.read_text())["version"] == 2
    (tmp_path / "raw" / "000002.txt").write_text("edited")
    assert reasons(counting_pipeline(tmp_path)) == ("dependency 'raw/000002.txt' changed",)


def _held_checking(root: Path, files: int) -> int:
    """The bytes the runner holds at its peak while it checks and records a stage over ``files`` new files
    (beyond the stage's own list of them)."""
    directory = f"raw-{files}"
    make_files(root, files, directory)
    pipeline = counting_pipeline(root, directory=directory)
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        pipeline.run()
        pipeline.run()  # the second run reads the listing the first wrote
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return peak - start


def test_the_runner_holds_a_few_bytes_per_file_of_a_glob(tmp_path):
    """The runner held some 400 bytes per raw file (the lock's hash of each and the hash cache's entry beside its
    absolute path); a glob's files are now one digest and a listing on disk, so that what it holds beyond the
    stage's list grows by less than 20 bytes per file (a sorted copy of the list: 8)."""
    fewer, more = _held_checking(tmp_path, 2_000), _held_checking(tmp_path, 20_000)
    assert (more - fewer) / 18_000 < 20, f"{(more - fewer) / 18_000:.0f} bytes per file"


def test_a_torn_listing_only_costs_the_names(tmp_path):
    """The listing only names and saves time: a torn one (an odd line, a cut one) is read up to the tear, and names
    no file, since those after it would seem added."""
    make_files(tmp_path, 4)
    counting_pipeline(tmp_path).run()
    listing = file_sets.listing_path(tmp_path / "state", "count")
    header, *records = listing.read_text().splitlines(keepends=True)
    listing.write_text(header + records[0] + '{"not": "a record"}\n' + records[2][:10])
    assert counting_pipeline(tmp_path).status()[0].reasons == ()
    (tmp_path / "raw" / "000000.txt").write_text("edited")
    (tmp_path / "raw" / "000003.txt").write_text("edited")
    assert reasons(counting_pipeline(tmp_path)) == ("the files of 'raw/*.txt' changed",)  # not 000001 "added"
