"""The stage runner: staleness reasons, early cutoff, interrupted stages and the run lock."""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pipeline.engine import atomic, runner
from pipeline.engine.runner import Pipeline, Stage
from pipeline.errors import RunnerError


class Workspace:
    """A three-stage toy pipeline: raw.txt → upper.txt (prepare) → count.txt (count) → report.txt."""

    def __init__(self, root: Path):
        self.root = root
        self.params = {"prepare": {"suffix": "!"}, "count": {"scale": 1}, "report": {"title": "n"}}
        self.calls: list[str] = []
        self.log: list[str] = []
        (root / "raw.txt").write_text("hello world", encoding="utf-8")

    def read(self, name: str) -> str:
        return (self.root / name).read_text(encoding="utf-8")

    def param(self, key: str):
        node = self.params
        for part in key.split("."):
            node = node[part]
        return node

    def pipeline(self, **stage_overrides) -> Pipeline:
        stages = [self._prepare(), self._count(), self._report()]
        stages = [stage_overrides.get(s.name, s) for s in stages]
        return Pipeline(stages, param_value=self.param, state_dir=".state", root=self.root, log=self.log.append)

    def _prepare(self) -> Stage:
        def run():
            self.calls.append("prepare")
            text = self.read("raw.txt").upper() + self.params["prepare"]["suffix"]
            atomic.write_text(self.root / "out" / "upper.txt", text)
        return Stage("prepare", ("raw.txt",), ("out/upper.txt",), ("prepare",), run)

    def _count(self) -> Stage:
        def run():
            self.calls.append("count")
            words = len(self.read("out/upper.txt").split()) * self.params["count"]["scale"]
            atomic.write_text(self.root / "count.txt", str(words))
        return Stage("count", ("out/upper.txt",), ("count.txt",), ("count.scale",), run)

    def _report(self) -> Stage:
        def run():
            self.calls.append("report")
            with atomic.atomic_dir(self.root / "report") as staging:
                (staging / "report.txt").write_text(f"{self.params['report']['title']}={self.read('count.txt')}")
        return Stage("report", ("count.txt",), ("report",), ("report.title",), run)


@pytest.fixture
def ws(tmp_path) -> Workspace:
    return Workspace(tmp_path)


def reasons(pipeline: Pipeline) -> dict[str, tuple[str, ...]]:
    return {status.name: status.reasons for status in pipeline.status()}


def test_first_run_runs_everything_then_nothing(ws):
    assert reasons(ws.pipeline()) == dict.fromkeys(("prepare", "count", "report"), ("never run",))
    assert ws.pipeline().run() == ["prepare", "count", "report"]
    assert ws.read("report/report.txt") == "n=2"
    assert ws.pipeline().run() == []
    assert all(not s.stale for s in ws.pipeline().status())
    assert "'report' is up to date" in ws.log


def test_a_running_stage_can_ask_what_the_runner_hashed_of_its_inputs(ws):
    """The encode stage's tasks take the digest of a part the runner hashed just before, while the file keeps the
    stamp it had then, instead of hashing it again: the runner vouches for its inputs while the stage runs."""
    from pipeline.engine import hashing

    raw = ws.root / "raw.txt"
    digest = hashing.sha256_file(raw)
    seen = []

    def run():
        seen.append(hashing.vouched_stamp(raw, digest))
        atomic.write_text(ws.root / "out" / "upper.txt", "HELLO")

    ws.pipeline(prepare=Stage("prepare", ("raw.txt",), ("out/upper.txt",), ("prepare",), run)).run(["prepare"])
    assert seen == [hashing.content_stamp(raw)] and hashing.vouched_stamp(raw, digest) is None  # not after it


def test_lock_file_records_hashes_and_params(ws):
    ws.pipeline().run()
    lock = json.loads((ws.root / ".state" / "lock.json").read_text())
    entry = lock["stages"]["count"]
    assert entry["params"] == {"count.scale": 1}
    assert set(entry["deps"]) == {"out/upper.txt"} and set(entry["outs"]) == {"count.txt"}
    assert all(len(h) == 64 for h in [*entry["deps"].values(), *entry["outs"].values()])


@pytest.mark.parametrize(
    "key, value, old, expected_runs",
    [
        # the suffix changes upper.txt, but not its word count: report is cut off
        ("prepare.suffix", "?", '"!"', ["prepare", "count"]),
        ("count.scale", 3, "1", ["count", "report"]),
        ("report.title", "words", '"n"', ["report"]),
    ],
)
def test_a_key_reruns_only_its_readers(ws, key, value, old, expected_runs):
    ws.pipeline().run()
    section, name = key.split(".")
    ws.params[section][name] = value
    assert f"param {key} changed {old} → {json.dumps(value)}" in reasons(ws.pipeline())[section]
    assert ws.pipeline().run() == expected_runs
    assert f"running '{section}': param {key} changed" in "\n".join(ws.log)


@pytest.mark.parametrize(
    "old, new, expected",
    [
        # a list item's key: the leaf that changed, not the list cut to a prefix both sides share
        ([{"glob": "raw/a/**/*.txt", "separator": "blank_line", "field": "body"}],
         [{"glob": "raw/a/**/*.txt", "separator": "blank_line", "field": "bdy"}],
         ['param prepare.suffix[0].field changed "body" → "bdy"']),
        (["a", "b"], ["a", "b", "c"], ['param prepare.suffix[2] added "c"']),
        (["a", "b"], ["a"], ["param prepare.suffix[1] removed"]),
        # a long value: the part where the two sides differ
        ("x" * 80 + "tail", "x" * 80 + "tale", ['param prepare.suffix changed …xxxxxxxxtail" → …xxxxxxxxtale"']),
    ],
)
def test_a_reason_names_the_leaf_that_changed_and_shows_the_difference(ws, old, new, expected):
    ws.params["prepare"]["suffix"] = old
    stage = Stage("prepare", ("raw.txt",), ("out/upper.txt",), ("prepare.suffix",),
                  lambda: atomic.write_text(ws.root / "out" / "upper.txt", "x"))
    ws.pipeline(prepare=stage).run(["prepare"])
    ws.params["prepare"]["suffix"] = new
    assert list(reasons(ws.pipeline(prepare=stage))["prepare"]) == expected


def test_early_cutoff_when_rerun_produces_identical_output(ws):
    ws.pipeline().run()
    (ws.root / "raw.txt").write_text("HELLO world", encoding="utf-8")  # upper() gives the same bytes
    assert reasons(ws.pipeline())["prepare"] == ("dependency 'raw.txt' changed",)
    assert reasons(ws.pipeline())["count"] == ("upstream 'prepare' is stale",)
    assert ws.pipeline().run() == ["prepare"]
    assert "'count' is up to date" in ws.log and "'report' is up to date" in ws.log


def test_changed_dependency_propagates(ws):
    ws.pipeline().run()
    (ws.root / "raw.txt").write_text("one two three", encoding="utf-8")
    assert ws.pipeline().run() == ["prepare", "count", "report"]
    assert ws.read("report/report.txt") == "n=3"


def test_missing_and_modified_outputs_are_named(ws):
    ws.pipeline().run()
    (ws.root / "count.txt").write_text("999")
    (ws.root / "report" / "report.txt").unlink()
    status = reasons(ws.pipeline())
    assert status["count"] == ("output 'count.txt' was modified",)
    assert "output 'report' was modified" in status["report"]
    ws.calls.clear()
    assert ws.pipeline().run() == ["count", "report"]  # count restores the same bytes, report rebuilds
    (ws.root / "out" / "upper.txt").unlink()
    assert reasons(ws.pipeline())["prepare"] == ("output 'out/upper.txt' is missing",)


def test_targets_run_their_stale_upstream_only(ws):
    assert ws.pipeline().run(["count"]) == ["prepare", "count"]
    assert reasons(ws.pipeline())["report"] == ("never run",)
    assert [s.name for s in ws.pipeline().status(["count"])] == ["prepare", "count"]


def test_force_reruns_targets_but_not_their_upstream(ws):
    ws.pipeline().run()
    assert ws.pipeline().run(["count"], force=True) == ["count"]
    assert "running 'count': forced" in ws.log
    assert ws.pipeline().run(force=True) == ["prepare", "count", "report"]


def test_unknown_target_lists_stages(ws):
    with pytest.raises(RunnerError, match="unknown stage 'train'; stages: prepare, count, report"):
        ws.pipeline().run(["train"])


def test_failed_stage_keeps_previous_outputs_and_lock_entry(ws):
    ws.pipeline().run()
    lock_before = (ws.root / ".state" / "lock.json").read_bytes()
    ws.params["report"]["title"] = "boom"

    def half_written_then_fail():
        with atomic.atomic_dir(ws.root / "report") as staging:
            (staging / "report.txt").write_text("partial")
            raise RuntimeError("disk on fire")

    broken = Stage("report", ("count.txt",), ("report",), ("report.title",), half_written_then_fail)
    with pytest.raises(RuntimeError):
        ws.pipeline(report=broken).run()
    assert ws.read("report/report.txt") == "n=2"
    assert (ws.root / ".state" / "lock.json").read_bytes() == lock_before
    assert reasons(ws.pipeline())["report"] == ('param report.title changed "n" → "boom"',)
    ws.calls.clear()
    assert ws.pipeline().run() == ["report"] and ws.read("report/report.txt") == "boom=2"


def test_killed_directory_swap_and_temporaries_are_recovered(ws):
    ws.pipeline().run()
    # Simulate kill -9 between the two renames of atomic_dir and a torn temp file.
    os.replace(ws.root / "report", ws.root / ".report.old")
    (ws.root / ".count.txt.tmp-abc").write_text("torn")
    assert reasons(ws.pipeline())["report"] == ("output 'report' is missing",)
    assert ws.pipeline().run() == []
    assert ws.read("report/report.txt") == "n=2"
    assert not (ws.root / ".count.txt.tmp-abc").exists()


def test_output_written_but_lock_not_updated_reruns_the_stage(ws):
    ws.pipeline().run()
    atomic.write_text(ws.root / "count.txt", "7")  # as if killed after the rename, before the lock write
    assert ws.pipeline().run() == ["count"]
    assert ws.read("count.txt") == "2"


def test_stage_that_forgets_its_output_is_an_error(ws):
    lazy = Stage("prepare", ("raw.txt",), ("out/upper.txt",), ("prepare",), lambda: None)
    with pytest.raises(RunnerError, match="did not write its output 'out/upper.txt'"):
        ws.pipeline(prepare=lazy).run()


def test_missing_dependency_is_named(ws):
    (ws.root / "raw.txt").unlink()
    with pytest.raises(RunnerError, match="needs 'raw.txt', which does not exist"):
        ws.pipeline().run()


def test_added_and_removed_dependencies_and_params(ws):
    ws.pipeline().run()
    (ws.root / "extra.txt").write_text("x")
    prepare = ws.pipeline().stages[0]
    changed = Stage("prepare", ("extra.txt",), prepare.outs, ("prepare", "count"), prepare.run)
    status = reasons(ws.pipeline(prepare=changed))["prepare"]
    assert status == ("param count added", "dependency 'raw.txt' removed", "dependency 'extra.txt' added")


def test_duplicate_outputs_are_rejected(ws):
    clash = Stage("count", ("out/upper.txt",), ("out/upper.txt",), (), lambda: None)
    with pytest.raises(RunnerError, match="output of both 'prepare' and 'count'"):
        ws.pipeline(count=clash)


def test_hash_cache_avoids_rehashing_unchanged_files(ws, monkeypatch):
    ws.pipeline().run()
    import pipeline.engine.hashing as hashing

    def no_hashing(path):
        raise AssertionError(f"re-hashed {path}")

    monkeypatch.setattr(hashing, "sha256_file", no_hashing)
    assert ws.pipeline().run() == []


def test_second_concurrent_run_without_waiting_fails_clearly(ws):
    state = ws.root / ".state"
    state.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import fcntl, os, sys, time
            f = open({str(state / 'run.lock')!r}, 'a+')
            fcntl.flock(f, fcntl.LOCK_EX)
            f.write(str(os.getpid())); f.flush()
            print('locked', flush=True)
            sys.stdin.read()
        """)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(RunnerError, match=rf"another lmprep run \(PID {holder.pid}\) is running"):
            ws.pipeline().run(wait=False)
        assert ws.calls == []
    finally:
        holder.communicate("")
    assert ws.pipeline().run() == ["prepare", "count", "report"]


def test_lock_is_released_after_a_failed_run(ws):
    failing = Stage("prepare", ("raw.txt",), ("out/upper.txt",), (), lambda: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        ws.pipeline(prepare=failing).run()
    with open(ws.root / ".state" / "run.lock") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_kill_9_mid_stage_keeps_previous_state_and_next_run_recovers(ws):
    ws.pipeline().run()
    lock_before = (ws.root / ".state" / "lock.json").read_bytes()
    script = textwrap.dedent(f"""
        import os, signal
        from pathlib import Path
        from pipeline.engine import atomic
        from pipeline.engine.runner import Pipeline, Stage
        root = Path({str(ws.root)!r})

        def die_midway():
            with atomic.atomic_dir(root / "report") as staging:
                (staging / "report.txt").write_text("partial")
                os.kill(os.getpid(), signal.SIGKILL)

        stages = [Stage("report", ("count.txt",), ("report",), ("report.title",), die_midway)]
        Pipeline(stages, param_value=lambda key: "changed", state_dir=".state", root=root).run()
    """)
    killed = subprocess.run([sys.executable, "-c", script], cwd=Path(__file__).resolve().parents[2])
    assert killed.returncode == -9
    assert ws.read("report/report.txt") == "n=2"
    assert (ws.root / ".state" / "lock.json").read_bytes() == lock_before
    assert any(".tmp-" in p.name for p in ws.root.iterdir())  # the killed writer's staging dir
    assert ws.pipeline().run() == []  # nothing changed from this pipeline's point of view
    assert not any(".tmp-" in p.name for p in ws.root.iterdir())


def test_clean_removes_outputs_of_named_stages_which_then_miss_them(ws):
    pipeline = ws.pipeline()
    pipeline.run()
    assert pipeline.clean(["prepare", "count"]) == ["out/upper.txt", "count.txt"]
    assert (ws.root / "raw.txt").exists() and (ws.root / "report" / "report.txt").exists()
    assert not (ws.root / "count.txt").exists()
    assert reasons(pipeline)["prepare"] == ("output 'out/upper.txt' is missing",)
    assert reasons(pipeline)["count"] == ("dependency 'out/upper.txt' is missing", "output 'count.txt' is missing")
    assert pipeline.clean(["prepare"]) == []


def test_two_pipelines_writing_beside_each_other_run_at_once(ws):
    """A run of another config (its own state dir) recovers only its own outputs' temporaries."""
    (ws.root / "ckpt").mkdir()
    script = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from pipeline.engine import atomic
        from pipeline.engine.runner import Pipeline, Stage
        root = Path({str(ws.root)!r})

        def train_slowly():
            with atomic.atomic_dir(root / "ckpt" / "default") as staging:
                (staging / "weights").write_text("default")
                print("training", flush=True)
                sys.stdin.readline()  # the other config runs now

        stages = [Stage("train", ("raw.txt",), ("ckpt/default",), (), train_slowly)]
        Pipeline(stages, param_value=lambda key: None, state_dir=".state-default", root=root).run()
    """)
    default = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               text=True, cwd=Path(__file__).resolve().parents[2])
    try:
        assert default.stdout.readline() == "training\n"

        def train_char():
            with atomic.atomic_dir(ws.root / "ckpt" / "char") as staging:
                (staging / "weights").write_text("char")

        char = [Stage("train", ("raw.txt",), ("ckpt/char",), (), train_char)]
        assert Pipeline(char, param_value=ws.param, state_dir=".state-char", root=ws.root).run() == ["train"]
    finally:
        default.communicate("go\n")
    assert default.returncode == 0
    assert ws.read("ckpt/default/weights") == "default" and ws.read("ckpt/char/weights") == "char"
    assert sorted(os.listdir(ws.root / "ckpt")) == ["char", "default"]


def test_lock_and_hash_cache_temporaries_of_a_killed_write_are_removed(ws):
    ws.pipeline().run()
    state = ws.root / ".state"
    orphans = [state / ".lock.json.tmp-abc", state / ".hashes.json.tmp-xyz"]
    for orphan in orphans:
        orphan.write_text("torn")
    assert ws.pipeline().run() == []
    assert not any(orphan.exists() for orphan in orphans)


def test_an_output_may_hold_a_later_stages_input_but_overlap_nothing_else(ws):
    ws.pipeline()  # 'out/upper.txt' is prepare's output and count's input
    over_upstream = Stage("report", ("count.txt",), ("out",), (), lambda: None, keys={"out": "report.dir"})
    with pytest.raises(RunnerError, match=r"^'out/upper.txt' lies inside report.dir 'out'; lmprep replaces"):
        ws.pipeline(report=over_upstream)
    over_raw = Stage("count", ("out/upper.txt",), ("raw.txt",), (), lambda: None)
    with pytest.raises(RunnerError, match=r"^'raw.txt' is the same path as the input 'raw.txt' of stage 'prepare'"):
        ws.pipeline(count=over_raw)
    with pytest.raises(RunnerError, match=r"^'out/upper.txt' lies inside the directory 'out' that stage 'prepare'"):
        ws.pipeline(prepare=Stage("prepare", ("raw.txt",), ("out/upper.txt",), (), lambda: None, scans=("out",)))
    with pytest.raises(RunnerError, match=r"^the project root '.*' is the same path as the directory '.' that stage "
                                          r"'prepare' scans for raw files; keep output_root and state_dir outside"):
        ws.pipeline(prepare=Stage("prepare", ("raw.txt",), ("out/upper.txt",), (), lambda: None, scans=(".",)))


def test_the_layout_check_looks_up_each_output_among_the_inputs_not_beside_each_one(ws, monkeypatch):
    """prepare's inputs are every raw file: the check compared each output with each input (100,000 files and 7
    outputs: seconds of the driver's time before any stage ran). Each output now looks up the inputs at, under and
    above it, so the comparisons of paths do not grow with the inputs; a clash among them is still the first one."""
    from pipeline.engine import locations

    raw = tuple(f"raw/{number:05d}.txt" for number in range(3000))
    many = Stage("prepare", (*raw, "raw.txt"), ("out/upper.txt",), (), lambda: None)
    compared = []
    inside = locations.inside
    monkeypatch.setattr(locations, "inside", lambda *paths: compared.append(paths) or inside(*paths))
    ws.pipeline(prepare=many)
    assert len(compared) < 100, f"{len(compared)} comparisons of paths for {len(raw)} inputs"
    clashing = Stage("prepare", (*raw[:2000], "out/upper.txt/x", "out", *raw[2000:]), ("out/upper.txt",), (),
                     lambda: None)
    with pytest.raises(RunnerError, match=r"^'out/upper.txt' contains the input 'out/upper.txt/x' of stage 'prepare'"):
        ws.pipeline(prepare=clashing)


def test_an_existing_output_the_stage_did_not_write_is_never_replaced(ws):
    (ws.root / "report").mkdir()
    (ws.root / "report" / "mine.txt").write_text("mine")
    with pytest.raises(RunnerError, match=r"^'report' already exists and is not what stage 'report' wrote"):
        ws.pipeline().run()
    assert ws.calls == [] and ws.read("report/mine.txt") == "mine"
    with pytest.raises(RunnerError, match="not what stage 'report' wrote"):
        ws.pipeline().clean(["report"])
    (ws.root / "report" / "mine.txt").unlink()  # an empty directory is free to take
    assert ws.pipeline().run() == ["prepare", "count", "report"]


def test_ownership_is_recorded_before_a_stage_writes_and_survives_a_deleted_lock(ws):
    ws.pipeline().run()
    owners = json.loads((ws.root / ".state" / "outputs.json").read_text())
    assert owners["outputs"] == {"out/upper.txt": "prepare", "count.txt": "count", "report": "report"}
    (ws.root / ".state" / "lock.json").unlink()
    assert ws.pipeline().run() == ["prepare", "count", "report"]
    (ws.root / ".state" / "outputs.json").unlink()  # a project locked before ownership was recorded
    assert ws.pipeline().run(force=True) == ["prepare", "count", "report"]


def test_state_files_are_read_within_bounds(ws, monkeypatch):
    """A FIFO would block the read for ever: the lock is refused in one line, the hash cache ignored (it only
    saves time; the next save replaces it), and a lock file larger than its bound is refused unread."""
    ws.pipeline().run()
    state = ws.root / ".state"
    (state / "hashes.json").unlink()
    os.mkfifo(state / "hashes.json")
    assert ws.pipeline().run() == [] and (state / "hashes.json").is_file()
    (state / "lock.json").unlink()
    os.mkfifo(state / "lock.json")
    with pytest.raises(RunnerError, match=r"^state file .*lock.json is a FIFO, not a regular file; .*; delete it"):
        ws.pipeline().run()
    (state / "lock.json").unlink()
    ws.pipeline().run()
    monkeypatch.setattr(runner, "MAX_STATE_BYTES", 100)
    with pytest.raises(RunnerError, match=r"^state file .*lock.json is larger than 100 bytes, .*; delete it"):
        ws.pipeline().run()


def test_an_up_to_date_stage_names_the_scratch_an_interrupted_forced_run_left(ws):
    """It stayed without a word; it is kept (a forced run resumes from it) and named with its size."""
    ws.pipeline().run()
    prepare = dataclasses.replace(ws._prepare(), scratch=("out/upper.partial",))
    (ws.root / "out" / "upper.partial").mkdir()
    (ws.root / "out" / "upper.partial" / "record.json").write_text("{}")  # as a killed `run --force` leaves it
    assert ws.pipeline(prepare=prepare).run() == []
    assert (ws.root / "out" / "upper.partial" / "record.json").exists()
    assert any(line.startswith("'prepare' is up to date; out/upper.partial holds 2 bytes that an interrupted run left")
               for line in ws.log), ws.log


def test_a_stage_that_switches_mode_gives_that_as_its_one_reason(ws):
    prepare = ws._prepare()
    ws.pipeline(prepare=dataclasses.replace(prepare, mode="training")).run()
    other = dataclasses.replace(prepare, mode="reusing a file", params=(), code_version=2, deps=())
    assert reasons(ws.pipeline(prepare=other))["prepare"] == ("switched from training to reusing a file",)
    assert reasons(ws.pipeline(prepare=dataclasses.replace(prepare, code_version=2)))["prepare"] == (
        "code version changed 1 → 2",)  # no mode: the reasons as they were
