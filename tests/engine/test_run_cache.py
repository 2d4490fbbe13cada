"""The run cache: a stage whose inputs, settings and code version match a finished run of another config of
the project links that run's outputs instead of running."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import lmprep_in_cwd

from pipeline.engine import atomic
from pipeline.engine.runner import Pipeline, Stage


class Project:
    """Configs of one project: each writes ``{name}/upper`` (a directory, from raw.txt) and ``{name}/count.txt``
    (from it) under its own state dir, and all share ``runs/``."""

    def __init__(self, root: Path):
        self.root = root
        self.calls: list[str] = []
        self.log: list[str] = []
        (root / "raw.txt").write_text("hello world", encoding="utf-8")

    def pipeline(self, name: str, *, suffix: str = "!", scale: int = 1, count_version: int = 1,
                 reusable: bool = True, run_cache: str | None = "runs") -> Pipeline:
        params = {"prepare": {"suffix": suffix, "output_dir": f"{name}/upper"}, "count": {"scale": scale},
                  "count_output": f"{name}/count.txt"}

        def prepare():
            self.calls.append(f"{name}:prepare")
            with atomic.atomic_dir(self.root / name / "upper") as staging:
                (staging / "text.txt").write_text((self.root / "raw.txt").read_text().upper() + suffix)
                (staging / "sub").mkdir()
                (staging / "sub" / "length.txt").write_text(str(len(suffix)))

        def count():
            self.calls.append(f"{name}:count")
            words = len((self.root / name / "upper" / "text.txt").read_text().split()) * scale
            atomic.write_text(self.root / name / "count.txt", str(words))

        stages = [
            Stage("prepare", ("raw.txt",), (f"{name}/upper",), ("prepare",), prepare, reusable=reusable,
                  keys={f"{name}/upper": "prepare.output_dir"}),
            Stage("count", (f"{name}/upper/text.txt",), (f"{name}/count.txt",), ("count", "count_output"), count,
                  code_version=count_version, reusable=reusable, keys={f"{name}/count.txt": "count_output"}),
        ]
        return Pipeline(stages, param_value=lambda key: params[key], state_dir=f".state/{name}", root=self.root,
                        run_cache=run_cache, log=self.log.append)

    def files(self, name: str) -> dict[str, bytes]:
        base = self.root / name
        return {str(path.relative_to(base)): path.read_bytes() for path in sorted(base.rglob("*")) if path.is_file()}


@pytest.fixture
def project(tmp_path) -> Project:
    return Project(tmp_path)


def test_a_variant_links_the_outputs_of_a_matching_run_and_says_where_from(project):
    assert project.pipeline("a").run() == ["prepare", "count"]
    project.log.clear()
    assert project.pipeline("b").run() == ["prepare", "count"]  # recorded in b's lock as its own runs
    assert project.calls == ["a:prepare", "a:count"]
    assert "'prepare' reused from a/upper: the same inputs, settings and code version ran there" in project.log
    assert "'count' reused from a/count.txt: the same inputs, settings and code version ran there" in project.log
    assert project.files("b") == project.files("a")
    linked = [(project.root / name / "upper/sub/length.txt").stat().st_ino for name in ("a", "b")]
    assert linked[0] == linked[1]  # one file, two names
    assert project.pipeline("b").run() == [] and project.pipeline("a").run() == []
    assert not any(status.stale for status in project.pipeline("b").status())


def test_other_settings_code_or_inputs_run_and_only_matching_stages_are_reused(project):
    project.pipeline("a").run()
    project.pipeline("b", scale=2).run()
    assert project.calls[2:] == ["b:count"]  # prepare matched; count's settings did not
    project.pipeline("c", count_version=2).run()
    assert project.calls[3:] == ["c:count"]
    (project.root / "raw.txt").write_text("other words here")
    project.pipeline("d").run()
    assert project.calls[4:] == ["d:prepare", "d:count"]


def test_forced_non_reusable_or_without_a_run_cache_the_stage_runs(project):
    project.pipeline("a").run()
    project.pipeline("b").run(["prepare"], force=True)
    project.pipeline("c", reusable=False).run()
    project.pipeline("d", run_cache=None).run()
    assert project.calls[2:] == ["b:prepare", "c:prepare", "c:count", "d:prepare", "d:count"]


def test_a_place_whose_outputs_changed_is_skipped_for_another_that_still_holds_them(project):
    project.pipeline("a").run()
    project.pipeline("b").run()
    project.pipeline("a", suffix="?").run()  # a's outputs are now other ones; b still holds the old
    project.log.clear()
    project.pipeline("c").run()
    assert project.calls == ["a:prepare", "a:count", "a:prepare", "a:count"]
    assert "'prepare' reused from b/upper: the same inputs, settings and code version ran there" in project.log
    assert (project.root / "b" / "upper" / "text.txt").read_text() == "HELLO WORLD!"  # b kept its own copy
    (project.root / "b" / "upper" / "text.txt").write_text("edited")
    (project.root / "c" / "upper" / "text.txt").unlink()
    project.pipeline("e").run()
    assert project.calls[4:] == ["e:prepare"]  # no place holds the outputs any more; count then matched


def test_entries_are_keyed_without_where_the_outputs_are(project):
    project.pipeline("a").run()
    entries = sorted((project.root / "runs").rglob("*.json"))
    assert len(entries) == 2 and all(entry.parent.name == entry.name[:2] for entry in entries)
    places = [json.loads(entry.read_text())["places"] for entry in entries]
    assert sorted(place[0][0][0] for place in places) == ["../a/count.txt", "../a/upper"]  # from runs/
    project.pipeline("b").run()
    assert sorted((project.root / "runs").rglob("*.json")) == entries  # the same keys, one more place each
    assert all(len(json.loads(entry.read_text())["places"]) == 2 for entry in entries)


@pytest.mark.parametrize("run_cache, relation", [("out/prepared/runs", "contains the run cache 'out/prepared/runs'"),
                                                 ("linked/runs", "contains the run cache 'linked/runs', which is "
                                                                 "{root}/out/prepared/runs once links are followed")])
def test_a_run_cache_inside_an_output_is_refused_in_one_line(tiny_project, tmp_path, run_cache, relation):
    """A run cache under a link to the prepared data was accepted; prepare then ran on every run, since the run
    cache's record changed its output."""
    tiny_project()
    (tmp_path / "out" / "prepared").mkdir(parents=True)
    (tmp_path / "linked").symlink_to("out/prepared")
    for command in ("status", "run"):
        result = lmprep_in_cwd(command, "--set", f"run_cache_dir={run_cache}")
        assert result.exit_code == 2, result.output
        assert result.output.splitlines()[-1].startswith(
            f"error: prepare.output_dir 'out/prepared' {relation.format(root=tmp_path.resolve())}; lmprep replaces "
            "an output as a whole"), result.output
    assert not (tmp_path / "out" / "prepared" / "runs").exists()
