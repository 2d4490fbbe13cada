"""A content-addressed stage runner, in the manner of DVC, that knows no stage by name.

A :class:`Stage` declares its dependencies (files or directories), the config
keys it reads and its outputs. After a stage succeeds the runner records a lock
entry (``{state_dir}/lock.json``): the content hash of every dependency and
output and the value of every key. A stage is stale when it never ran, a
dependency's hash or a key's value differs from the entry, or an output is
missing or differs. Because dependencies are compared by content, a re-run
that rewrites byte-identical outputs leaves downstream stages up to date
(early cutoff) with no extra bookkeeping.

Hashes are cached by ``(size, mtime_ns, inode)``, so checking a pipeline over
gigabytes costs a ``stat`` per file. Stages write outputs atomically and the
lock entry is written only after a stage succeeds, so an interrupted stage
leaves the previous outputs and entry in place and is simply stale next time.
"""

from __future__ import annotations

import contextlib
import difflib
import errno
import fcntl
import json
import os
import shutil
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline import atomic
from pipeline.errors import RunnerError
from pipeline.hashing import HashCache

LOCK_VERSION = 1


@dataclass(frozen=True)
class Stage:
    """One step: ``run`` turns ``deps`` into ``outs`` reading the config keys ``params``."""

    name: str
    deps: tuple[str, ...]
    outs: tuple[str, ...]
    params: tuple[str, ...]
    run: Callable[[], None]
    run_forced: Callable[[], None] | None = None  # what ``run(force=True)`` calls instead of ``run``, if set
    preview: Callable[[], str | None] | None = None  # for status: what a run would do that the user should know


@dataclass(frozen=True)
class StageStatus:
    """Why a stage would run; no reasons means up to date."""

    name: str
    reasons: tuple[str, ...]
    warning: str | None = None  # from the stage's ``preview``, for a stale stage

    @property
    def stale(self) -> bool:
        return bool(self.reasons)

    def describe(self) -> str:
        return "; ".join(self.reasons) if self.reasons else "up to date"


class Pipeline:
    """Stages in pipeline order plus the state that says which of them are stale."""

    def __init__(self, stages: Sequence[Stage], *, param_value: Callable[[str], Any],
                 state_dir: str | os.PathLike[str], root: str | os.PathLike[str] = ".",
                 log: Callable[[str], None] = lambda message: None):
        self.stages = list(stages)
        self.root = Path(root)
        self.state_dir = self.root / state_dir
        self._param_value = param_value
        self._log = log
        self._upstream = _upstream_map(self.stages)

    @property
    def lock_path(self) -> Path:
        return self.state_dir / "lock.json"

    def status(self, targets: Sequence[str] | None = None) -> list[StageStatus]:
        """Per stage (the targets and their upstream), what changed since its last run.

        A stage whose upstream is stale is reported stale too, since the
        upstream run may change its inputs; :meth:`run` decides for sure.
        """
        lock = self._read_lock()
        cache = self._hash_cache()
        stale: list[str] = []
        report = []
        for stage in self._selected(targets):
            reasons = self._reasons(stage, lock.get(stage.name), cache) or [
                f"upstream '{name}' is stale" for name in stale[::-1] if name in self._upstream[stage.name]][:1]
            if reasons:
                stale.append(stage.name)
            warning = stage.preview() if reasons and stage.preview is not None else None
            report.append(StageStatus(stage.name, tuple(reasons), warning))
        cache.save()
        return report

    def run(self, targets: Sequence[str] | None = None, *, force: bool = False) -> list[str]:
        """Run the stale stages among ``targets`` (all if None) and their upstream; return those run.

        ``force`` re-runs the targets themselves even when up to date (not their upstream),
        through their ``run_forced`` where they have one.
        """
        selected = self._selected(targets)
        forced = {s.name for s in selected if force and (targets is None or s.name in targets)}
        with self._exclusive():
            self._recover_outputs(selected)
            return [stage.name for stage in selected if self._run_if_stale(stage, stage.name in forced)]

    def clean(self, names: Sequence[str]) -> list[str]:
        """Delete the outputs of the named stages and forget their lock entries.

        Returns the paths removed. Dependencies that no stage produces (the raw
        data) are never touched. A directory left empty by the removal (say
        ``data/tokenizer/``) goes too.
        """
        removed = []
        with self._exclusive():
            lock = self._read_lock()
            for stage in self.stages:
                if stage.name in names:
                    removed += [out for out in stage.outs if _remove(self.root / out)]
                    for out in stage.outs:
                        _remove_empty_parents(self.root / out, self.root)
                    lock.pop(stage.name, None)
            atomic.write_json(self.lock_path, {"version": LOCK_VERSION, "stages": lock})
        return removed

    # -- internals --------------------------------------------------------

    def _run_if_stale(self, stage: Stage, forced: bool) -> bool:
        lock = self._read_lock()
        cache = self._hash_cache()
        reasons = ["forced"] if forced else self._reasons(stage, lock.get(stage.name), cache)
        cache.save()
        if not reasons:
            self._log(f"'{stage.name}' is up to date")
            return False
        self._log(f"running '{stage.name}': {'; '.join(reasons)}")
        self._check_deps_exist(stage)
        deps = {dep: cache.tree_hash(self.root / dep) for dep in stage.deps}
        (stage.run_forced if forced and stage.run_forced is not None else stage.run)()
        self._record(stage, deps, cache)
        return True

    def _record(self, stage: Stage, deps: dict[str, str], cache: HashCache) -> None:
        outs = {}
        for out in stage.outs:
            if not (self.root / out).exists():
                raise RunnerError(f"stage '{stage.name}' finished but did not write its output '{out}'")
            outs[out] = cache.tree_hash(self.root / out)
        cache.save()
        lock = self._read_lock()
        lock[stage.name] = {"deps": deps, "outs": outs, "params": self._params(stage)}
        atomic.write_json(self.lock_path, {"version": LOCK_VERSION, "stages": lock})

    def _reasons(self, stage: Stage, entry: dict[str, Any] | None, cache: HashCache) -> list[str]:
        if entry is None:
            return ["never run"]
        return (_param_changes(entry.get("params", {}), self._params(stage))
                + self._dep_changes(stage, entry.get("deps", {}), cache)
                + self._out_changes(stage, entry.get("outs", {}), cache))

    def _params(self, stage: Stage) -> dict[str, Any]:
        return {key: self._param_value(key) for key in stage.params}

    def _dep_changes(self, stage: Stage, recorded: dict[str, str], cache: HashCache) -> list[str]:
        changes = [f"dependency '{dep}' removed" for dep in recorded if dep not in stage.deps]
        for dep in stage.deps:
            path = self.root / dep
            if dep not in recorded:
                changes.append(f"dependency '{dep}' added")
            elif not path.exists():
                changes.append(f"dependency '{dep}' is missing")
            elif cache.tree_hash(path) != recorded[dep]:
                changes.append(f"dependency '{dep}' changed")
        return changes

    def _out_changes(self, stage: Stage, recorded: dict[str, str], cache: HashCache) -> list[str]:
        changes = []
        for out in stage.outs:
            path = self.root / out
            if not path.exists():
                changes.append(f"output '{out}' is missing")
            elif out not in recorded:
                changes.append(f"output '{out}' is new")
            elif cache.tree_hash(path) != recorded[out]:
                changes.append(f"output '{out}' was modified")
        return changes

    def _check_deps_exist(self, stage: Stage) -> None:
        for dep in stage.deps:
            if not (self.root / dep).exists():
                raise RunnerError(f"stage '{stage.name}' needs '{dep}', which does not exist; "
                                  "restore it or run the stage that makes it")

    def _selected(self, targets: Sequence[str] | None) -> list[Stage]:
        """The targets plus everything upstream of them, in pipeline order."""
        if targets is None:
            return list(self.stages)
        names = [s.name for s in self.stages]
        for target in targets:
            if target not in names:
                close = difflib.get_close_matches(target, names, n=1)
                hint = f"did you mean '{close[0]}'? " if close else ""
                raise RunnerError(f"unknown stage '{target}'; {hint}stages: {', '.join(names)}")
        wanted = set(targets)
        for stage in reversed(self.stages):
            if stage.name in wanted:
                wanted |= self._upstream[stage.name]
        return [s for s in self.stages if s.name in wanted]

    def _recover_outputs(self, stages: Sequence[Stage]) -> None:
        """Undo half-finished directory swaps and delete temporaries of killed writers."""
        for stage in stages:
            for out in stage.outs:
                path = self.root / out
                atomic.recover_dir(path)
                atomic.remove_stale_temporaries(path.parent)

    def _hash_cache(self) -> HashCache:
        return HashCache(self.state_dir / "hashes.json")

    def _read_lock(self) -> dict[str, Any]:
        try:
            data = json.loads(self.lock_path.read_text("utf-8"))
        except FileNotFoundError:
            return {}
        except ValueError as exc:
            raise RunnerError(f"{self.lock_path} is corrupt ({exc}); delete it to re-run every stage") from None
        if data.get("version") != LOCK_VERSION:
            return {}
        return data.get("stages", {})

    @contextlib.contextmanager
    def _exclusive(self) -> Iterator[None]:
        """Hold ``{state_dir}/run.lock`` so that two runs never interleave."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        path = self.state_dir / "run.lock"
        with open(path, "a+", encoding="utf-8") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                raise RunnerError(_busy_message(path)) from None
            handle.seek(0)
            handle.truncate()
            handle.write(f"{os.getpid()}\n")
            handle.flush()
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


def _remove(path: Path) -> bool:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()
    else:
        return False
    return True


def _remove_empty_parents(path: Path, root: Path) -> None:
    """Remove the directories above ``path`` that are empty, up to (not including) ``root``."""
    root = root.resolve()
    parent = path.parent.resolve()
    while parent != root and root in parent.parents:
        try:
            parent.rmdir()
        except OSError:  # not empty, or not ours to remove
            return
        parent = parent.parent


def _busy_message(path: Path) -> str:
    pid = path.read_text("utf-8").strip() or "unknown"
    return (f"another lmprep run (pid {pid}) is running in this directory; wait for it to finish "
            f"(the lock {path} is released when that process exits)")


def _upstream_map(stages: Sequence[Stage]) -> dict[str, set[str]]:
    """Stage name → names of all stages it depends on, directly or not.

    A dependency on an output path (or on a path inside an output directory)
    makes the producing stage upstream. Producers must come earlier.
    """
    producer: dict[str, str] = {}
    upstream: dict[str, set[str]] = {}
    for stage in stages:
        if stage.name in upstream:
            raise RunnerError(f"two stages are named '{stage.name}'")
        direct = {name for dep in stage.deps for out, name in producer.items() if _within(dep, out)}
        upstream[stage.name] = direct.union(*(upstream[name] for name in direct))
        for out in stage.outs:
            if out in producer:
                raise RunnerError(f"'{out}' is an output of both '{producer[out]}' and '{stage.name}'")
            producer[out] = stage.name
    return upstream


def _within(path: str, directory: str) -> bool:
    path, directory = os.path.normpath(path), os.path.normpath(directory)
    return path == directory or path.startswith(directory + os.sep)


def _param_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    changes = [f"param {key} removed" for key in old if key not in new]
    for key, value in new.items():
        if key not in old:
            changes.append(f"param {key} added")
        else:
            changes.extend(_value_changes(key, old[key], value))
    return changes


def _value_changes(key: str, old: Any, new: Any) -> list[str]:
    """Name the leaf keys that differ: ``param train.steps changed 300 → 500``."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [change for name in sorted(set(old) | set(new))
                for change in _value_changes(f"{key}.{name}", old.get(name), new.get(name))]
    if atomic.dumps_json(old, indent=None) == atomic.dumps_json(new, indent=None):
        return []
    return [f"param {key} changed {_short(old)} → {_short(new)}"]


def _short(value: Any, limit: int = 60) -> str:
    text = atomic.dumps_json(value, indent=None)
    return text if len(text) <= limit else text[: limit - 1] + "…"
