"""The `make` flow the README tells, end to end, in a fresh copy of the repository.

Each test copies the tracked files into a temp directory and drives the real
Makefile with the virtual environment running the tests (so nothing is
reinstalled), on the shipped corpus and the shipped default config.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.shards.format import ShardSet

REPO = Path(__file__).resolve().parents[2]
VENV = Path(sys.prefix)

pytestmark = [
    pytest.mark.slow,  # `make test-slow`, which CI runs too
    pytest.mark.skipif(
        shutil.which("make") is None or not (VENV / "bin" / "lmprep").exists(),
        reason="needs make and lmprep installed in the running virtual environment (run via `make test-slow`)",
    ),
]


def copy_tracked_files(destination: Path) -> Path:
    """A copy of the repository's tracked files: what a fresh clone holds."""
    listing = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for name in filter(None, listing.decode().split("\0")):
        (destination / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, destination / name)
    return destination


@pytest.fixture
def checkout(tmp_path) -> Path:
    return copy_tracked_files(tmp_path)


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> tuple[Path, str]:
    """A fresh copy after one `make`, and what that make printed; tests using it must not change it."""
    checkout = copy_tracked_files(tmp_path_factory.mktemp("made"))
    return checkout, make(checkout)


def make(checkout: Path, *targets: str) -> str:
    """Run make as a user would; ``-o`` keeps it from reinstalling into the shared venv."""
    command = ["make", f"VENV={VENV}", "-o", f"{VENV}/.installed", "-o", f"{VENV}/.installed-test", *targets]
    result = subprocess.run(command, cwd=checkout, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout + result.stderr


def lmprep(checkout: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(VENV / "bin" / "lmprep"), *args], cwd=checkout, capture_output=True, text=True)


def ran(output: str) -> list[str]:
    return re.findall(r"^running '(\w+)'", output, flags=re.MULTILINE)


def fingerprint(checkout: Path) -> str:
    return lmprep(checkout, "tokenizer", "fingerprint").stdout.strip()


def edit_config(checkout: Path, old: str, new: str) -> None:
    path = checkout / "configs" / "default.yaml"
    text = path.read_text("utf-8")
    assert old in text
    path.write_text(text.replace(old, new, 1), "utf-8")


def add_documents(checkout: Path, creature: str) -> None:
    with open(checkout / "data" / "raw" / "facts" / "facts.txt", "a", encoding="utf-8") as facts:
        facts.writelines(f"The quizzical {creature} number {i} yodels beside the jukebox.\n" for i in range(400))


STAGES = ["prepare", "tokenizer", "encode", "train", "export", "stats"]


def test_make_runs_every_stage_then_a_second_make_does_nothing(made):
    checkout, first = made
    assert ran(first) == STAGES
    assert first.count("lmprep run") == 1  # one process runs them all
    assert (checkout / "checkpoints" / "default" / "checkpoint.safetensors").is_file()
    assert (checkout / "data" / "shards" / "train.manifest.json").is_file()

    second = make(checkout, "prepare", "tokenize", "train")
    assert ran(second) == []
    assert "'train' is up to date" in second
    status = make(checkout, "status")
    assert all(f"{stage}: up to date" in status for stage in STAGES)


def shrink(checkout: Path) -> None:
    """The same project, smaller: the first fifth of each text file of the corpus, and a smaller model
    (``train.dim``, ``context``, ``batch_size``, ``eval_batches``); the steps and every other setting as
    shipped. The story below then runs in a fraction of the time and asserts what it asserted on the
    whole corpus."""
    for path in sorted((checkout / "data" / "raw").rglob("*.txt")):
        lines = path.read_text("utf-8").splitlines(keepends=True)
        path.write_text("".join(lines[: len(lines) // 5]), "utf-8")
    for old, new in (("dim: 64", "dim: 16"), ("context: 64", "context: 16"), ("batch_size: 32", "batch_size: 4"),
                     ("eval_batches: 8", "eval_batches: 1")):
        edit_config(checkout, old, new)


def test_retraining_story(checkout):
    shrink(checkout)
    make(checkout)
    old_fingerprint = fingerprint(checkout)

    # Only a train setting changes: only train re-runs, and it resumes.
    edit_config(checkout, "steps: 300", "steps: 350")
    output = make(checkout)
    assert ran(output) == ["train"]
    assert "param train.steps changed 300 → 350" in output and "resuming from step 300" in output

    # A raw file changes: every stage re-runs, the tokenizer's fingerprint changes,
    # the old checkpoint is set aside, and it refuses the new tokenizer.
    add_documents(checkout, "xylophone")
    output = make(checkout)
    assert ran(output) == STAGES
    new_fingerprint = fingerprint(checkout)
    assert new_fingerprint != old_fingerprint
    old_checkpoint = checkout / "checkpoints" / f"default-{old_fingerprint[:12]}" / "checkpoint.safetensors"
    assert old_checkpoint.is_file()
    check = lmprep(checkout, "check", str(old_checkpoint))
    assert check.returncode == 1
    assert old_fingerprint[:12] in check.stdout + check.stderr and new_fingerprint[:12] in check.stdout + check.stderr
    sample = lmprep(checkout, "sample", "--prompt", "Q:", "--checkpoint", str(old_checkpoint),
                    "--tokenizer", "data/tokenizer/tokenizer.json")
    assert sample.returncode == 2 and sample.stderr.startswith("error: ") and sample.stderr.count("\n") == 1
    own = lmprep(checkout, "sample", "--prompt", "Q:", "--checkpoint", str(old_checkpoint))  # its own tokenizer
    assert own.returncode == 0 and own.stdout.startswith("Q:"), own.stderr

    # Freeze the tokenizer, then change the data and raise train.steps: the tokenizer stage
    # stays put and training continues from the checkpoint (same fingerprint) up to train.steps.
    shutil.copy(checkout / "data" / "tokenizer" / "tokenizer.json", checkout / "frozen.json")
    edit_config(checkout, "path: null", "path: ../frozen.json")  # relative to configs/
    assert ran(make(checkout)) == ["tokenizer"]
    add_documents(checkout, "walrus")
    edit_config(checkout, "steps: 350", "steps: 400")
    output = make(checkout)
    assert ran(output) == ["prepare", "encode", "train", "export", "stats"]
    assert "the shards changed; continuing from step 350 to step 400 on the new shards" in output
    assert fingerprint(checkout) == new_fingerprint
    tokens = ShardSet.open(checkout / "data" / "shards", "train").num_tokens
    assert (checkout / "data" / "export" / "train.bin").stat().st_size == 2 * tokens  # the export followed

    # make clean: derived data goes, with no empty directory left; raw data and checkpoints stay.
    make(checkout, "clean")
    derived = ("prepared", "tokenizer", "shards", "export", "stats")
    assert not any((checkout / "data" / name).exists() for name in derived)
    assert (checkout / "checkpoints" / "default" / "checkpoint.safetensors").is_file()


def test_the_tiktoken_export_prints_code_that_runs(made):
    checkout, _ = made
    exported = lmprep(checkout, "tokenizer", "export", "data/tokenizer/tokenizer.json", "--format", "tiktoken",
                      "--out", "tok.tiktoken")
    assert exported.returncode == 0, exported.stderr
    check = exported.stdout + (
        "from pipeline.tokenizer import Tokenizer\n"
        "text = 'Q: What does the zebra eat? <|endoftext|>'\n"
        "assert encoding.encode_ordinary(text) == Tokenizer.load('data/tokenizer/tokenizer.json').encode(text)\n"
    )
    result = subprocess.run([str(VENV / "bin" / "python"), "-c", check], cwd=checkout, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
