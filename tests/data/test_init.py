"""``lmprep init``: the new user's path, end to end, from another working directory than the project."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipeline.config import load_config
from pipeline.tokenizer import Tokenizer
from stages.cli.main import cli

LMPREP = Path(sys.executable).with_name("lmprep")


@pytest.fixture
def raw(tmp_path) -> Path:
    """A folder of the user's own text: paragraphs in a .txt.gz, records in a .jsonl."""
    folder = tmp_path / "mytext"
    folder.mkdir()
    with gzip.open(folder / "qa.txt.gz", "wt", encoding="utf-8") as handle:
        handle.write("\n\n".join(f"Q: what is {i}?\nA: it is {i}, a number." for i in range(150)))
    with open(folder / "notes.jsonl", "w", encoding="utf-8") as handle:
        for i in range(150):
            handle.write(json.dumps({"id": i, "body": f"The walrus number {i} sat on the ice and sang."}) + "\n")
    return folder


def lmprep(*args) -> object:
    return CliRunner().invoke(cli, [str(arg) for arg in args])


def test_the_new_user_path_end_to_end(tmp_path, raw, monkeypatch):
    monkeypatch.chdir(tmp_path)
    made = lmprep("init", "project", "--from", "mytext")
    assert made.exit_code == 0, made.output
    project = tmp_path / "project"
    config_text = (project / "config.yaml").read_text("utf-8")
    assert "separator: blank_line" in config_text and 'field: "body"' in config_text
    assert "# field body: the longest texts of the string fields in the first 50 lines: body (" in config_text
    assert (project / ".gitignore").read_text() .endswith("out/\n")
    config = load_config(project / "config.yaml")
    assert {source.glob for source in config.data.sources} == {"../mytext/**/*.txt.gz", "../mytext/**/*.jsonl"}

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    first = lmprep("run", "--config", project / "config.yaml")
    assert first.exit_code == 0, first.output
    assert "kept 300 documents" in first.output
    assert (project / "out" / "checkpoints" / "default" / "checkpoint.safetensors").is_file()
    again = subprocess.run(["make", "-f", project / "Makefile", f"LMPREP={LMPREP}"], capture_output=True,
                           text=True, cwd=elsewhere)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "running" not in again.stdout and "'train' is up to date" in again.stdout
    sampled = lmprep("sample", "--config", project / "config.yaml", "--prompt", "Q: what is", "--max-tokens", 5)
    assert sampled.exit_code == 0 and sampled.output.startswith("Q: what is"), sampled.output

    monkeypatch.chdir(project / "out")  # inside the project, plain commands find its config.yaml and say so
    for command in (["status"], ["run"], ["sample", "--prompt", "Q: what is", "--max-tokens", 5]):
        found = lmprep(*command)
        assert found.exit_code == 0 and found.stderr == "using config ../config.yaml\n", found.output
    assert "train: up to date" in lmprep("status").stdout and found.stdout.startswith("Q: what is")
    monkeypatch.chdir(elsewhere)

    (project / "char.yaml").write_text("extends: config.yaml\noutput_root: out/char\n"
                                       "tokenizer: {kind: char, vocab_size: 60}\ntrain: {steps: 20}\n")
    variant = lmprep("run", "--config", project / "char.yaml")
    assert variant.exit_code == 0, variant.output
    assert Tokenizer.load(project / "out" / "char" / "tokenizer" / "tokenizer.json").kind == "char"
    assert (project / "out" / "char" / "checkpoints" / "default" / "tokenizer.json").is_file()
    assert "'train' is up to date" in lmprep("run", "--config", project / "config.yaml").output  # untouched


@pytest.mark.parametrize("arguments, message", [
    (("init", "p", "--from", "nothing/*.txt"), "error: --from 'nothing/*.txt' matches no files"),
    (("init", "p", "--from", "mytext/*"), "cannot tell the format of"),
])
def test_init_errors_are_one_line(tmp_path, raw, monkeypatch, arguments, message):
    monkeypatch.chdir(tmp_path)
    (raw / "logo.png").write_bytes(b"\x89PNG not text to train on")
    result = lmprep(*arguments)
    assert result.exit_code == 2 and message in result.output and result.output.count("\n") == 1


def test_init_never_writes_over_a_config(tmp_path, raw, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert lmprep("init", "p", "--from", "mytext").exit_code == 0
    (tmp_path / "p" / "config.yaml").write_text("# mine\n")
    again = lmprep("init", "p", "--from", "mytext")
    assert again.exit_code == 2 and "p/config.yaml already exists" in again.output
    assert (tmp_path / "p" / "config.yaml").read_text() == "# mine\n"


def test_init_takes_the_column_with_the_longest_texts_and_lists_the_others(tmp_path, monkeypatch):
    """A wrong column guess once trained a model on 193 file names: the text is where the characters are."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    monkeypatch.chdir(tmp_path)
    (tmp_path / "code").mkdir()
    sources = [f"def f{i}(x):\n    return x * {i}\n" * 5 for i in range(20)]
    pq.write_table(pa.table({"name": [f"f{i}.py" for i in range(20)], "content": sources, "size": list(range(20))}),
                   tmp_path / "code" / "files.parquet")
    (tmp_path / "code" / "README.md").write_text("# Notes\n\nSome prose about the code.\n\nAnd more.\n")
    assert lmprep("init", "p", "--from", "code").exit_code == 0
    config_text = (tmp_path / "p" / "config.yaml").read_text("utf-8")
    assert 'field: "content"' in config_text
    assert (f"the longest texts of the string columns in the first 1,000 rows of files.parquet: "
            f"content ({sum(map(len, sources)):,} characters), name (") in config_text
    config = load_config(tmp_path / "p" / "config.yaml")
    assert {source.glob for source in config.data.sources} == {"../code/**/*.parquet", "../code/**/*.md"}
    assert next(s for s in config.data.sources if s.glob.endswith(".md")).separator == "document"
    assert "# separator document: a .md file is one document (source code, markup)" in config_text


def test_init_guesses_the_separator_from_many_files_and_says_which_disagree(tmp_path, monkeypatch):
    """One guess for 1,829 files from the first file alone: here the first is a list of lines, most are prose."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "books").mkdir()
    (tmp_path / "books" / "a-index.txt").write_text("".join(f"entry {i}\n" for i in range(30)))
    for name in "bcde":
        (tmp_path / "books" / f"{name}.txt").write_text("\n\n".join(f"Para {i}.\nIts next line." for i in range(9)))
    result = CliRunner().invoke(cli, ["init", "p", "--from", "books/*.txt"])
    assert result.exit_code == 0, result.output
    doubt = "not line in a-index.txt: check them, or give each kind its own --from"
    assert result.stderr == f"warning: data.sources[0] books/*.txt: separator blank_line, but {doubt}\n"
    config_text = (tmp_path / "p" / "config.yaml").read_text("utf-8")
    assert "separator: blank_line" in config_text
    assert ("# separator blank_line: 8 blank lines among the first 26 lines in b.txt; so do 4 of the 5 files "
            f"sampled, but {doubt}\n") in config_text
