"""Outputs that overlap inputs or other work are refused before anything runs, and nothing is deleted;
two configs of one project run at once.

Through click's CliRunner, in a temporary project laid out like the repository
(``data/raw/``, ``configs/default.yaml``, ``checkpoints/``) and trained once.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipeline.config import frozen
from stages.cli.main import cli

CONFIG = """\
data:
  sources:
    - {glob: "../data/raw/qa/**/*.txt*", separator: blank_line}
    - {glob: "../data/raw/facts/**/*.txt*", separator: line}
output_root: ..
prepare: {output_dir: data/prepared, val_fraction: 0.2}
tokenizer: {output: data/tokenizer/tokenizer.json, vocab_size: 300, workers: 1}
encode: {output_dir: data/shards, workers: 1}
train: {output_dir: checkpoints/default, steps: 2, eval_every: 1, eval_batches: 1, batch_size: 2, context: 8, dim: 8}
state_dir: .lmprep
"""
CHAR_CONFIG = (CONFIG.replace("data/prepared", "data/char/prepared").replace("data/tokenizer/", "data/char/")
               .replace("data/shards", "data/char/shards").replace("checkpoints/default", "checkpoints/char")
               .replace("state_dir: .lmprep", "state_dir: .lmprep/char")
               .replace("vocab_size: 300", "kind: char, vocab_size: 100"))
SET_ASIDE = "checkpoints/default-0123456789ab"
REPO = Path(__file__).resolve().parents[2]


def lmprep(*args: str):
    return CliRunner().invoke(cli, list(args))


def make_project(root: Path) -> Path:
    (root / "data" / "raw" / "qa").mkdir(parents=True)
    (root / "data" / "raw" / "facts").mkdir()
    qa = "\n\n".join(f"Q: what is {i}?\nA: it is {i}." for i in range(40))
    (root / "data" / "raw" / "qa" / "a.txt").write_text(qa)
    (root / "data" / "raw" / "facts" / "f.txt").write_text("\n".join(f"Fact {i} is true." for i in range(40)))
    (root / "configs").mkdir()
    (root / "configs" / "default.yaml").write_text(CONFIG)
    return root


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A project after `lmprep run`, with a checkpoint set aside beside the current one."""
    root = make_project(tmp_path_factory.mktemp("trained"))
    previous = os.getcwd()
    os.chdir(root)
    try:
        result = lmprep("run")
    finally:
        os.chdir(previous)
    assert result.exit_code == 0, result.output
    shutil.copytree(root / "checkpoints" / "default", root / SET_ASIDE)
    return root


@pytest.fixture
def project(trained, tmp_path, monkeypatch) -> Path:
    root = tmp_path / "project"
    shutil.copytree(trained, root, symlinks=True)
    monkeypatch.chdir(root)
    return root


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file's bytes, but the run lock's pid, the hash cache (inodes change on copy) and the memo of the
    tokenizer files' settings, which any command that reads a config naming a tokenizer file may write."""
    skipped = {".lmprep/run.lock", ".lmprep/hashes.json", f".lmprep/{frozen.MEMO}"}
    return {rel: (root / rel).read_bytes()
            for rel in (str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) if rel not in skipped}


def refused(project: Path, *args: str) -> str:
    """Run ``lmprep args``; check it failed with one line and left every file as it was; return the line."""
    before = snapshot(project)
    result = lmprep(*args)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1 and result.stdout == ""
    assert snapshot(project) == before
    return result.stderr


PREPARED_OVER_RAW = ("error: prepare.output_dir 'data' contains the directory data.sources[0].glob 'data/raw/qa' "
                     "that stage 'prepare' scans; lmprep replaces an output as a whole")
NOT_TRAINS = "already exists and is not what stage 'train' wrote (according to .lmprep/outputs.json)"


@pytest.mark.parametrize(
    "args, message",
    [
        (("run", "prepare", "--set", "prepare.output_dir=data"), PREPARED_OVER_RAW),
        (("run", "--set", "train.output_dir=data/raw"),
         "error: train.output_dir 'data/raw' contains the directory data.sources[0].glob 'data/raw/qa'"),
        (("run", "--set", "train.output_dir=checkpoints"), f"error: train.output_dir 'checkpoints' {NOT_TRAINS}"),
        (("run", "train", "--set", f"train.output_dir={SET_ASIDE}"),
         f"error: train.output_dir '{SET_ASIDE}' {NOT_TRAINS}"),
        (("clean", "--checkpoints", "--set", "train.output_dir=checkpoints"),
         f"error: train.output_dir 'checkpoints' {NOT_TRAINS}"),
        (("clean", "--set", "prepare.output_dir=data"), PREPARED_OVER_RAW),
        (("status", "--set", "prepare.output_dir=data"), PREPARED_OVER_RAW),
    ],
)
def test_outputs_over_raw_data_or_checkpoints_are_refused_and_nothing_is_deleted(project, args, message):
    assert refused(project, *args).startswith(message)


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("prepare.output_dir", ".", "prepare.output_dir '.' is the same path as the project root '.'"),
        ("train.output_dir", "..", "train.output_dir '..' contains the project root '.'"),
        ("encode.output_dir", ".lmprep/shards",
         "encode.output_dir '.lmprep/shards' lies inside the state dir '.lmprep'"),
        ("train.output_dir", "configs", "train.output_dir 'configs' contains the config file 'configs/default.yaml'"),
        ("tokenizer.output", "configs/default.yaml",
         "tokenizer.output 'configs/default.yaml' is the same path as the config file 'configs/default.yaml'"),
        ("tokenizer.output", "data/prepared/tokenizer.json",
         "prepare.output_dir 'data/prepared' contains tokenizer.output 'data/prepared/tokenizer.json'"),
        ("train.output_dir", "data/shards/model", "encode.output_dir 'data/shards' contains train.output_dir"),
        ("encode.output_dir", "data/raw/qa/shards", "encode.output_dir 'data/raw/qa/shards' lies inside the directory"),
        ("encode.output_dir", "data/tokenizer",
         "tokenizer.output 'data/tokenizer/tokenizer.json' lies inside encode.output_dir 'data/tokenizer'"),
        ("tokenizer.path", "data/tokenizer/tokenizer.json", "tokenizer.output 'data/tokenizer/tokenizer.json' "
         "is the same path as the input 'data/tokenizer/tokenizer.json' of stage 'tokenizer'"),
    ],
)
def test_every_kind_of_overlap_names_the_key_and_both_paths(project, key, value, message):
    assert refused(project, "run", "--set", f"{key}={value}").startswith(f"error: {message}")


def test_a_directory_of_other_files_is_not_replaced(project):
    (project / "notes").mkdir()
    (project / "notes" / "todo.txt").write_text("keep me")
    line = refused(project, "run", "--set", "encode.output_dir=notes")
    assert line.startswith("error: encode.output_dir 'notes' already exists and is not what stage 'encode' wrote")


def test_a_new_or_empty_output_path_is_taken_and_then_owned(project):
    (project / "elsewhere").mkdir()
    result = lmprep("run", "train", "--set", "train.output_dir=elsewhere")
    assert result.exit_code == 0, result.output
    assert (project / "elsewhere" / "checkpoint.safetensors").exists()
    again = lmprep("run", "train", "--force", "--set", "train.output_dir=elsewhere", "--set", "train.steps=3")
    assert again.exit_code == 0, again.output
    assert (project / "checkpoints" / "default" / "checkpoint.safetensors").exists()
    assert (project / SET_ASIDE / "checkpoint.safetensors").exists()


def test_two_configs_run_at_once(project):
    """The char config runs from start to end while the default one is training; both succeed."""
    (project / "configs" / "char.yaml").write_text(CHAR_CONFIG)
    pause_training = textwrap.dedent("""
        import sys
        from pipeline.model import training
        from stages.cli.main import cli

        real_plot_losses = training._plot_losses

        def plot_losses(path, metrics):  # the checkpoint is in the staging directory by now
            print("training", flush=True)
            sys.stdin.readline()
            real_plot_losses(path, metrics)

        training._plot_losses = plot_losses
        cli(["run", "--set", "train.steps=4"])
    """)
    default = subprocess.Popen([sys.executable, "-c", pause_training], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert "training\n" in iter(default.stdout.readline, "")  # the default config's run is training
        char = lmprep("run", "--config", "configs/char.yaml")
    finally:
        out, err = default.communicate("go\n")
    assert char.exit_code == 0, char.output
    assert default.returncode == 0, err
    assert (project / "checkpoints" / "char" / "checkpoint.safetensors").exists()
    assert (project / "checkpoints" / "default" / "checkpoint.safetensors").exists()
    assert sorted(os.listdir(project / "checkpoints")) == ["char", "default", SET_ASIDE.split("/")[1]]


@pytest.mark.parametrize("value", ["emptydir", "newdir/"])
def test_a_file_output_given_as_a_directory_is_one_line_naming_it(project, value):
    (project / "emptydir").mkdir()
    tokenizer_before = (project / "data" / "tokenizer" / "tokenizer.json").read_bytes()
    result = lmprep("run", "tokenizer", "--set", f"tokenizer.output={value}")
    assert result.exit_code == 2, result.output
    assert result.stderr == f"error: {value}: is a directory\n"
    assert (project / "data" / "tokenizer" / "tokenizer.json").read_bytes() == tokenizer_before
    assert not (project / "newdir").exists() and list((project / "emptydir").iterdir()) == []


@pytest.mark.parametrize(
    "setting, message",
    [
        ("output_root=data/raw/qa", "the project root 'data/raw/qa' is the same path as the directory "
                                       "data.sources[0].glob '.' that stage 'prepare' scans for raw files"),
        ("output_root=data/raw/facts/out", "the project root 'data/raw/facts/out' lies inside the directory "
                                              "data.sources[1].glob '..' that stage 'prepare' scans"),
        ("state_dir=data/raw/qa", "the state dir 'data/raw/qa' is the same path as the directory "
                                  "data.sources[0].glob 'data/raw/qa' that stage 'prepare' scans"),
        ("state_dir=data/raw/facts/state", "the state dir 'data/raw/facts/state' lies inside the directory "
                                           "data.sources[1].glob 'data/raw/facts'"),
    ],
)
def test_a_project_root_or_state_dir_among_the_raw_files_is_refused_before_anything_is_created(project, setting,
                                                                                             message):
    for command in ("run", "status", "clean"):
        line = refused(project, command, "--set", setting)
        assert line.startswith(f"error: {message}") and "keep output_root and state_dir outside" in line, line


@pytest.mark.parametrize(
    "setting, message",
    [
        ("state_dir=configs/default.yaml", "the state dir 'configs/default.yaml' is not a directory"),
        ("output_root=configs/default.yaml", "the project root 'configs/default.yaml' is not a directory"),
        ("state_dir=/dev/null", "the state dir '/dev/null' is not a directory"),
        ("output_root=/dev/null", "the project root '/dev/null' is not a directory"),
        ("state_dir=/proc/self", "the state dir cannot hold the run lock /proc/self/run.lock: no such file"),
    ],
)
def test_a_state_dir_or_project_root_that_is_a_file_or_a_device_is_one_line(project, setting, message):
    if setting.endswith("/proc/self") and not os.path.isdir("/proc/self"):
        pytest.skip("no /proc")
    assert refused(project, "run", "--set", setting).startswith(f"error: {message}")
