"""A content-addressed stage runner, in the manner of DVC, that knows no stage by name.

A :class:`Stage` declares its dependencies (files or directories), the config
keys it reads, its outputs and the version of the code that makes them. After a
stage succeeds the runner records a lock entry (``{state_dir}/lock.json``): the
content hash of every dependency and output, the value of every key and the
code version. A stage is stale when it never ran, its code version, a
dependency's hash or a key's value differs from the entry, or an output is
missing or differs. Because dependencies are compared by content, a re-run
that rewrites byte-identical outputs leaves downstream stages up to date
(early cutoff) with no extra bookkeeping.

Hashes are cached by ``(size, mtime_ns, ctime_ns, inode)``, so checking a
pipeline over gigabytes costs a ``stat`` per file. Stages write outputs atomically and the
lock entry is written only after a stage succeeds, so an interrupted stage
leaves the previous outputs and entry in place and is simply stale next time.

An output is replaced as a whole, so the runner refuses, before anything runs,
a layout where an output equals, contains or lies inside another output, an
input, a directory a stage scans, the state dir or a guarded path (the config
file), or equals or contains the project root; and it replaces or deletes an
existing path only when that path is the stage's own previous output, which it
records in ``{state_dir}/outputs.json`` before the stage first writes there, or
what the stage ``adopts`` as its own (``train``: a checkpoint it wrote to object
storage from another machine, which it resumes or sets aside, never deletes).
A stale stage that is ``reusable`` first looks in the project's run cache
(:mod:`pipeline.engine.run_cache`) for outputs another config made the same way.
"""

from __future__ import annotations

import bisect
import contextlib
import difflib
import functools
import json
import os
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.engine import atomic, file_sets, hashing, local_files, locations, run_lock, stage_log, storage
from pipeline.engine.file_sets import FileSet, Found
from pipeline.engine.hashing import HashCache
from pipeline.engine.locations import Location
from pipeline.engine.reasons import (
    code_version_changes,
    dep_changes,
    file_set_changes,
    out_changes,
    param_changes,
)
from pipeline.engine.run_cache import RunCache
from pipeline.errors import RunnerError, StorageError

LOCK_VERSION = 2  # 2: a glob's files are one digest (``globs``), not a hash each in ``deps``
OWNERS_VERSION = 1
MAX_STATE_BYTES = 64 << 20  # lock.json and outputs.json: a few kilobytes per stage


@dataclass(frozen=True)
class Stage:
    """One step: ``run`` turns ``deps`` into ``outs`` reading the config keys ``params``.

    ``code_version`` stands for the code that shapes the outputs: whoever changes that
    code so that the same deps and params would give different outputs bumps it, and
    the stage re-runs where it ran with another version (an upgrade of the code is a
    change of input like any other).
    ``scans`` are directories the stage reads files from by pattern (a glob's
    base), which no output may overlap; ``keys`` names the config key that set
    a path, for messages; ``scratch`` are paths the stage keeps between attempts
    (finished parts of an interrupted run), which ``clean`` removes with the outputs.
    ``preview`` tells status what a run would do that the user should know, given the stale stages upstream.
    ``mode`` names how the stage makes its outputs where it has more than one way (the tokenizer's:
    training one, or reusing a file); a switch of mode is given as its one reason, not as every
    setting and input of the other way that went or came.
    ``listed`` are the stamps of remote dependencies as the stage's globs listed them, so that telling whether
    they changed costs no request per file.
    ``file_sets`` are dependencies that are every file a glob matched (prepare's raw files): the lock records one
    digest per glob and the state dir a listing of the files (:mod:`pipeline.engine.file_sets`), so that the
    driver holds no record per file.
    """

    name: str
    deps: tuple[str, ...]
    outs: tuple[str, ...]
    params: tuple[str, ...]
    run: Callable[[], None]
    code_version: int = 1
    scans: tuple[str, ...] = ()
    keys: Mapping[str, str] = field(default_factory=dict)
    run_forced: Callable[[], None] | None = None  # what ``run(force=True)`` calls instead of ``run``, if set
    preview: Callable[[Sequence[str]], str | None] | None = None
    adopts: Callable[[str], bool] | None = None  # whether an output this state dir never claimed is the stage's own
    reusable: bool = False  # outputs the same wherever written: the run cache may link them from another config
    scratch: tuple[str, ...] = ()
    mode: str = ""
    listed: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    file_sets: tuple[FileSet, ...] = ()


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
                 state_dir: Location, root: Location = ".",
                 guarded: Mapping[str, str | os.PathLike[str]] | None = None,
                 run_cache: Location | None = None, names_root: Location | None = None,
                 log: Callable[[str], None] = lambda message: None, log_header: Mapping[str, str] | None = None):
        """``root`` is the project root, the directory relative paths start from; ``guarded``
        maps a description to a path that no output may overlap (the config file); ``run_cache`` is the
        directory of the project's run cache (:mod:`pipeline.engine.run_cache`), None for none, and
        ``names_root`` the directory (from the current one; by default the root) its keys name raw inputs from;
        ``log_header``: lines (key: value) that head each stage's log (:mod:`pipeline.engine.stage_log`)."""
        self.stages = list(stages)
        self.root = Path(root)
        self.state_dir = self.root / state_dir
        self._runs = None if run_cache is None else RunCache(self.root / run_cache, self.root, names_root)
        self._param_value = param_value
        self._log, self._log_header = log, dict(log_header or {})
        self._upstream = _upstream_map(self.stages)
        self._cache_warned = False
        self._unwritable: str | None = None  # why the state dir takes no file, when a run found it so
        # stage → its glob digests and files' records, from a lock of version 1, which recorded a hash per file
        self._version_1: dict[str, tuple[list[str], list[list[tuple[str, str]]]]] = {}
        kept = {f"the state dir {os.fspath(state_dir)!r}": self.state_dir,
                **({f"the run cache {os.fspath(run_cache)!r}": self.root / run_cache} if run_cache is not None else {})}
        _check_homes(self.stages, self.root, kept)
        guarded_paths = {**{label: self.root / path for label, path in (guarded or {}).items()}, **kept}
        _check_layout(self.stages, self.root, guarded_paths)
        _check_linked(self.stages, self.root, guarded_paths)

    @property
    def owners_path(self) -> Path:
        return self.state_dir / "outputs.json"

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
            stale_upstream = [name for name in stale if name in self._upstream[stage.name]]
            entry = lock.get(stage.name)
            found = functools.partial(self._check_files, stage, entry, cache, None)
            reasons = self._reasons(stage, entry, cache, found) or [
                f"upstream '{name}' is stale" for name in stale_upstream[::-1]][:1]
            if reasons:
                stale.append(stage.name)
            if reasons:
                warning = stage.preview(stale_upstream) if stage.preview is not None else None
            else:  # what an interrupted run left: a forced run resumes from it, `lmprep clean` removes it
                warning = local_files.leftover_note(self.root, stage.scratch)
            report.append(StageStatus(stage.name, tuple(reasons), warning))
        self._save_cache(cache)
        return report

    def run(self, targets: Sequence[str] | None = None, *, force: bool = False, wait: bool = True) -> list[str]:
        """Run the stale stages among ``targets`` (all if None) and their upstream; return those run.

        ``force`` re-runs the targets themselves even when up to date (not their upstream),
        through their ``run_forced`` where they have one.
        While another run holds this state dir, wait for it (saying so), or with
        ``wait=False`` raise RunnerError naming it.
        """
        selected = self._selected(targets)
        forced = {s.name for s in selected if force and (targets is None or s.name in targets)}
        with self._exclusive(wait=wait):
            self._check_owned(selected)
            self._recover_outputs(selected)
            return [stage.name for stage in selected if self._run_if_stale(stage, stage.name in forced)]

    def clean(self, names: Sequence[str]) -> list[str]:
        """Delete the outputs of the named stages.

        Returns the paths removed. Dependencies that no stage produces (the raw
        data) are never touched. A directory left empty by the removal (say
        ``data/tokenizer/``) goes too. The lock entries stay, so that the reason
        to run a cleaned stage again is that its output is missing.
        """
        removed = []
        with self._exclusive():
            self._check_owned([stage for stage in self.stages if stage.name in names])
            for stage in self.stages:
                if stage.name in names:
                    removed += [out for out in (*stage.outs, *stage.scratch) if _remove(self._where(out))]
                    for out in stage.outs:
                        if not locations.is_url(out):
                            _remove_empty_parents(self.root / out, self.root)
        return removed

    # -- internals --------------------------------------------------------

    def _run_if_stale(self, stage: Stage, forced: bool) -> bool:
        lock = self._read_lock()
        cache = self._hash_cache()
        entry = lock.get(stage.name)
        pending = self._pending_listing(stage)
        try:
            found = self._check_files(stage, entry, cache, pending)
            reasons = ["forced"] if forced else self._reasons(stage, entry, cache, lambda: found)
            self._save_cache(cache)
            if not reasons:
                self._refresh_listing(stage, lock, pending)
                leftover = local_files.leftover_note(self.root, stage.scratch)
                self._log(f"'{stage.name}' is up to date" + (f"; {leftover}" if leftover else ""))
                return False
            self._run_stale(stage, forced, reasons, cache, found, pending)
            return True
        finally:
            if pending is not None:
                pending.discard()

    def _run_stale(self, stage: Stage, forced: bool, reasons: list[str], cache: HashCache, found: list[Found],
                   pending: file_sets.PendingListing | None) -> None:
        if self._unwritable is not None:
            raise RunnerError(f"'{stage.name}' must run ({'; '.join(reasons)}), but {self._unwritable}; make it "
                              "writable, or run where the project can be written")
        self._log(f"running '{stage.name}': {'; '.join(reasons)}")
        self._check_deps_exist(stage, cache, found)
        for out in map(self._where, stage.outs):
            if isinstance(out, str):
                storage.check_container(out)
        deps = {dep: cache.tree_hash(self._where(dep)) for dep in stage.deps}
        globs = [[fileset.name, result.digest] for fileset, result in zip(stage.file_sets, found)]
        key = (self._runs.key(stage, self._params(stage), deps, globs, self.stages)
               if self._runs and stage.reusable else None)
        self._claim(stage)
        with stage_log.recording(stage_log.log_path(self.state_dir, stage.name), stage=stage.name, warn=self._log,
                                 header={**self._log_header, "reason": "; ".join(reasons)}):
            reused = self._runs.reuse(key, stage, cache) if key is not None and not forced else None
            if reused is None:
                with hashing.vouching(cache):  # what it hashed of the inputs, the stage's tasks need not hash again
                    (stage.run_forced if forced and stage.run_forced is not None else stage.run)()
            else:
                reuse = (f"'{stage.name}' reused from {locations.openable(reused)}: the same inputs, settings and code "
                         "version ran there")
                self._log(reuse)
                stage_log.note(reuse)
        outs = self._record(stage, deps, globs, cache, pending)
        if key is not None:
            self._runs.remember(key, outs)

    def _record(self, stage: Stage, deps: dict[str, str], globs: list[list[str]], cache: HashCache,
                pending: file_sets.PendingListing | None) -> dict[str, str]:
        outs = {}
        for out in stage.outs:
            if not cache.exists(self._where(out)):
                raise RunnerError(f"stage '{stage.name}' finished but did not write its output '{out}'")
            outs[out] = cache.tree_hash(self._where(out))
        self._save_cache(cache)
        if pending is not None:  # before the lock: a listing that the lock's entry did not record names nothing
            pending.commit()
        lock = self._read_lock()
        lock[stage.name] = {"code_version": stage.code_version, "deps": deps, "outs": outs,
                            "params": self._params(stage), **({"mode": stage.mode} if stage.mode else {}),
                            **({"globs": globs} if stage.file_sets else {})}
        self._write_lock(lock)
        return outs

    def _write_lock(self, lock: dict[str, Any]) -> None:
        atomic.write_json(self.lock_path, {"version": LOCK_VERSION, "stages": lock})
        self._version_1.clear()

    def _check_files(self, stage: Stage, entry: dict[str, Any] | None, cache: HashCache,
                     pending: file_sets.PendingListing | None) -> list[Found]:
        """The stage's globs' files now beside its last run's (:func:`pipeline.engine.file_sets.check`), their
        records written to ``pending`` when given. Changes are named where the listing is the entry's."""
        if not stage.file_sets:
            return []
        recorded = (entry or {}).get("globs", [])
        with self._previous_listing(stage) as listing:
            named = [index < len(recorded) and index < len(listing.digests)
                     and recorded[index] == [fileset.name, listing.digests[index]]
                     for index, fileset in enumerate(stage.file_sets)]
            found = file_sets.check(stage.file_sets, listing, named, cache, os.fspath(self.root), pending)
        if pending is not None:
            pending.finish([result.digest for result in found])
        return found

    @contextlib.contextmanager
    def _previous_listing(self, stage: Stage) -> Iterator[file_sets.Listing]:
        """The listing of the stage's files as its last run found them: on disk, or from a lock of version 1."""
        if stage.name in self._version_1:
            yield file_sets.listed(*self._version_1[stage.name])
            return
        with file_sets.read_listing(file_sets.listing_path(self.state_dir, stage.name)) as listing:
            yield listing

    def _pending_listing(self, stage: Stage) -> file_sets.PendingListing | None:
        """Where to write the listing of the stage's files now; None for a stage without globs, or where the state
        dir takes no file."""
        if not stage.file_sets or self._unwritable is not None:
            return None
        return file_sets.PendingListing(file_sets.listing_path(self.state_dir, stage.name))

    def _refresh_listing(self, stage: Stage, lock: dict[str, Any], pending: file_sets.PendingListing | None) -> None:
        """Put in place the listing of an up-to-date stage's files (the same hashes, their stamps now), and write
        a lock of version 1 as this version's."""
        if pending is None:
            return
        pending.commit()
        if stage.name in self._version_1:
            with contextlib.suppress(OSError):
                self._write_lock(lock)

    def _reasons(self, stage: Stage, entry: dict[str, Any] | None, cache: HashCache,
                 found: Callable[[], list[Found]]) -> list[str]:
        if entry is None:
            return ["never run"]
        if stage.mode and entry.get("mode", stage.mode) != stage.mode:
            return [f"switched from {entry['mode']} to {stage.mode}"]
        return (code_version_changes(entry.get("code_version"), stage.code_version)
                + param_changes(entry.get("params", {}), self._params(stage))
                + file_set_changes(stage.file_sets, entry.get("globs", []), found() if stage.file_sets else [],
                                   self._shown)
                + dep_changes(stage.deps, entry.get("deps", {}), cache, self._where, self._shown)
                + out_changes(stage.outs, entry.get("outs", {}), cache, self._where, self._shown))

    def _where(self, path: str) -> Path | str:
        """A stage's path as the file system sees it: under the project root, or a URL as it is."""
        return path if locations.is_url(path) else self.root / path

    def _shown(self, path: str) -> str:
        """A stage's path (recorded relative to the project root) as the user opens it from the current
        directory: relative while below it, else absolute; a URL as it is."""
        return locations.openable(self._where(path))

    def _params(self, stage: Stage) -> dict[str, Any]:
        return {key: self._param_value(key) for key in stage.params}

    def _check_deps_exist(self, stage: Stage, cache: HashCache, found: Sequence[Found]) -> None:
        missing = [result.missing for result in found if result.missing is not None]
        for dep in [*missing, *stage.deps]:
            if not cache.exists(self._where(dep)):
                raise RunnerError(f"stage '{stage.name}' needs '{self._shown(dep)}', which does not exist; "
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
        """Undo half-finished directory swaps and delete temporaries of killed writers.

        Only temporaries of these outputs (and of the lock, hash cache and listings) whose
        writer is dead go: a run of another pipeline writing beside them is safe.
        """
        for stage in stages:
            for out in stage.outs:
                if locations.is_url(out):
                    continue  # a remote output is never renamed: an attempt's files go when the next one commits
                path = self.root / out
                atomic.recover_dir(path)
                atomic.remove_orphaned_temporaries(path)
        listings = [file_sets.listing_path(self.state_dir, stage.name) for stage in stages if stage.file_sets]
        for state_file in (self.lock_path, self.owners_path, self._hash_cache().path, *listings):
            atomic.remove_orphaned_temporaries(state_file)

    def _check_owned(self, stages: Sequence[Stage]) -> None:
        """Refuse to replace or delete an existing output that is not the stage's own previous output."""
        owners = self._owners()
        for stage in stages:
            for out in stage.outs:
                if (owners.get(os.path.normpath(out)) != stage.name and _holds_anything(self._where(out))
                        and not (stage.adopts is not None and stage.adopts(out))):
                    raise RunnerError(
                        f"{_describe(stage, out)} already exists and is not what stage '{stage.name}' wrote "
                        f"(according to {self.owners_path}); lmprep replaces an output as a whole, so point it "
                        f"at a new or empty path, or move {out!r} away"
                    )

    def _claim(self, stage: Stage) -> None:
        """Record, before the stage writes, that its outputs are its own (see :meth:`_check_owned`)."""
        owners = self._read_owners()
        claimed = {**owners, **{os.path.normpath(out): stage.name for out in stage.outs}}
        if claimed != owners:
            atomic.write_json(self.owners_path, {"version": OWNERS_VERSION, "outputs": claimed})

    def _owners(self) -> dict[str, str]:
        """Output path → the stage that writes it: the claims, and the lock for outputs written before them."""
        recorded = {os.path.normpath(out): name for name, entry in self._read_lock().items()
                    for out in entry.get("outs", {})}
        return {**recorded, **self._read_owners()}

    def _read_owners(self) -> dict[str, str]:
        return _read_state_file(self.owners_path, OWNERS_VERSION, "outputs",
                                if_corrupt="delete it and move away the outputs lmprep then refuses to replace")

    def _hash_cache(self) -> HashCache:
        return HashCache(self.state_dir / "hashes.json",
                         listed={url: stamp for stage in self.stages for url, stamp in stage.listed.items()})

    def _save_cache(self, cache: HashCache) -> None:
        """Save the hash cache if possible: it only saves time, so a full or read-only disk
        must not fail a command (``status``, a run with nothing to do); say so once."""
        try:
            cache.save()
        except OSError as exc:
            if not self._cache_warned:
                self._cache_warned = True
                reason = os.strerror(exc.errno).lower() if exc.errno else str(exc)
                self._log(f"warning: could not save the hash cache {cache.path} ({reason}); "
                          "files will be hashed again next time")

    def _read_lock(self) -> dict[str, Any]:
        return _read_state_file(self.lock_path, LOCK_VERSION, "stages", if_corrupt="delete it to re-run every stage",
                                older={1: self._from_version_1})

    def _from_version_1(self, entries: dict[str, Any]) -> dict[str, Any]:
        """A lock of version 1, which recorded a hash per file of a glob, as this version's: the glob's files one
        digest, their hashes kept in memory (as that lock held them) to name the changes until the lock is
        written again."""
        self._version_1.clear()
        for stage in self.stages:
            entry = entries.get(stage.name)
            if not stage.file_sets or not isinstance(entry, dict) or not isinstance(entry.get("deps"), dict):
                continue
            deps = entry["deps"]
            files = {dep: digest for dep, digest in deps.items() if dep not in stage.deps}
            digests, records = file_sets.converted(stage.file_sets, files)
            self._version_1[stage.name] = digests, records
            globs = [[fileset.name, digest] for fileset, digest in zip(stage.file_sets, digests)]
            plain = {dep: deps[dep] for dep in stage.deps if dep in deps}
            entries[stage.name] = {**entry, "deps": plain, "globs": globs}
        return entries

    @contextlib.contextmanager
    def _exclusive(self, *, wait: bool = True) -> Iterator[None]:
        """Hold ``{state_dir}/run.lock`` so that two runs never interleave (:func:`pipeline.engine.run_lock.held`).

        Staleness is decided only once the lock is held, so a run that waited
        for another one does only what that one left to do; the lock ends with this process.
        A state dir that takes no file (read-only) lets a run find every stage up to date, and fails one that must
        run before it starts.
        """
        with run_lock.held(self.state_dir, wait=wait, log=self._log) as lock:
            self._unwritable = None if lock.writable else lock.why
            yield


def _read_state_file(path: Path, version: int, key: str, *, if_corrupt: str,
                     older: Mapping[int, Callable[[dict[str, Any]], dict[str, Any]]] | None = None) -> dict[str, Any]:
    """``key`` of a state file written by this version of lmprep, or by an older one that ``older`` converts;
    empty when it is missing or of another version."""
    try:
        data = json.loads(storage.read_bounded(path, MAX_STATE_BYTES, what="state file"))
    except FileNotFoundError:
        return {}
    except StorageError as exc:  # too large, a FIFO, a device
        raise RunnerError(f"{exc}; {if_corrupt}") from None
    except ValueError as exc:
        raise RunnerError(f"{path} is corrupt ({exc}); {if_corrupt}") from None
    if not isinstance(data, dict):
        return {}
    if data.get("version") in (older or {}) and isinstance(data.get(key), dict):
        return older[data["version"]](data[key])
    return data.get(key, {}) if data.get("version") == version else {}


def _check_homes(stages: Sequence[Stage], root: Path, state_dir: Mapping[str, Path]) -> None:
    """Refuse, before anything is created, a project root or state dir that is not a directory (a file,
    ``/dev/null``) or lies inside a directory a stage scans: outputs and state would land among the raw
    files, be read back as data or fail every later run."""
    homes = {f"the project root {os.fspath(root)!r}": root, **state_dir}
    for label, path in homes.items():
        if path.exists() and not path.is_dir():
            raise RunnerError(f"{label} is not a directory; lmprep keeps its outputs and state in directories")
    for stage in stages:
        for scanned in (path for path in stage.scans if not locations.is_url(path)):
            base = os.path.normpath(os.path.join(os.path.abspath(root), scanned))
            for label, path in homes.items():
                if locations.inside(os.path.abspath(path), base):
                    relation = "is the same path as" if base == os.path.abspath(path) else "lies inside"
                    raise RunnerError(f"{label} {relation} the directory {_describe(stage, scanned)} that stage "
                                      f"'{stage.name}' scans for raw files; keep output_root and state_dir outside "
                                      "every source's directory")


def _check_layout(stages: Sequence[Stage], root: Path, guarded: Mapping[str, Path]) -> None:
    """Refuse any output that overlaps what another output, an input or a guarded path needs kept.

    An output may contain a later stage's input (that stage reads what it
    writes); any other overlap means a swap would delete or shadow something.
    An input that holds the project root may hold outputs (a scanned directory
    may not: :func:`_check_homes`), but no output may be or hold it, nor the root itself. Paths
    are compared as written, normalised against the root; links are not followed.
    The inputs are every raw file, so they are not compared with each output one by one: each output looks up
    the inputs at or under it in the sorted inputs, and its own parent directories among them
    (:class:`_Inputs`); messages are built only for a clash.
    """
    project = os.path.abspath(root)

    def where(path: Location) -> str:
        if locations.is_url(path):
            return os.fspath(path).rstrip("/")
        return os.path.normpath(os.path.join(project, path))

    # (what it is, the stage it belongs to, the path as written, its absolute path): the few places other than inputs
    places = [("root", None, os.fspath(root), project), *(("guarded", None, label, where(path))
                                                          for label, path in guarded.items())]
    places += [("scanned", stage, path, where(path)) for stage in stages for path in stage.scans]
    places += [("output", stage, path, where(path)) for stage in stages for path in stage.outs]
    outputs = [path for kind, _, _, path in places if kind == "output"]
    inputs = _Inputs([(stage, path, where(path)) for stage in stages
                      for path in (*_files_near(stage.file_sets, outputs, where), *stage.deps)], project)
    for position, stage in enumerate(stages):
        later = {other.name for other in stages[position + 1:]}  # the stages that may read what this one writes
        for out in stage.outs:
            output = where(out)
            clash = next(((relation, kind, owner, name) for kind, owner, name, path in places
                          if not (kind == "output" and owner is stage and name == out)
                          and (relation := _overlap(output, path,
                                                    inside_counts=not locations.inside(project, path)))), None)
            clash = clash or inputs.first_clash(output, later)
            if clash:
                relation, kind, owner, name = clash
                raise RunnerError(
                    f"{_describe(stage, out)} {relation} {_place(kind, owner, name)}; lmprep replaces an "
                    "output as a whole, so outputs must not overlap inputs, other outputs, the state dir "
                    "or the config file"
                )


def _files_near(filesets: Sequence[FileSet], outputs: Sequence[str], where: Callable[[str], str]) -> Iterator[str]:
    """The files of the globs that an output might overlap, for :func:`_check_layout`: those of a glob whose base
    directory an output is, holds or lies inside, or that has a file outside its base (a ``..`` in the pattern).
    The others' files lie under a base that no output touches, so a driver over a million raw files compares
    none of them."""
    for fileset in filesets:
        base = where(fileset.base)
        if any(_overlap(output, base, inside_counts=True) for output in outputs) or not fileset.under_base():
            yield from fileset.paths


class _Inputs:
    """Every stage's inputs, for :func:`_check_layout`: their absolute paths sorted, so that those at or under an
    output are one range of them (found by bisection), and by path, so that an output's parent directories are
    looked up; the first clash is the first input in stage order, as a comparison one by one would find it."""

    def __init__(self, inputs: Sequence[tuple[Stage, str, str]], project: str):
        self._project = project
        self._where: dict[str, list[tuple[int, Stage, str]]] = {}  # absolute path → (position, stage, as written)
        for position, (stage, name, path) in enumerate(inputs):
            self._where.setdefault(path, []).append((position, stage, name))
        self._sorted = sorted(self._where)

    def first_clash(self, output: str, later: set[str]) -> tuple[str, str, Stage, str] | None:
        """``(relation, "input", stage, input)`` of the first input that ``output`` is, holds (unless a stage
        named in ``later``, after the output's, reads it) or lies inside (an input holding the project root
        aside)."""
        found = [(position, "is the same path as" if path == output else "contains", stage, name)
                 for path in self._under(output) for position, stage, name in self._where[path]
                 if stage.name not in later]
        found += [(position, "lies inside", stage, name) for path in _parents(output)
                  if path in self._where and not locations.inside(self._project, path)
                  for position, stage, name in self._where[path]]
        if not found:
            return None
        _, relation, stage, name = min(found, key=lambda clash: clash[0])
        return relation, "input", stage, name

    def _under(self, output: str) -> list[str]:
        """The inputs that are ``output`` or lie under it (``locations.inside``, for normalised paths)."""
        prefix = output.rstrip("/") + "/"
        start = bisect.bisect_left(self._sorted, prefix)
        under = self._sorted[start:bisect.bisect_left(self._sorted, prefix[:-1] + chr(ord("/") + 1), start)]
        return ([output] if output in self._where else []) + under


def _parents(path: str) -> list[str]:
    """The directories ``path`` lies inside by name (``/a`` and ``/`` of ``/a/b``; ``s3://bucket`` of
    ``s3://bucket/out``), as :func:`pipeline.engine.locations.inside` finds them for normalised paths."""
    parents = [path[:cut] for cut in range(1, len(path)) if path[cut] == "/"]
    return (["/"] if path.startswith("/") and path != "/" else []) + parents


def _check_linked(stages: Sequence[Stage], root: Path, guarded: Mapping[str, Path]) -> None:
    """Refuse an output that overlaps a guarded path once symbolic links are followed (a run cache under a link
    to the prepared data was written into it, so prepare found its output modified on every run). Only the
    guarded paths and the outputs are resolved: a few paths, where the inputs are every raw file."""
    real = {label: os.path.realpath(path) for label, path in guarded.items() if not locations.is_url(path)}
    for stage in stages:
        for out in (out for out in stage.outs if not locations.is_url(out)):
            output = os.path.realpath(root / out)
            for label, path in real.items():
                relation = _overlap(output, path, inside_counts=True)
                if relation:
                    raise RunnerError(f"{_describe(stage, out)} {relation} {label}, which is {path} once links "
                                      "are followed; lmprep replaces an output as a whole, so outputs must not "
                                      "overlap the state dir, the run cache or the config file")


def _place(kind: str, stage: Stage | None, name: str) -> str:
    """Name a path an output clashed with, for :func:`_check_layout`'s message."""
    if kind == "root":
        return f"the project root {name!r}"
    if kind == "guarded":
        return name
    if kind == "scanned":
        return f"the directory {_describe(stage, name)} that stage '{stage.name}' scans"
    if kind == "output":
        return _describe(stage, name)
    return f"the input {repr(name) if name in stage.outs else _describe(stage, name)} of stage '{stage.name}'"


def _overlap(output: str, path: str, *, inside_counts: bool) -> str | None:
    """How ``output`` overlaps ``path`` (both absolute and normalised), or None."""
    if output == path:
        return "is the same path as"
    if locations.inside(path, output):
        return "contains"
    if inside_counts and locations.inside(output, path):
        return "lies inside"
    return None


def _describe(stage: Stage, path: str) -> str:
    key = stage.keys.get(path)
    return f"{key} {path!r}" if key else repr(path)


def _holds_anything(path: Location) -> bool:
    """Whether ``path`` is a file, or a directory with any entry (a swap would remove them)."""
    if isinstance(path, str):
        return storage.holds_anything(path)
    if path.is_dir():
        return any(path.iterdir())
    return path.exists() or path.is_symlink()


def _remove(path: Location) -> bool:
    if isinstance(path, str):
        found = storage.holds_anything(path)
        storage.remove(path)
        return found
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


def direct_upstream(stages: Sequence[Stage]) -> dict[str, list[str]]:
    """Stage name → the stages that write what it reads (an output it depends on, or a path inside
    one), in pipeline order: the edges of ``lmprep dag``. Producers must come earlier."""
    producer: dict[str, str] = {}
    direct: dict[str, list[str]] = {}
    for stage in stages:
        if stage.name in direct:
            raise RunnerError(f"two stages are named '{stage.name}'")
        found = {name for out, name in producer.items()
                 if any(locations.inside(dep, out) for dep in _every_dep(stage))}
        direct[stage.name] = [name for name in direct if name in found]
        for out in stage.outs:
            if out in producer:
                raise RunnerError(f"'{out}' is an output of both '{producer[out]}' and '{stage.name}'")
            producer[out] = stage.name
    return direct


def _every_dep(stage: Stage) -> Iterator[str]:
    """The stage's dependencies and the files of its globs."""
    for fileset in stage.file_sets:
        yield from fileset.paths
    yield from stage.deps


def _upstream_map(stages: Sequence[Stage]) -> dict[str, set[str]]:
    """Stage name → names of all stages it depends on, directly or not."""
    upstream: dict[str, set[str]] = {}
    for name, direct in direct_upstream(stages).items():
        upstream[name] = set(direct).union(*(upstream[other] for other in direct))
    return upstream

