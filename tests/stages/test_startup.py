"""The commands that run no stage load no heavy module: ``lmprep status`` and a no-op ``lmprep run`` import
neither numpy, pyarrow, torch nor ``regex``, whatever steps the config names (their CPU seconds are
benchmarks/bench_startup.py's, in docs/performance.md)."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import tiny_config

HEAVY = ("numpy", "pyarrow", "torch", "regex")
# every step that runs with its defaults, so that validating and building each is covered
STEPS = [{"exact_dedup": {}}, {"near_dedup": {}}, {"gopher_quality": {}}, {"gopher_repetition": {}}, {"c4": {}},
         {"fineweb": {}}, {"language": {}}, {"html_extract": {}}, {"pii": {}}]
LOADED = """
import contextlib, io, json, sys
from stages.cli.main import main
sys.argv = ["lmprep", *sys.argv[1:]]
with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):
    main()
print(json.dumps(sorted(name for name in %r if name in sys.modules)))
"""


def heavy_modules(*args: str) -> list[str]:
    """The heavy modules loaded in a process that ran ``lmprep ARGS``."""
    done = subprocess.run([sys.executable, "-c", LOADED % (HEAVY,), *args], capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout.splitlines()[-1])


def lmprep(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "stages", *args], capture_output=True, text=True, check=True)


def test_status_and_a_no_op_run_load_no_heavy_module(tiny_project):
    tiny_project()
    lmprep("run", "--config", "lmprep.yaml")
    assert heavy_modules("status", "--config", "lmprep.yaml") == []
    assert heavy_modules("run", "--config", "lmprep.yaml") == []


def test_status_loads_no_heavy_module_whatever_the_steps(tiny_project):
    (tiny_project() / "lmprep.yaml").write_text(tiny_config(prepare={"steps": STEPS}))
    assert heavy_modules("status", "--config", "lmprep.yaml") == []


def test_status_with_a_frozen_tokenizer_loads_no_heavy_module_once_the_project_knows_the_file(tiny_project):
    """Every command reads a frozen tokenizer's settings: the state dir remembers them by the file's content."""
    tiny_project()
    lmprep("run", "tokenizer", "--config", "lmprep.yaml")
    frozen = ("--set", "tokenizer.path=out/tokenizer.json")
    assert "numpy" in heavy_modules("status", "--config", "lmprep.yaml", *frozen)  # loaded once, then remembered
    assert heavy_modules("status", "--config", "lmprep.yaml", *frozen) == []
