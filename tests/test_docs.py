"""What README.md and docs/*.md show is what lmprep does: their sessions and snippets are run and compared.

- A fenced block tagged ``console`` is a session. Each line starting with ``$ `` is a command, run by bash
  (with ``lmprep`` and ``python`` on the PATH) in a copy of the shipped project (the tracked ``configs/`` and
  ``data/raw/``) after one ``lmprep run``; the lines up to the next command are what it prints (stdout and
  stderr together), compared exactly (trailing spaces aside). ``…`` stands for any text within a line, and a
  line holding only ``…`` for any number of lines. The commands of one block share one copy; every block gets
  its own.
  A block tagged ``console fresh`` starts before that run: its first command is ``lmprep run``, compared
  with the run the other blocks start from (so the whole pipeline runs once for all of them).
- A fenced block tagged ``python`` runs in such a copy too; a line ``expression  # literal`` asserts that the
  expression equals the literal. A block whose tag is followed by a test file's path
  (```` ```python tests/x/test_y.py ````) is run by that test instead, which must name the document.
- A path of the repository in backquotes (```pipeline/engine/atomic.py```) must exist, and
  ```path::name``` must define ``name`` there, so that the docs cannot name a module or function that moved.

Blocks that are not run are tagged ``text`` or ``yaml``.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
ANY = "…"
FENCE = re.compile(r"^( *)```([\w-]*)(?: +(\S+))?\n(.*?)^\1```$", flags=re.MULTILINE | re.DOTALL)
REPO_PATH = re.compile(r"`((?:pipeline|stages|tests|benchmarks|configs)/[\w./-]*?)(?:::([\w.]+))?`")


@dataclass(frozen=True)
class Block:
    document: Path
    line: int
    tag: str
    option: str | None  # console: "fresh"; python: the test that runs it, when not this one
    body: str

    @property
    def name(self) -> str:
        return f"{self.document.relative_to(REPO)}:{self.line}"


def fenced_blocks(document: Path) -> list[Block]:
    """The fenced blocks of a document, those indented in a list item too (their indent removed)."""
    text = document.read_text("utf-8")
    return [Block(document, text.count("\n", 0, match.start()) + 1, tag, option, unindented(body, len(indent)))
            for match in FENCE.finditer(text) for indent, tag, option, body in [match.groups()]]


def unindented(body: str, indent: int) -> str:
    return "".join(line[indent:] for line in body.splitlines(keepends=True))


BLOCKS = [block for document in DOCUMENTS for block in fenced_blocks(document)]
SESSIONS = [block for block in BLOCKS if block.tag == "console"]
SNIPPETS = [block for block in BLOCKS if block.tag == "python"]


def session_steps(body: str) -> list[tuple[str, list[str]]]:
    """A console block as (command, expected output lines) pairs."""
    steps: list[tuple[str, list[str]]] = []
    for line in body.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif steps:
            steps[-1][1].append(line)
        else:
            raise AssertionError(f"output before the first command: {line!r}")
    return steps


def output_pattern(expected: list[str]) -> re.Pattern:
    """The expected lines as a regular expression, with ``…`` as the placeholder."""
    parts = []
    for line in expected:
        if line == ANY:
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append(".*?".join(re.escape(piece) for piece in line.rstrip().split(ANY)) + r"\n")
    return re.compile("".join(parts))


def normalized(output: str) -> str:
    return "".join(line.rstrip() + "\n" for line in output.splitlines())


# --- the project the blocks run in


def copy_shipped_project(destination: Path) -> Path:
    """The tracked configs and raw data, as a fresh clone holds them."""
    listing = subprocess.run(["git", "ls-files", "-z", "configs", "data/raw"], cwd=REPO, capture_output=True,
                             check=True).stdout
    for name in filter(None, listing.decode().split("\0")):
        (destination / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, destination / name)
    return destination


@pytest.fixture(scope="module")
def environment(tmp_path_factory) -> dict[str, str]:
    """``lmprep`` and ``python`` on the PATH, running this checkout's code with the interpreter running the tests."""
    bin_dir = tmp_path_factory.mktemp("bin")
    for name, command in (("lmprep", f'"{sys.executable}" -m stages'), ("python", f'"{sys.executable}"')):
        shim = bin_dir / name
        shim.write_text(f'#!/bin/sh\nexec {command} "$@"\n')
        shim.chmod(0o755)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("LMPREP", "PYTHON"))}
    # No session shows a progress line (one every 10 s by default): however slow the machine, none appears.
    env.update(LMPREP_PROGRESS_SECONDS="inf")
    env.update(PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1",
               LC_ALL="C.UTF-8", MPLBACKEND="Agg", MPLCONFIGDIR=str(bin_dir / "matplotlib"),
               HF_HOME=str(bin_dir / "huggingface"), HF_HUB_OFFLINE="1")
    # matplotlib builds its font cache on first use and says so when that takes over 5 s (a busy machine):
    # built here first, so that no session prints it.
    subprocess.run([sys.executable, "-c", "import matplotlib.font_manager"], env=env, capture_output=True, check=True)
    return env


FIRST_RUN = "lmprep run"


@pytest.fixture(scope="module")
def made(tmp_path_factory, environment) -> tuple[Path, str]:
    """The shipped project after one ``lmprep run``, and what it printed; blocks run in copies of it."""
    project = copy_shipped_project(tmp_path_factory.mktemp("made"))
    result = shell(FIRST_RUN, project, environment)
    assert result.returncode == 0, result.stdout
    return project, normalized(result.stdout)


@pytest.fixture
def project(made, tmp_path) -> Path:
    return Path(shutil.copytree(made[0], tmp_path / "project", symlinks=True))


def shell(command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=300)


# --- the blocks


@pytest.mark.parametrize("block", SESSIONS, ids=lambda block: block.name)
def test_session_prints_what_the_docs_show(block, made, project, environment):
    steps = session_steps(block.body)
    if block.option == "fresh":
        (command, expected), *steps = steps
        assert command == FIRST_RUN, f"{block.name}: a fresh session starts with $ {FIRST_RUN}"
        assert output_pattern(expected).fullmatch(made[1]), f"{block.name}: $ {command}\n{made[1]}"
    else:
        assert block.option is None, f"{block.name}: unknown option {block.option!r}"
    for command, expected in steps:
        output = normalized(shell(command, project, environment).stdout)
        assert output_pattern(expected).fullmatch(output), f"{block.name}: $ {command}\n{output}"


def with_checked_comments(snippet: str) -> str:
    """A snippet whose ``expression  # literal`` lines become assertions that the expression equals it."""
    lines = []
    for line in snippet.splitlines():
        code, _, comment = line.partition("  # ")
        try:
            expected = ast.literal_eval(comment.strip())
            is_expression = isinstance(ast.parse(code.strip()).body[0], ast.Expr)
        except (SyntaxError, ValueError, IndexError):
            lines.append(line)
            continue
        lines.append(f"assert ({code.strip()}) == {expected!r}, {code.strip()!r}" if is_expression else line)
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("block", [b for b in SNIPPETS if b.option is None], ids=lambda block: block.name)
def test_snippet_runs_on_the_outputs_of_the_pipeline(block, project, environment):
    result = subprocess.run([sys.executable, "-c", with_checked_comments(block.body)], cwd=project, env=environment,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"{block.name}\n{result.stderr}"


@pytest.mark.parametrize("block", [b for b in SNIPPETS if b.option is not None], ids=lambda block: block.name)
def test_a_snippet_run_elsewhere_is_run_by_the_test_it_names(block):
    runner = REPO / block.option
    assert runner.is_file(), f"{block.name} names {block.option}, which does not exist"
    assert block.document.name in runner.read_text("utf-8"), f"{block.option} does not read {block.name}"


def test_every_block_says_whether_it_is_run():
    """An untagged block would be neither run nor marked as illustrative."""
    untagged = [block.name for block in BLOCKS if block.tag not in ("console", "python", "text", "yaml")]
    assert untagged == [], "tag these blocks console, python, text or yaml"


def test_the_docs_show_sessions_and_snippets():
    """The extraction itself: a broken fence pattern would silently check nothing."""
    assert len(SESSIONS) >= 5 and len(SNIPPETS) >= 3
    assert all(session_steps(block.body) for block in SESSIONS)


def test_the_placeholder_stands_for_text_and_lines():
    pattern = output_pattern(["train: 266 … tokens/s", ANY, "done"])
    assert pattern.fullmatch("train: 266 12,345 tokens/s\na\nb\ndone\n")
    assert pattern.fullmatch("train: 266 1 tokens/s\ndone\n")
    assert not pattern.fullmatch("train: 266 1 tokens/s\ndone\nmore\n")
    assert not output_pattern(["exact"]).fullmatch("exactly\n")


def defines(path: Path, dotted: str) -> bool:
    """Whether every part of ``dotted`` (``Class.method``) is a function, class or assignment in ``path``."""
    tree = ast.parse(path.read_text("utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(target.id for target in targets if isinstance(target, ast.Name))
    return all(part in names for part in dotted.split("."))


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda document: document.name)
def test_the_paths_and_names_the_docs_give_exist(document):
    missing = []
    for path, name in REPO_PATH.findall(document.read_text("utf-8")):
        if not (REPO / path).exists():
            missing.append(path)
        elif name and not defines(REPO / path, name):
            missing.append(f"{path}::{name}")
    assert missing == [], f"{document.name} names what the tree does not hold"


LINK = re.compile(r"\]\(([^)\s]*)\)")


def heading_anchors(document: Path) -> set[str]:
    """The anchors GitHub gives a document's headings: lower case, punctuation dropped, spaces as hyphens."""
    text = FENCE.sub("", document.read_text("utf-8"))
    headings = re.findall(r"^#+ (.*)$", text, flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda document: document.name)
def test_the_links_between_the_docs_lead_somewhere(document):
    broken = []
    for target in LINK.findall(FENCE.sub("", document.read_text("utf-8"))):
        if "://" in target:
            continue
        path, _, anchor = target.partition("#")
        linked = (document.parent / path).resolve() if path else document
        if not linked.exists() or (anchor and anchor not in heading_anchors(linked)):
            broken.append(target)
    assert broken == [], f"{document.name} links to what does not exist"
