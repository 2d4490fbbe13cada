"""Progress outside a terminal: a plain line every LMPREP_PROGRESS_SECONDS, never a carriage return."""

from __future__ import annotations

import io
import re

import pytest
from click.testing import CliRunner

from pipeline.engine.progress import Progress
from pipeline.errors import ConfigError
from stages.cli.main import cli


def test_lines_count_bytes_and_values_and_end_with_a_last_line(monkeypatch):
    monkeypatch.setenv("LMPREP_PROGRESS_SECONDS", "0")
    stream = io.StringIO()
    with Progress("encode", total=4, unit="parts", enabled=True, stream=stream) as bar:
        bar.note(loss="2.500")
        for _ in range(4):
            bar.update(nbytes=2_000_000)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 4  # one per update (the last one wrote the end: no repeat)
    assert re.fullmatch(r"encode: 1/4 parts \(25%\), 2\.0 MB, [\d,.]+ MB/s, [\d,.]+ parts/s, ETA \d+:\d\d:\d\d, "
                        r"loss 2\.500", lines[0]), lines[0]
    assert lines[-1].startswith("encode: 4/4 parts (100%), 8.0 MB, ")


def test_a_short_step_writes_nothing_and_a_disabled_one_never(monkeypatch):
    stream = io.StringIO()
    with Progress("train", total=3, unit="steps", enabled=True, stream=stream) as bar:
        bar.update(3)  # well within the first 10 s
    monkeypatch.setenv("LMPREP_PROGRESS_SECONDS", "0")
    with Progress("train", total=3, unit="steps", enabled=False, stream=stream) as bar:
        bar.update(3)
    assert stream.getvalue() == ""


@pytest.mark.parametrize("value", ["soon", "-1", "nan"])
def test_a_bad_interval_is_named(monkeypatch, value):
    monkeypatch.setenv("LMPREP_PROGRESS_SECONDS", value)
    with pytest.raises(ConfigError, match=rf"^LMPREP_PROGRESS_SECONDS='{value}': expected a number of seconds"):
        Progress("train", total=3, unit="steps", enabled=True, stream=io.StringIO())


def test_a_run_outside_a_terminal_logs_partitions_steps_loss_and_throughput(tiny_project, monkeypatch):
    tiny_project(tokenizer={"workers": 1}, encode={"workers": 1}, train={"steps": 3}, executor={"workers": 1})
    monkeypatch.setenv("LMPREP_PROGRESS_SECONDS", "0")
    result = CliRunner().invoke(cli, ["run", "--config", "lmprep.yaml"])
    assert result.exit_code == 0, result.output
    log = result.stderr
    assert "\r" not in log
    assert re.search(r"^prepare: round 1: 1/1 parts \(100%\), [\d.]+ kB, [\d,.]+ [kM]B/s, ", log, re.M), log
    assert re.search(r"^tokenizer: merging: \d+/\d+ merges \(\d+%\), ", log, re.M), log
    assert re.search(r"^encode: 2/2 parts \(100%\), [\d.]+ kB, [\d,.]+ [kM]B/s, [\d,.]+ parts/s, ETA 0:00:00$", log,
                     re.M), log
    assert re.search(r"^train: 3/3 steps \(100%\), [\d,.]+ steps/s, ETA 0:00:00, loss \d\.\d{3}, tok/s [\d,]+$", log,
                     re.M), log
