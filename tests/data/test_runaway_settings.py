"""Settings that would run for ever on any corpus are refused before a task runs, in one line naming the key."""

from __future__ import annotations

import re

from conftest import lmprep_in_cwd as lmprep


def test_partitions_too_small_to_be_worth_a_task_are_refused_at_once(tmp_path, monkeypatch):
    """prepare.partition_bytes=1 cut 137 KB into thousands of partitions, a task each: 19 minutes."""
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "a.txt").write_text("\n".join(f"Q: what is {i}? A: it is {i}." for i in range(3000)))
    (tmp_path / "lmprep.yaml").write_text('data: {sources: [{glob: "raw/*.txt", separator: line}]}\n'
                                          "prepare: {output_dir: out/prepared, partition_bytes: 1}\n"
                                          "state_dir: state\n")
    monkeypatch.chdir(tmp_path)

    def named_and_recorded(*args):
        raise AssertionError("a partition was named and recorded before the refusal")

    monkeypatch.setattr("pipeline.data.prepare.partition_inputs", named_and_recorded)  # the work that took minutes
    result = lmprep("run", "prepare")
    assert result.exit_code == 2, result.output
    assert re.fullmatch(r"error: prepare.partition_bytes=1 cuts the raw data into [\d,]+ partitions, each a task "
                        r"with files of its own: more than 1,000 partitions below 65,536 bytes would take longer "
                        r"to run as tasks than the data takes to read; raise it \(the default is 64,000,000\)\n",
                        result.output.splitlines(keepends=True)[-1]), result.output
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("*.done.json"))
