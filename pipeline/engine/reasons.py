"""The reasons the runner gives for a stale stage: which code version, leaf key, dependency, glob's files or output
changed.

``param data.sources[0].field changed "body" → "bdy"``: the key is the leaf that differs (in mappings and
lists alike), and two long values are cut to where they differ, so that a reason never prints both sides alike.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.engine import atomic
from pipeline.errors import shorten

if TYPE_CHECKING:
    from pipeline.engine.file_sets import FileSet, Found
    from pipeline.engine.hashing import HashCache

Locate = Callable[[str], "Path | str"]  # a stage's path as the file system sees it


def code_version_changes(recorded: int | None, current: int) -> list[str]:
    """``code version changed 3 → 4``; an entry from before versions were recorded re-runs too."""
    if recorded == current:
        return []
    if recorded is None:
        return [f"code version not recorded (now {current})"]
    return [f"code version changed {recorded} → {current}"]


def param_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    changes = [f"param {key} removed" for key in old if key not in new]
    for key, value in new.items():
        if key not in old:
            changes.append(f"param {key} added")
        else:
            changes.extend(_value_changes(key, old[key], value))
    return changes


def dep_changes(deps: Sequence[str], recorded: Mapping[str, str], cache: HashCache, where: Locate,
                shown: Callable[[str], str]) -> list[str]:
    """``dependency 'raw/a.txt' changed`` (or removed, added, missing), the path as ``shown`` gives it."""
    changes = [f"dependency '{shown(dep)}' removed" for dep in recorded if dep not in deps]
    for dep in deps:
        if dep not in recorded:
            changes.append(f"dependency '{shown(dep)}' added")
        elif not cache.exists(where(dep)):
            changes.append(f"dependency '{shown(dep)}' is missing")
        elif cache.tree_hash(where(dep)) != recorded[dep]:
            changes.append(f"dependency '{shown(dep)}' changed")
    return changes


def file_set_changes(filesets: Sequence[FileSet], recorded: Sequence[Sequence[str]], found: Sequence[Found],
                     shown: Callable[[str], str]) -> list[str]:
    """Per glob whose files' digest differs from the recorded one: ``dependency 'raw/a.txt' changed`` (or added,
    removed, is missing) for the first files, and ``and 41 more of the files of 'raw/*.txt': 40 changed, 1 added``;
    where the listing that names them is gone, ``the files of 'raw/*.txt' changed``."""
    changes = [f"dependency glob {name!r} removed" for name, _ in recorded[len(filesets):]]
    for index, (fileset, result) in enumerate(zip(filesets, found)):
        if index >= len(recorded) or recorded[index][0] != fileset.name:
            changes.append(f"dependency glob {fileset.name!r} added")
            continue
        if result.digest == recorded[index][1] and result.missing is None:
            continue
        if not result.counts:
            changes.append(f"the files of {fileset.name!r} changed")
            continue
        changes += [f"dependency '{shown(path)}' {how}" for path, how in result.named]
        more = result.counts - Counter(how for _, how in result.named)
        if more:
            counted = ", ".join(f"{count:,} {how}" for how, count in sorted(more.items()))
            changes.append(f"and {sum(more.values()):,} more of the files of {fileset.name!r}: {counted}")
    return changes


def out_changes(outs: Sequence[str], recorded: Mapping[str, str], cache: HashCache, where: Locate,
                shown: Callable[[str], str]) -> list[str]:
    """``output 'data/prepared' is missing`` (or new, modified), the path as ``shown`` gives it."""
    changes = []
    for out in outs:
        if not cache.exists(where(out)):
            changes.append(f"output '{shown(out)}' is missing")
        elif out not in recorded:
            changes.append(f"output '{shown(out)}' is new")
        elif cache.tree_hash(where(out)) != recorded[out]:
            changes.append(f"output '{shown(out)}' was modified")
    return changes


def _value_changes(key: str, old: Any, new: Any) -> list[str]:
    """Name the leaf keys that differ: ``param train.steps changed 300 → 500``,
    ``param data.sources[0].field changed "body" → "bdy"``, ``param data.sources[2] added {...}``."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [change for name in sorted(set(old) | set(new))
                for change in _value_changes(f"{key}.{name}", old.get(name), new.get(name))]
    if isinstance(old, list) and isinstance(new, list):
        return ([change for index, (was, now) in enumerate(zip(old, new))
                 for change in _value_changes(f"{key}[{index}]", was, now)]
                + [f"param {key}[{index}] added {shorten(atomic.dumps_json(item, indent=None), SHORT)}"
                   for index, item in enumerate(new[len(old):], start=len(old))]
                + [f"param {key}[{index}] removed" for index in range(len(new), len(old))])
    was, now = atomic.dumps_json(old, indent=None), atomic.dumps_json(new, indent=None)
    if was == now:
        return []
    return ["param {} changed {} → {}".format(key, *_contrast(was, now))]


SHORT = 60  # characters of a value a reason shows
CONTEXT = 10  # characters kept before the first difference of two long values


def _contrast(was: str, now: str) -> tuple[str, str]:
    """Two values' texts shortened so that the difference shows: a long common start is cut to ``…``."""
    same = len(os.path.commonprefix([was, now]))
    if max(len(was), len(now)) > SHORT and same > CONTEXT:
        start = same - CONTEXT
        was, now = "…" + was[start:], "…" + now[start:]
    return shorten(was, SHORT), shorten(now, SHORT)
