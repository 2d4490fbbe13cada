"""The open chain: a user's own step and reader from the config alone, per-source chains, metadata kept through to
the kept parts, rejected/ and `lmprep locate`, and bad user code refused in one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import lmprep_in_cwd

from pipeline.data.documents import iter_records

STEP = '''\
from pipeline.data.record import Drop


def drop_boilerplate(document, *, words):
    """Drop documents that mention any of ``words``; tag the others with their length."""
    for word in words:
        if word in document.text:
            return Drop(f"mentions_{word}")
    document.metadata["length"] = len(document.text)
    return True
'''

CONFIG = """\
data:
  sources:
    - {{glob: "raw/*.txt", separator: blank_line, name: prose}}
    - {{glob: "raw/*.jsonl", name: code, metadata: [path, stars:int64]}}
prepare:
  output_dir: out/prepared
  val_fraction: 0.0
  partition_bytes: 300
  steps:
    - exact_dedup: {{}}
    - c4: {{min_sentences: 1, min_words_per_line: 2}}
      only: [prose]
    - custom:
        function: steps/my_filter.py:drop_boilerplate
        params: {{words: [boilerplate]}}
        metadata: [length:int64]
tokenizer: {{output: out/tokenizer.json, vocab_size: 300, min_frequency: 1}}
encode: {{output_dir: out/shards, shard_tokens: 200}}
state_dir: state
executor: {executor}
"""

PROSE = [f"Paragraph {i} is about the fox.\nshort\nIt ends with a full stop." for i in range(12)]
CODE = [{"text": f"def f{i}(x):\n    return x + {i}  # no stop\n", "path": f"pkg/m{i}.py", "stars": i}
        for i in range(12)]


@pytest.fixture
def project(tmp_path) -> Path:
    (tmp_path / "raw").mkdir()
    boilerplate = "Subscribe to our boilerplate newsletter. It goes on."
    (tmp_path / "raw" / "a.txt").write_text("\n\n".join([*PROSE, boilerplate]))
    (tmp_path / "raw" / "b.jsonl").write_text("".join(json.dumps(row) + "\n" for row in CODE))
    (tmp_path / "steps").mkdir()
    (tmp_path / "steps" / "my_filter.py").write_text(STEP)
    (tmp_path / "lmprep.yaml").write_text(CONFIG.format(executor="{kind: local, workers: 2}"))
    return tmp_path


def kept(project: Path) -> list[dict]:
    rows = []
    for part in sorted((project / "out/prepared/train").glob("part-*.arrow")):
        with pa.ipc.open_stream(pa.memory_map(str(part))) as reader:
            rows += reader.read_all().to_pylist()
    return rows


def tree(directory: Path) -> dict[str, bytes]:
    return {str(path.relative_to(directory)): path.read_bytes() for path in sorted(directory.rglob("*"))
            if path.is_file()}


def test_a_user_step_runs_from_the_config_and_each_source_gets_its_chain(project):
    result = lmprep_in_cwd("run", "prepare")
    assert result.exit_code == 0, result.output
    rows = kept(project)
    code = [row for row in rows if row["source"] == 1]
    assert [row["text"] for row in code] == [row["text"] for row in CODE]  # C4 left the code whole
    assert [(row["path"], row["stars"]) for row in code] == [(row["path"], row["stars"]) for row in CODE]
    prose = [row for row in rows if row["source"] == 0]
    assert prose and all("short" not in row["text"] for row in prose)  # C4 removed the one-word lines
    assert all(row["length"] == len(row["text"]) for row in rows)
    assert all(row["path"] == "" and row["stars"] == 0 for row in prose)  # the zero of another source's fields

    rejected = [dict(zip(("text", "source", "document", "step", "rule", "duplicate_of", "rewritten"), row[:7]))
                for part in sorted((project / "out/prepared/rejected").glob("*.arrow")) for row in iter_records(part)]
    dropped = next(row for row in rejected if row["step"] == "drop_boilerplate")
    assert dropped["rule"] == "mentions_boilerplate" and dropped["document"].startswith("raw/a.txt")
    stats = json.loads((project / "out/prepared/stats.json").read_text())
    prose_stats = next(source for source in stats["sources"] if "prose" in source["source"])
    assert prose_stats["dropped"]["drop_boilerplate/mentions_boilerplate"] == 1


def test_rejected_keeps_the_document_as_read_and_what_the_rewrite_left(project):
    filler = "Lorem ipsum is a filler text, it is said.\nbad"
    (project / "raw" / "a.txt").write_text("\n\n".join([*PROSE, filler, "Our boilerplate is here. It goes on."]))
    assert lmprep_in_cwd("run", "prepare").exit_code == 0
    rows = [row for part in sorted((project / "out/prepared/rejected").glob("*.arrow")) for row in iter_records(part)]
    text, _, _, step, rule, _, rewritten, *_ = next(row for row in rows if row[3] == "c4")
    assert (text, step, rule, rewritten) == (filler, "c4", "lorem_ipsum", "Lorem ipsum is a filler text, it is said.")
    unchanged = next(row for row in rows if row[3] == "drop_boilerplate")
    assert unchanged[6] == ""  # no step changed its text


def test_editing_the_step_reruns_prepare_and_status_names_the_file(project):
    assert lmprep_in_cwd("run", "prepare").exit_code == 0
    assert "up to date" in lmprep_in_cwd("status").output.splitlines()[0]
    (project / "steps" / "my_filter.py").write_text(STEP.replace("words:", "words, unused=None:"))
    status = lmprep_in_cwd("status").output
    assert "steps/my_filter.py" in status and "changed" in status, status


def test_a_user_step_gives_the_same_bytes_on_a_local_dask_cluster(project):
    assert lmprep_in_cwd("run", "prepare").exit_code == 0
    local = tree(project / "out/prepared")
    dask = CONFIG.format(executor="{kind: dask, address: local, workers: 2}")
    dask = dask.replace("out/prepared", "out/dask").replace("state_dir: state", "state_dir: dask")
    (project / "lmprep.yaml").write_text(dask)
    result = lmprep_in_cwd("run", "prepare")
    assert result.exit_code == 0, result.output
    assert tree(project / "out/dask") == local


def test_metadata_reaches_locate(project):
    assert lmprep_in_cwd("run", "prepare", "tokenizer", "encode").exit_code == 0
    rows = kept(project)
    row = next(index for index, row in enumerate(rows) if row["source"] == 1)
    output = lmprep_in_cwd("locate", "train", str(row), "--row").output
    assert "path: pkg/m0.py" in output and "stars: 0" in output, output


BAD_STEPS = {
    "import error": ("import os\n\nimport no_such_module\n", "importing steps/my_filter.py failed (line 3)",
                     "ModuleNotFoundError"),
    "not a function": ("drop_boilerplate = 5\n", "'drop_boilerplate' in steps/my_filter.py is int 5, not a function"),
    "missing function": ("def other(document):\n    return True\n", "has no function 'drop_boilerplate'", "other"),
    "wrong return type": ("def drop_boilerplate(document, words):\n    return [1]\n", "returned list", "raw/"),
    "exception on one document": ("def drop_boilerplate(document, words):\n"
                                  "    if 'Paragraph 3 ' in document.text:\n        raise ValueError('bad doc')\n"
                                  "    return True\n", "raised ValueError: bad doc on document raw/a.txt", ""),
    "undeclared metadata": ("def drop_boilerplate(document, words):\n    document.metadata['x'] = 1\n"
                            "    return True\n", "without declaring it; add it to the step's metadata: [x:int64]"),
}


@pytest.mark.parametrize("case", BAD_STEPS)
def test_a_bad_user_step_is_one_line_exit_2_and_writes_nothing(project, case):
    source, *expected = BAD_STEPS[case]
    (project / "steps" / "my_filter.py").write_text(source)
    result = subprocess.run([sys.executable, "-m", "stages", "run", "prepare", "--config", "lmprep.yaml"],
                            capture_output=True, text=True, cwd=project)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert "Traceback" not in result.stderr and len(lines) == 1, result.stderr
    assert all(part in lines[0] for part in expected), lines[0]
    assert not (project / "out" / "prepared").exists()


def test_a_user_reader_gives_documents_with_metadata(project):
    (project / "readers").mkdir()
    (project / "readers" / "csv_reader.py").write_text(
        "import csv, io\n\n\ndef read_rows(stream, path):\n"
        "    for row in csv.DictReader(io.TextIOWrapper(stream, encoding='utf-8')):\n"
        "        yield row['body'], {'title': row['title']}\n")
    (project / "raw" / "c.csv").write_text("title,body\nfirst,The first body.\nsecond,The second body.\n")
    (project / "lmprep.yaml").write_text(
        "data:\n  sources:\n    - {glob: 'raw/*.csv', reader: 'readers/csv_reader.py:read_rows', metadata: [title]}\n"
        "prepare: {output_dir: out/prepared, val_fraction: 0.0}\nstate_dir: state\n")
    result = lmprep_in_cwd("run", "prepare")
    assert result.exit_code == 0, result.output
    assert [(row["text"], row["title"]) for row in kept(project)] == [("The first body.", "first"),
                                                                     ("The second body.", "second")]


def test_a_step_file_that_does_not_exist_is_named_before_anything_runs(project):
    (project / "steps" / "my_filter.py").unlink()
    result = lmprep_in_cwd("status")
    assert result.exit_code == 2
    assert "prepare.steps[2].custom.function: steps/my_filter.py (from 'steps/my_filter.py:drop_boilerplate') " \
           "does not exist" in result.output, result.output


def test_a_worker_refuses_another_version_of_the_file_than_the_driver_hashed(tmp_path):
    from pipeline.data.user_code import resolve
    from pipeline.errors import DataError

    (tmp_path / "step.py").write_text("def keep(document):\n    return True\n")
    code = resolve("step.py:keep", root=str(tmp_path), key="prepare.steps[0].custom.function")
    assert code.load()(None) is True
    (tmp_path / "step.py").write_text("def keep(document):\n    return False\n")  # edited after the run started
    with pytest.raises(DataError, match="this worker sees another .*step.py than the run started with"):
        code.load()


def test_a_run_after_the_step_file_changed_takes_no_partition_the_old_code_finished(project):
    """A failed run's finished partitions were made by the step as it was: with the file edited since, none is
    reused, and the output is that of a run from scratch."""
    (project / "steps" / "my_filter.py").write_text(STEP + "\n\ndef failing(document, *, words):\n"
                                                    "    if 'Paragraph 11 ' in document.text:\n"
                                                    "        raise ValueError('not yet')\n    return True\n")
    (project / "lmprep.yaml").write_text((project / "lmprep.yaml").read_text().replace(":drop_boilerplate", ":failing"))
    assert lmprep_in_cwd("run", "prepare").exit_code == 2
    assert list((project / "out" / "prepared.partial").glob("*.done.json"))  # partitions the failed run finished
    (project / "steps" / "my_filter.py").write_text(STEP + "\n\ndef failing(document, *, words):\n"
                                                    "    return 'Paragraph 1 ' not in document.text\n")
    result = lmprep_in_cwd("run", "prepare")
    assert result.exit_code == 0 and "reusing" not in result.output, result.output
    edited = tree(project / "out" / "prepared")
    assert lmprep_in_cwd("run", "prepare", "--force").exit_code == 0
    assert tree(project / "out" / "prepared") == edited
    assert not any("Paragraph 1 is" in row["text"] for row in kept(project))
