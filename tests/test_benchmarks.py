"""Every benchmark runs: its ``--smoke`` run (tiny inputs, one repeat, a temporary directory) succeeds and
writes its section, stamped, to the results file it is given.

The figures of a smoke run mean nothing; what the test proves is that the script, its subprocesses and
its peers (tiktoken, HF tokenizers, rustbpe, moto, dask) still fit together, and that the numbers in
``benchmarks/RESULTS.md`` come from a script that runs.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"
# scripts that are not benchmarks of their own: the shared modules, datatrove's sides (run by
# bench_curation.py, bench_workers.py and bench_web.py), the Dask and object-store faults and the state faults
# (run by ``fault_injection.py --cluster`` and ``--state``), and the README's screenshot of the report
NOT_RUN_ALONE = {"results.py", "proc.py", "datatrove_curation.py", "datatrove_prepare.py", "datatrove_web.py",
                 "cluster_faults.py", "state_faults.py", "report_screenshot.py"}
SMOKE_RUNS = {  # section name: the command's arguments
    **{path.stem: [path.name] for path in sorted(BENCHMARKS.glob("*.py")) if path.name not in NOT_RUN_ALONE},
    "fault_injection_cluster": ["fault_injection.py", "--cluster"],
}
STAMP = re.compile(r"^smoke run \(figures mean nothing\) at commit `([0-9a-f]{12}(?:-dirty)?|unknown)`, "
                   r"\d{4}-\d\d-\d\d \d\d:\d\d UTC, `python .*`; \d+ cores, load average [\d.]+ [\d.]+ [\d.]+ before, "
                   r"[\d.]+ [\d.]+ [\d.]+ after; Python 3\.\d+\.\d+$", flags=re.MULTILINE)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SMOKE_RUNS))
def test_a_smoke_run_succeeds_and_writes_its_stamped_section(name, tmp_path):
    results = tmp_path / "RESULTS.md"
    environment = {key: value for key, value in os.environ.items() if not key.startswith("LMPREP_BENCH")}
    done = subprocess.run([sys.executable, *SMOKE_RUNS[name], "--smoke", "--results", str(results)],
                          cwd=BENCHMARKS, env=environment, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    text = results.read_text("utf-8")
    assert text.startswith("# Benchmark results\n")
    section = text.partition(f"\n## {name}\n")[2]
    assert STAMP.search(section), section[:500]
    assert done.stdout.strip() and done.stdout.strip().splitlines()[-1] in section  # what it printed, recorded


def test_every_benchmark_has_a_smoke_run():
    assert set(SMOKE_RUNS) - {"fault_injection_cluster"} == {
        path.stem for path in BENCHMARKS.glob("*.py") if path.name not in NOT_RUN_ALONE}
    for name, (script, *_) in SMOKE_RUNS.items():
        source = (BENCHMARKS / script).read_text("utf-8")
        assert "results.add_arguments(parser)" in source and "results.run(" in source, name


def test_the_benchmarks_import_what_is_installed_and_nothing_else():
    """No sys.path edits (the scripts run from the installed checkout), and no module that no extra declares."""
    for path in BENCHMARKS.glob("*.py"):
        source = path.read_text("utf-8")
        assert "sys.path.insert" not in source and "sys.path.append" not in source, path.name
        assert not re.search(r"^\s*(?:import|from) psutil\b", source, flags=re.MULTILINE), path.name


def test_a_section_replaces_the_previous_one_of_its_benchmark(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import results

    path = tmp_path / "RESULTS.md"
    results.write_section(path, "bench_a", "stamp 1", "first")
    results.write_section(path, "bench_b", "stamp 2", "second")
    results.write_section(path, "bench_a", "stamp 3", "third")
    text = path.read_text()
    assert text.startswith(results.HEADER)
    assert text.count("## bench_a") == 1 and text.count("## bench_b") == 1
    assert "first" not in text and text.index("third") < text.index("second")  # in place, not appended
