"""What the driver of prepare holds per raw file of a corpus of many small files: its list of the files, the
runner's names of them and the task plan. Measured in a process of its own, as a driver starts (under pytest,
what the test process allocated before skews tracemalloc's figures)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

CONFIG = """\
data: {{sources: [{{glob: "{raw}/**/*.txt"}}]}}
prepare: {{output_dir: out/prepared}}
tokenizer: {{output: out/tokenizer.json}}
encode: {{output_dir: out/shards}}
train: {{output_dir: out/checkpoints}}
"""
MEASURE = """\
import gc, sys, tracemalloc
from pipeline.config.files import load_config
from pipeline.data.sources import plan_partitions
from stages import prepare
config = load_config(sys.argv[1])
gc.collect()
tracemalloc.start()
start = tracemalloc.get_traced_memory()[0]
stage = prepare.build(config)
plan = plan_partitions(stage.run.args[1], config.prepare.partition_bytes)
gc.collect()
print(tracemalloc.get_traced_memory()[0] - start, sum(1 for partition in plan for _ in partition.pieces))
"""
ROOT = Path(__file__).resolve().parents[2]


def _held_per_plan(root: Path, files: int) -> int:
    """The bytes held once prepare's stage is built and its task plan made, over ``files`` raw files of a
    directory outside the project (which names them ``../raw-N/...``), in directories of 1,000."""
    raw, project = root / f"raw-{files}", root / f"project-{files}"
    for number in range(files):
        directory = raw / f"{number // 1000:03d}"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"{number:06d}.txt").write_text(f"document {number}\n")
    project.mkdir()
    (project / "config.yaml").write_text(CONFIG.format(raw=raw), "utf-8")
    held, pieces = subprocess.run([sys.executable, "-c", MEASURE, str(project / "config.yaml")], cwd=ROOT,
                                  check=True, capture_output=True, text=True).stdout.split()
    assert int(pieces) == files
    return int(held)


@pytest.mark.slow  # about 13 s: the plan of many raw files, measured
def test_the_driver_holds_few_bytes_per_raw_file(tmp_path):
    """A Path per match (its components interned) and a second name per file for the runner (``../raw/...``
    beside the glob's absolute path) made it some 460 bytes per file here, and a list of SourceFile with a
    Piece each in the plan some 410. In the file table and a plan of runs of whole files it is about 34 (the
    rest of the path after the prefix its source's files share, its end offset and kind, and its size in the
    plan); the figure measured here is about 87, some 50 of it a step of the interpreter's table of interned
    strings (grown once, by the Path that names each file's extension), which the difference of two sizes
    does not cancel."""
    fewer, more = _held_per_plan(tmp_path, 2_000), _held_per_plan(tmp_path, 20_000)
    per_file = (more - fewer) / 18_000
    assert per_file < 120, f"{per_file:.0f} bytes per file"


def test_the_runner_names_files_outside_the_project_as_before(tmp_path):
    """Renamed by their common prefix, the names are those of ``raw_dependency``, in the same sorted order."""
    from pipeline.engine.file_sets import Renamed, sorted_paths
    from stages.prepare import project_names, raw_dependency

    project = str(tmp_path / "project")
    paths = [str(tmp_path / "raw" / name) for name in ("b/x.txt", "a-b/x.txt", "a/x.txt", "é.txt")]
    names = project_names(paths, str(tmp_path / "raw"), project)
    assert isinstance(names, Renamed)
    assert list(names) == [raw_dependency(path, project) for path in paths] == [
        "../raw/b/x.txt", "../raw/a-b/x.txt", "../raw/a/x.txt", "../raw/é.txt"]
    assert list(sorted_paths(names)) == sorted(names)
    inside = [str(tmp_path / "project" / "raw" / "a.txt"), str(tmp_path / "up" / ".." / "b.txt")]
    for base, files in ((str(tmp_path), inside[:1]), (str(tmp_path / "up"), inside[1:])):
        assert list(project_names(files, base, project)) == [raw_dependency(path, project) for path in files]
