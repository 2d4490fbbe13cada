"""Ctrl-C in the first tenth of a second, while the command loads: the line and status of Ctrl-C, never a
traceback, never click's "Aborted!" (status 1). Only a signal that arrives while the interpreter itself starts
(before its handler is set, or while it imports ``site``) ends it as Python does for any program."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

from conftest import lmprep_environment, make_project

from stages import INTERRUPTED_MESSAGE

CONFIG = """\
data: {sources: [{glob: "raw/*.txt", separator: blank_line}]}
prepare: {output_dir: out/prepared, val_fraction: 0.2}
tokenizer: {output: out/tokenizer.json, vocab_size: 300}
encode: {output_dir: out/shards}
state_dir: state
"""


def before_lmprep(err: str) -> bool:
    """Whether a traceback is the interpreter's alone: importing ``site`` (or running the line of a ``.pth``
    file that ``site`` reports with its traceback, such as the editable install's finder), or runpy finding
    the package, before the first line of lmprep runs."""
    frames = re.findall(r'^  File "([^"]*)"', err, re.MULTILINE)
    return err.startswith(("Fatal Python error: init_import_site", "Error processing line ")) or (
        bool(frames) and all(frame.startswith("<frozen ") for frame in frames))


def test_ctrl_c_while_the_command_loads_is_one_line_and_status_130(tmp_path):
    make_project(tmp_path, CONFIG)
    outcomes = []
    for delay in [0.0, 0.01, 0.02, *(0.03 + 0.015 * step for step in range(30))]:
        process = subprocess.Popen([sys.executable, "-m", "stages", "status", "--config", "lmprep.yaml"],
                                   cwd=tmp_path, env=lmprep_environment(), stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        time.sleep(delay)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
        outcomes.append((delay, process.returncode, err))
        if before_lmprep(err):  # the interpreter's own start-up: no program can catch a signal there
            continue
        assert "Traceback" not in err and "Aborted!" not in err, (delay, err)
        if process.returncode == -signal.SIGINT:  # before the interpreter set its handler: ended by the signal
            assert err == "", (delay, err)  # itself, which a shell reports as status 130 too
        elif process.returncode != 0:  # a status that finished first is fine
            assert (process.returncode, err) == (130, INTERRUPTED_MESSAGE + "\n"), (delay, process.returncode, err)
    assert any(code == 130 for _, code, _ in outcomes), outcomes


# A command whose Ctrl-C lands inside ``exec`` of source text, as it does when a dataclass is made while a module
# loads; the command handles it like any Ctrl-C. Run as ``python -m``, like ``python -m stages``.
CTRL_C_IN_EXEC = """\
import click

from stages.cli import main


@click.command("boom")
def boom():
    exec("raise KeyboardInterrupt")


main.COMMANDS["boom"] = (__name__, "boom")
if __name__ == "__main__":
    main.main()
"""


def test_ctrl_c_that_left_an_exec_of_source_text_still_exits_with_130(tmp_path):
    """Python 3.11 remembers a KeyboardInterrupt that left any ``exec`` and, under ``python -m``, ended the
    process by SIGINT after the one line had been printed (status -2: once in the sweep above, under load)."""
    (tmp_path / "ctrl_c_in_exec.py").write_text(CTRL_C_IN_EXEC)
    environment = lmprep_environment()
    environment["PYTHONPATH"] = f"{tmp_path}{os.pathsep}{environment['PYTHONPATH']}"
    process = subprocess.run([sys.executable, "-m", "ctrl_c_in_exec", "boom"], cwd=tmp_path, env=environment,
                             capture_output=True, text=True, timeout=60)
    assert (process.returncode, process.stderr) == (130, INTERRUPTED_MESSAGE + "\n")
