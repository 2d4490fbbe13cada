"""The commands that run no stage load no heavy module: ``lmprep status`` and a no-op ``lmprep run`` import
neither numpy, pyarrow, torch nor ``regex``, whatever steps the config names (their CPU seconds are
benchmarks/bench_startup.py's, in docs/performance.md)."""

from __future__ import annotations

import json
import os
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


def heavy_modules(*args: str, among: tuple[str, ...] = HEAVY) -> list[str]:
    """The heavy modules (of ``among``) loaded in a process that ran ``lmprep ARGS``."""
    done = subprocess.run([sys.executable, "-c", LOADED % (among,), *args], capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout.splitlines()[-1])


def lmprep(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "stages", *args], capture_output=True, text=True, check=True)


def test_status_and_a_no_op_run_load_no_heavy_module(tiny_project):
    tiny_project()
    lmprep("run", "--config", "lmprep.yaml")
    assert heavy_modules("status", "--config", "lmprep.yaml") == []
    assert heavy_modules("run", "--config", "lmprep.yaml") == []


def test_help_and_usage_errors_load_no_heavy_module():
    """``lmprep --help`` imports every command's module (for its line of help): none loads numpy, pyarrow,
    regex or torch before its command runs."""
    assert heavy_modules("--help") == []
    assert heavy_modules("tokenizer", "encode", "--help") == []
    assert heavy_modules("locate", "train") == []  # a usage error: TOKEN is missing


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


def test_status_judges_the_checkpoint_of_a_stale_train_stage_without_torch(tiny_project):
    """Its warning (the run would set the checkpoint aside) reads the checkpoint's header and checksums only."""
    tiny_project()
    lmprep("run", "--config", "lmprep.yaml")
    assert heavy_modules("status", "--config", "lmprep.yaml", "--set", "train.lr=0.5", among=("torch",)) == []


def test_commands_that_read_arrow_files_load_no_pandas(tiny_project):
    """pyarrow's ``to_numpy`` and ``pa.array`` import pandas where it is installed (0.3 s of CPU); lmprep makes and
    takes views of the buffers instead."""
    tiny_project()
    lmprep("run", "encode", "--config", "lmprep.yaml")
    assert heavy_modules("locate", "train", "0", "--config", "lmprep.yaml", among=("pandas",)) == []
    assert heavy_modules("run", "export", "--force", "--config", "lmprep.yaml", among=("pandas",)) == []
    assert heavy_modules("report", "--config", "lmprep.yaml", among=("pandas",)) == []


BLAS_THREADS = """
import contextlib, io, os, sys
from stages.__main__ import main
sys.argv = ["lmprep", "--version"]
with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):
    main()
import numpy  # as a command that encodes or exports loads it
print(len(os.listdir("/proc/self/task")), os.environ["OPENBLAS_NUM_THREADS"])
"""


def blas_threads(environment: dict[str, str]) -> tuple[int, str]:
    """The threads of a process that ran the ``lmprep`` entry point and then loaded numpy, and the OpenBLAS thread
    count its environment asked for."""
    done = subprocess.run([sys.executable, "-c", BLAS_THREADS], capture_output=True, text=True, check=True,
                          env=environment)
    threads, asked = done.stdout.split()
    return int(threads), asked


def test_the_command_loads_numpy_without_blas_threads_unless_the_user_chose_a_number():
    """OpenBLAS would start a spinning thread per core; lmprep asks for none beside the main one."""
    environment = {key: value for key, value in os.environ.items() if key != "OPENBLAS_NUM_THREADS"}
    assert blas_threads(environment) == (1, "1")
    assert blas_threads({**environment, "OPENBLAS_NUM_THREADS": "2"})[1] == "2"
