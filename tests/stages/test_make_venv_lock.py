"""Two `make` at once install the virtual environment once, never both at the same time.

The Makefile runs with a stand-in for Python whose `-m venv` makes a venv whose
`python -m pip install` only logs that it started and ended.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

FAKE_PYTHON = """\
#!/bin/bash
if [ "$1 $2" = "-m venv" ]; then mkdir -p "$3/bin" && cp "$0" "$3/bin/python"; exit; fi
echo "start $*" >> "$INSTALL_LOG"
sleep 0.5  # an install takes a while: long enough for a second make to reach the same step
echo "end" >> "$INSTALL_LOG"
"""

pytestmark = pytest.mark.skipif(shutil.which("make") is None or shutil.which("flock") is None,
                                reason="needs make and flock (util-linux)")


def test_two_makes_at_once_install_once(tmp_path):
    for name in ("Makefile", "pyproject.toml", "setup.py", "constraints.txt"):
        shutil.copy2(REPO / name, tmp_path / name)
    python = tmp_path / "fake-python"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    log = tmp_path / "install.log"
    env = {**os.environ, "INSTALL_LOG": str(log)}
    command = ["make", "--no-print-directory", f"PYTHON={python}", ".venv/.installed-test"]
    makes = [subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for _ in range(2)]
    outputs = [make.communicate(timeout=60)[0] for make in makes]
    assert [make.returncode for make in makes] == [0, 0], outputs
    assert log.read_text().splitlines() == [
        "start -m pip --disable-pip-version-check --quiet install -e .", "end",
        "start -m pip --disable-pip-version-check --quiet install -c constraints.txt -e .[test]", "end",
    ]


def test_the_constraints_hold_every_pin_of_pyproject():
    """constraints.txt (the one version pip may pick for each package of the test install) agrees with every
    pin in pyproject.toml, so that a pin changed there without `make constraints` fails here, not in pip."""
    import re
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    pins = [*project["dependencies"], *(pin for extra in project["optional-dependencies"].values() for pin in extra)]
    constrained = dict(re.findall(r"^([\w.-]+)==(\S+)$", (REPO / "constraints.txt").read_text(), flags=re.MULTILINE))
    normal = {re.sub(r"[-_.]+", "-", name).lower(): version for name, version in constrained.items()}
    for pin in pins:
        match = re.fullmatch(r"([\w.-]+)(?:\[[\w,]+\])?==(\S+)", pin)
        if match is None:  # lmprep[dask,s3]: the project's own extras
            continue
        name, version = re.sub(r"[-_.]+", "-", match[1]).lower(), match[2]
        assert normal.get(name) == version, f"{pin} in pyproject.toml, {name}=={normal.get(name)} in constraints.txt"
