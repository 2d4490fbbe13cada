"""The run cache: outputs found again by what made them, across the configs of one project.

As DVC's run cache: when a stage that opts in (``Stage.reusable``) has run, an entry keyed by the sha256 of the
canonical JSON of its name, code version, parameters and dependency hashes records where its outputs are and
their hashes. A stage of any config of the project with the same key, a variant that changes only the
tokenizer say, does not run: it takes those outputs as hard links (copies across file systems), once their
hashes check out before and after, and the log says where they came from.

The key leaves out where the outputs are. The config keys that place the stage's own outputs
(``prepare.output_dir``) are dropped from its parameters, and a dependency inside another stage's output is
named by that stage and its path inside the output, so ``data/char/prepared/train`` and
``data/prepared/train`` are one input when their hashes are equal. Any other dependency (a raw file) is named
from the names root, the directory that the outputs name input files from (the config's: document IDs name
raw files as its globs do), never from the project root: configs that differ only in ``output_root`` have
one key. So only stages whose outputs are the same wherever they are written opt in (not ``train``: a
checkpoint records its directory and resumes), and remote outputs are never reused.

An entry lists every place the outputs were made or reused to (newest first), each named from the run
cache's directory, so that configs with other project roots (``output_root``) find each other's places and
a project moved as a whole keeps its entries. One config re-running with other settings leaves the others a
copy to reuse. Entries are written whole; two runs writing one at once lose at most a place, never a wrong
output, since every place is checked before use.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.engine import atomic, locations
from pipeline.engine.hashing import HashCache, canonical_hash, visible_files

if TYPE_CHECKING:
    from pipeline.engine.runner import Stage

VERSION = 2  # 2: places are named from the run cache's directory, raw inputs in the key from the names root
MAX_PLACES = 16  # places remembered per entry; older ones are forgotten


class RunCache:
    """Entries ``{directory}/{key[:2]}/{key}.json`` about outputs under ``root`` (the project root), the raw
    inputs of their keys named from ``names_root`` (by default the project root). Every path is one from the
    current directory."""

    def __init__(self, directory: str | os.PathLike[str], root: Path, names_root: str | os.PathLike[str] | None = None):
        self.directory = Path(directory)
        self.root = root
        self.names_root = os.path.abspath(root if names_root is None else names_root)

    def key(self, stage: Stage, params: Mapping[str, Any], deps: Mapping[str, str], globs: Sequence[Sequence[str]],
            stages: Sequence[Stage]) -> str:
        """What made the outputs, without where they are (see the module's docstring); ``globs`` are the
        ``[glob, digest]`` of the stage's file sets, whose digests name the files from each glob's base."""
        placed = {stage.keys[out] for out in stage.outs if out in stage.keys}
        return canonical_hash({
            "stage": stage.name, "code_version": stage.code_version,
            "params": _without_keys(params, placed),
            "deps": sorted([self._dep_name(dep, stages), digest] for dep, digest in deps.items()),
            **({"globs": [list(glob) for glob in globs]} if globs else {}),
        })

    def reuse(self, key: str, stage: Stage, cache: HashCache) -> Path | None:
        """Link the outputs of a place recorded under ``key`` in place of ``stage``'s outputs and return that
        place (its first output, from the current directory); None, having linked nothing, if no place still
        holds them."""
        if any(locations.is_url(out) for out in stage.outs):
            return None
        for place in self._places(key):
            sources = [self.directory / out for out, _ in place]
            if len(place) != len(stage.outs) or not all(_holds(source, digest, cache)
                                                        for source, (_, digest) in zip(sources, place)):
                continue
            for source, out in zip(sources, stage.outs):
                if os.path.abspath(source) != os.path.abspath(self._from_here(out)):
                    _link(source, self._from_here(out))
            if all(cache.tree_hash(self.root / out) == digest for out, (_, digest) in zip(stage.outs, place)):
                return sources[0]
        return None

    def remember(self, key: str, outs: Mapping[str, str]) -> None:
        """Record ``outs`` (output → hash, in the stage's order) as the newest place of ``key``'s outputs."""
        if any(locations.is_url(out) for out in outs):
            return
        place = [[os.path.relpath(os.path.abspath(self._from_here(out)), os.path.abspath(self.directory)), digest]
                 for out, digest in outs.items()]
        places = [place, *(other for other in self._places(key) if other != place)][:MAX_PLACES]
        atomic.write_json(self._entry(key), {"version": VERSION, "places": places})

    def _from_here(self, out: str) -> str:
        """An output as a path from the current directory, as the stage names it (a trailing "/" kept)."""
        return out if os.fspath(self.root) == "." else os.path.join(self.root, out)

    def _dep_name(self, dep: str, stages: Sequence[Stage]) -> str:
        """``stage:N/relative`` for a dependency inside output N of a stage, else the dependency as a path from
        the names root (a URL as it is)."""
        for stage in stages:
            for index, out in enumerate(stage.outs):
                if locations.inside(dep, out):
                    relative = os.path.relpath(dep, out)
                    return f"{stage.name}:{index}/{'' if relative == os.curdir else relative}"
        if locations.is_url(dep):
            return dep
        return os.path.relpath(os.path.abspath(self._from_here(dep)), self.names_root)

    def _places(self, key: str) -> list[list[list[str]]]:
        try:
            data = json.loads(self._entry(key).read_text("utf-8"))
        except (FileNotFoundError, ValueError):
            return []  # a missing or torn entry only costs a run
        places = data.get("places") if isinstance(data, dict) and data.get("version") == VERSION else None
        return [place for place in places or [] if _is_place(place)]

    def _entry(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"


def _without_keys(params: Mapping[str, Any], keys: set[str]) -> dict[str, Any]:
    """``params`` without the config keys ``keys``, whether a key is a parameter or lies inside one (a section)."""
    kept = {name: copy.deepcopy(value) for name, value in params.items() if name not in keys}
    for key in keys:
        for name, value in kept.items():
            if key.startswith(name + ".") and isinstance(value, dict):
                *parents, leaf = key[len(name) + 1:].split(".")
                for part in parents:
                    value = value.get(part) if isinstance(value, dict) else None
                if isinstance(value, dict):
                    value.pop(leaf, None)
    return kept


def _holds(path: Path, digest: str, cache: HashCache) -> bool:
    return path.exists() and cache.tree_hash(path) == digest


def _link(source: Path, target: str) -> None:
    if source.is_dir():
        atomic.link_tree(source, target, visible_files(source))
    else:
        atomic.link_file(source, target)


def _is_place(place: Any) -> bool:
    return isinstance(place, list) and all(
        isinstance(out, list) and len(out) == 2 and all(isinstance(part, str) for part in out) for out in place)
