"""Config files: ``extends`` chains, ``--set`` overrides, where each value came from, path rebasing.

Paths in a config file are relative to the file's directory (as DVC's are to ``dvc.yaml``), so a
project runs the same from any working directory; outputs (and ``state_dir``) are relative to
``output_root``, itself relative to that directory. ``--set`` paths are relative to the current
directory. A config may ``extends: other.yaml`` and give only the keys that differ; every value
remembers where it came from (:func:`load_config_with_origins`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from pipeline.config.frozen import with_frozen_tokenizer
from pipeline.config.origins import SET_ORIGIN, Origins
from pipeline.config.schema import (
    Config,
    StepConfig,
    as_directory_if,
    field_types,
    is_dataclass_type,
    join_key,
    path_kind,
    schema_fields,
    section_type,
    sequence_item_type,
    split_key,
    unknown_key_message,
)
from pipeline.config.validate import built_config, check_config, kind_of
from pipeline.config.yaml_safe import parse_value, read_yaml
from pipeline.engine import locations
from pipeline.errors import ConfigError, describe


def load_config(path: str | os.PathLike[str], overrides: Sequence[str] = ()) -> Config:
    """Read ``path`` (YAML, with what it extends), apply ``key.path=value`` overrides, read a frozen
    tokenizer's settings from its file (:mod:`pipeline.config.frozen`), validate, freeze."""
    return load_config_with_origins(path, overrides)[0]


def load_config_with_origins(path: str | os.PathLike[str],
                             overrides: Sequence[str] = ()) -> tuple[Config, Origins]:
    """:func:`load_config`, plus where each key's value came from (a file, ``--set`` or the built-in default)."""
    raw, origins = _read_extended(os.fspath(path), ())
    config_dir = os.path.dirname(os.path.abspath(path))
    for override in overrides:
        key_path = _apply_override(raw, override)
        origins.set(key_path, SET_ORIGIN)
        _normalize_urls(raw)
        _rebase_set_path(raw, key_path, config_dir)
    config = with_frozen_tokenizer(built_config(raw, origins, root=config_dir), origins)
    check_config(config, origins)
    return config, origins


def parse_config(raw: Mapping[str, Any], *, origin: str = "<config>") -> Config:
    """Validate an already-parsed mapping (as found in a YAML file); its paths are relative to the current
    directory. Nothing is read: a ``tokenizer.path`` keeps the settings the mapping gives."""
    origins = Origins(origin)
    config = built_config(dict(raw), origins)
    check_config(config, origins)
    return config


MAX_EXTENDS = 16
"""How many configs a chain of ``extends:`` may hold."""


def _read_extended(path: str, chain: tuple[str, ...]) -> tuple[dict[str, Any], Origins]:
    """The raw mapping of ``path`` laid over what it ``extends:`` (recursively), with each leaf's origin.

    Mappings merge key by key; any other value (a list included) replaces the parent's. The parent's
    paths are rebased onto this file's directory, so each stays relative to the file that wrote it.
    """
    raw = _read_mapping(path)
    _normalize_urls(raw)
    origins = Origins(path)
    parent = raw.pop("extends", None)
    if parent is None:
        origins.record(raw, path)
        return raw, origins
    if not isinstance(parent, str) or not parent:
        raise ConfigError(f"{path}: extends must be the path of another config file, got {describe(parent)}")
    parent_path = os.path.normpath(os.path.join(os.path.dirname(path), parent))
    identity = os.path.realpath(parent_path)
    if identity in chain or os.path.realpath(path) == identity:
        raise ConfigError(f"{path}: extends {parent!r}, which extends it back (a cycle); remove one of the extends")
    if len(chain) >= MAX_EXTENDS:
        raise ConfigError(f"{path}: more than {MAX_EXTENDS} configs in one chain of extends")
    base, origins = _read_extended(parent_path, (*chain, os.path.realpath(path)))
    _rebase_paths(base, os.path.dirname(os.path.abspath(parent_path)), os.path.dirname(os.path.abspath(path)))
    origins.fallback = path
    origins.record(raw, path)
    return _merge(base, raw), origins


def _read_mapping(path: str) -> dict[str, Any]:
    raw = read_yaml(path)
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections, got {kind_of(raw)}")
    return raw


def _merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in top.items():
        below = merged.get(key)
        merged[key] = _merge(below, value) if isinstance(below, dict) and isinstance(value, dict) else value
    return merged


def _normalize_urls(raw: Any, parts: tuple[str, ...] = ()) -> None:
    """Rewrite each ``file://`` value of a path key as the local path it names, before paths are rebased,
    and spell other URLs' schemes in lower case (``S3://b/x`` is ``s3://b/x``), so that paths compare as places."""
    items = raw.items() if isinstance(raw, dict) else enumerate(raw) if isinstance(raw, list) else ()
    for key, value in list(items):
        if isinstance(value, (dict, list)):
            _normalize_urls(value, (*parts, str(key)))
        elif isinstance(value, str) and "://" in value and _is_path_key([*parts, str(key)]):
            raw[key] = locations.normalize_url(value)


def _is_path_key(parts: list[str]) -> bool:
    try:
        return path_kind(parts) is not None
    except (StopIteration, KeyError):  # not a key of the schema: validation names it
        return False


def _rebase_paths(raw: dict[str, Any], from_dir: str, to_dir: str) -> None:
    """Rewrite the relative paths of ``raw`` (written in ``from_dir``) to mean the same from ``to_dir``.

    Outputs are relative to ``output_root``, so only it moves: written out when the file left it at
    its default, so that the outputs stay where that file put them.
    """
    if from_dir == to_dir:
        return
    raw.setdefault("output_root", ".")
    for key_path in _input_path_keys(raw):
        node, last = _parent_node(raw, key_path)
        value = node[last]
        if isinstance(value, str) and not os.path.isabs(value) and not locations.is_url(value):
            node[last] = os.path.relpath(os.path.join(from_dir, value), to_dir)


def _input_path_keys(raw: dict[str, Any]) -> list[str]:
    """The key paths of ``raw`` holding paths relative to the config's directory."""
    keys = [key for key in ("output_root", "run_cache_dir", "tokenizer.path") if _has_key(raw, key)]
    sources = raw.get("data", {}).get("sources") if isinstance(raw.get("data"), dict) else None
    if isinstance(sources, list):
        keys += [f"data.sources.{i}.glob" for i, item in enumerate(sources)
                 if isinstance(item, dict) and "glob" in item]
    return keys


def _has_key(raw: dict[str, Any], key_path: str) -> bool:
    node: Any = raw
    for part in key_path.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def _parent_node(raw: Any, key_path: str) -> tuple[Any, Any]:
    *parents, last = key_path.split(".")
    node = raw
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node, (int(last) if isinstance(node, list) else last)


def _rebase_set_path(raw: dict[str, Any], key_path: str, config_dir: str) -> None:
    """A ``--set`` path is relative to the current directory: rewrite it relative to where the
    config's paths are (its directory, or ``output_root`` for an output)."""
    kind = path_kind(split_key(key_path))
    node, last = _parent_node(raw, key_path)
    value = node[last]
    if kind is None or not isinstance(value, str) or os.path.isabs(value) or locations.is_url(value):
        return
    base = config_dir
    if kind == "output":
        output_root = raw.get("output_root", ".")
        base = os.path.join(config_dir, output_root if isinstance(output_root, str) else ".")
    node[last] = as_directory_if(value, os.path.relpath(os.path.abspath(value), os.path.abspath(base)))



def dump_yaml(config: Config) -> str:
    """The effective config as YAML, in schema order."""
    return yaml.safe_dump(config.to_dict(), sort_keys=False, allow_unicode=True)



def _apply_override(raw: dict[str, Any], override: str) -> str:
    """Set ``key.path=value`` in the raw mapping and return the key path; the value is parsed as a
    YAML scalar or flow value."""
    key_path, sep, text = override.partition("=")
    if not sep or not key_path.strip():
        raise ConfigError(f"--set {override!r}: expected KEY=VALUE, for example train.steps=500")
    parts = split_key(key_path.strip())
    _check_key_path(parts)
    value = parse_value(text, key_path)
    node = raw
    for depth in range(len(parts) - 1):
        node = _descend_for_override(node, parts[:depth + 2], key_path)
    _assign(node, parts[-1], value, key_path)
    return ".".join(parts)


def _descend_for_override(node: Any, parts: list[str], key_path: str) -> Any:
    """The child ``parts[-2]`` of ``node``, made a mapping if it is none yet; ``parts[-1]`` is the key below it
    (a digit only for a list's item, by :func:`_check_key_path`)."""
    *above, part, below = parts
    if isinstance(node, list):
        return node[_list_index(node, part, key_path)]
    if not isinstance(node.get(part), (dict, list)):
        if below.isdigit():
            where = ".".join((*above, part))
            raise ConfigError(f"--set {key_path}: {where} is not a list in the config file, so it has no item "
                              f"{below}; set the whole list instead, e.g. --set '{where}=[...]'")
        node[part] = {}
    return node[part]


def _assign(node: Any, part: str, value: Any, key_path: str) -> None:
    if isinstance(node, list):
        node[_list_index(node, part, key_path)] = value
    else:
        node[part] = value


def _list_index(items: list, part: str, key_path: str) -> int:
    if not part.isdigit() or int(part) >= len(items):
        raise ConfigError(f"--set {key_path}: {part!r} is not an index of a list of {len(items)} items")
    return int(part)


def _check_key_path(parts: list[str]) -> None:
    """Fail with did-you-mean if ``parts`` does not name a field of the schema."""
    cls: Any = Config
    for depth, part in enumerate(parts):
        where = ".".join(parts[:depth])
        if sequence_item_type(cls) is not None:
            if not part.isdigit():
                raise ConfigError(f"--set: {where} is a list; address an item by index, e.g. {where}.0")
            cls = sequence_item_type(cls)
            continue
        if cls is StepConfig:
            return  # a step's keys are its registered Settings': the validation checks them
        if not is_dataclass_type(cls):
            raise ConfigError(f"--set: {where} is a value, it has no key {part!r}")
        names = [f.name for f in schema_fields(cls)]
        if part not in names:
            raise ConfigError(unknown_key_message(join_key(where, part), part, names, "--set"))
        cls = section_type(field_types(cls)[part]) or field_types(cls)[part]


