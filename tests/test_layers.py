"""The library's layers: every import in ``pipeline/`` points down the stack its package docstring states.

Read from the source (the AST), so a lazy import inside a function counts as much as one at the top.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ROOT / "pipeline"

# Each room of the library and the rooms it may import, bottom to top. A room may import itself.
ALLOWED = {
    "pipeline.errors": set(),
    "pipeline.engine": {"pipeline.errors"},
    "pipeline.tokenizer": {"pipeline.errors", "pipeline.engine.atomic", "pipeline.engine.locations",
                           "pipeline.engine.storage", "pipeline.engine.hashing", "pipeline.engine.pool",
                           "pipeline.engine.progress"},
    "pipeline.config": {"pipeline.errors", "pipeline.engine", "pipeline.tokenizer"},
    "pipeline.data": {"pipeline.errors", "pipeline.engine", "pipeline.tokenizer", "pipeline.config"},
    "pipeline.shards": {"pipeline.errors", "pipeline.engine", "pipeline.tokenizer", "pipeline.config",
                        "pipeline.data"},
    "pipeline.model": {"pipeline.errors", "pipeline.engine", "pipeline.tokenizer", "pipeline.config",
                       "pipeline.data", "pipeline.shards"},
    # the report reads every stage's outputs, but training's only as JSON: never the model's room (torch)
    "pipeline.report": {"pipeline.errors", "pipeline.engine", "pipeline.tokenizer", "pipeline.config",
                        "pipeline.data", "pipeline.shards"},
}
# torch is heavy: only the model and the torch dataset import it, so the other commands never pay for it.
TORCH_MODULES = ("pipeline.model", "pipeline.shards.torch_dataset")
FOREIGN = ("stages", "click")  # the library never knows its application or its CLI
# The one import upward, lazy and narrow: prepare's steps and their settings are registered beside their code in the
# data layer (one module and one line each), and the config's validation reads that table to check prepare.steps.
UPWARD = {("pipeline.config.validate", "pipeline.data.registry")}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(dotted: str) -> bool:
    relative = Path(*dotted.split("."))
    return (ROOT / relative).with_suffix(".py").is_file() or (ROOT / relative / "__init__.py").is_file()


def imported_names(path: Path) -> list[str]:
    """Every module ``path`` imports, by its full dotted name: ``from a import b`` imports ``a.b`` where that
    is a module, and ``a`` where ``b`` is a name in it."""
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                names.append(submodule if is_module(submodule) else node.module)
    return names


def room_of(module: str) -> str | None:
    """The room (key of ALLOWED) a ``pipeline`` module belongs to."""
    matches = [room for room in ALLOWED if module == room or module.startswith(room + ".")]
    return max(matches, key=len) if matches else None


def within(module: str, allowed: set[str]) -> bool:
    return any(module == room or module.startswith(room + ".") for room in allowed)


def violations(path: Path) -> list[str]:
    """The imports of one library module that break the layering, as readable lines."""
    module = module_name(path)
    room = room_of(module)
    found = []
    for name in imported_names(path):
        top = name.split(".")[0]
        if top in FOREIGN:
            found.append(f"{module} imports {name}: the library never imports the application or click")
        elif top == "torch" and not module.startswith(TORCH_MODULES):
            found.append(f"{module} imports torch: only {', '.join(TORCH_MODULES)} may")
        elif (top == "pipeline" and room_of(name) not in (None, room) and not within(name, ALLOWED[room])
              and (module, name) not in UPWARD):
            found.append(f"{module} imports {name}: {room} may import only {sorted(ALLOWED[room])}")
    return found


LIBRARY_FILES = sorted(LIBRARY.rglob("*.py"))


@pytest.mark.parametrize("path", LIBRARY_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_library_imports_point_down(path):
    assert violations(path) == []


def test_every_library_module_is_in_a_room():
    loose = [module_name(p) for p in LIBRARY_FILES if module_name(p) != "pipeline" and room_of(module_name(p)) is None]
    assert loose == []


def test_an_upward_import_is_caught(tmp_path, monkeypatch):
    """The check itself can fail: a tokenizer module that reaches into the executor is reported."""
    fake_root = tmp_path
    module = fake_root / "pipeline" / "tokenizer" / "bad.py"
    module.parent.mkdir(parents=True)
    module.write_text("from pipeline.engine.executor import Tasks\nimport click\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", fake_root)
    found = violations(module)
    assert len(found) == 2
    assert "pipeline.tokenizer.bad imports pipeline.engine.executor" in found[0]
    assert "never imports the application or click" in found[1]


def test_the_top_level_keeps_at_most_four_modules():
    assert len(list(LIBRARY.glob("*.py"))) <= 4


PACKAGES = sorted(path.parent for path in [*LIBRARY.rglob("__init__.py"), *(ROOT / "stages").rglob("__init__.py")]
                  if path.parent != LIBRARY)


def unmapped_modules(package: Path) -> list[str]:
    """The modules of ``package`` that its ``__init__`` docstring, the room's map, does not name as ``module``."""
    map_text = ast.get_docstring(ast.parse((package / "__init__.py").read_text(encoding="utf-8"))) or ""
    modules = [path.stem for path in sorted(package.glob("*.py")) if path.stem != "__init__"]
    modules += [path.parent.name for path in sorted(package.glob("*/__init__.py"))]
    return [name for name in modules if f"``{name}``" not in map_text and f".{name}`" not in map_text]


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_module_has_one_job_named_in_its_rooms_map(package):
    """A module does one job, and its package's docstring says which in a few words: a module whose job
    cannot be put so is two modules, and one added without a line in the map fails here."""
    assert unmapped_modules(package) == []


def test_a_module_missing_from_the_map_is_caught(tmp_path):
    package = tmp_path / "room"
    package.mkdir()
    (package / "__init__.py").write_text('"""A room: ``named`` (it does one thing)."""\n')
    (package / "named.py").write_text("")
    (package / "unnamed.py").write_text("")
    assert unmapped_modules(package) == ["unnamed"]


@pytest.mark.parametrize("path", sorted([*LIBRARY.rglob("*.py"), *(ROOT / "stages").rglob("*.py")]),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_every_module_opens_with_its_job(path):
    """Each module's docstring opens with the sentence that says what it is for."""
    if path.name == "__init__.py" and not path.read_text(encoding="utf-8").strip():
        return
    docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
    assert docstring and docstring.strip(), f"{path.relative_to(ROOT)} has no module docstring"
