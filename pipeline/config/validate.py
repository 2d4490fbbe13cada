"""Validation: a parsed config mapping checked against the schema and converted into its dataclasses.

A generic builder walks the dataclasses' type hints, so a new option needs no code here. Every error
names where the value came from, the key path, the value at fault and what is allowed; an unknown
key comes with a did-you-mean suggestion, because a typo in a config file should never silently
fall back to a default.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import typing
from typing import TYPE_CHECKING, Any, Literal

from pipeline.config.export_formats import EXPORT_FORMATS, check_export_ids
from pipeline.config.schema import (
    LOCAL_ONLY_KEYS,
    MAX_TRAINED_IDS,
    OUTPUT_KEYS,
    Config,
    StepConfig,
    TokenizerConfig,
    field_types,
    join_key,
    resolved_size,
    schema_fields,
    section_type,
    sequence_item_type,
    union_members,
    unknown_key_message,
)
from pipeline.engine import locations
from pipeline.errors import ConfigError, counted, describe
from pipeline.tokenizer.layout import base_id_count

if TYPE_CHECKING:
    from pipeline.config.origins import Origins

def built_config(raw: dict[str, Any], origins: Origins, *, root: str = ".") -> Config:
    """The :class:`Config` that ``raw`` (a parsed config mapping) describes, its paths relative to ``root``, every
    field checked and the steps' defaults filled in; ``origins`` names the file or option an error is about.
    The rules across fields are :func:`check_config`'s, run once a frozen tokenizer's settings are in."""
    config = dataclasses.replace(_build(Config, _one_size_key(raw), "", origins), root=root)
    return dataclasses.replace(config, prepare=_with_step_defaults(config.prepare, raw))


def check_config(config: Config, origins: Origins) -> None:
    """The rules that involve more than one key: ConfigError naming the first one broken, and where its value
    came from."""
    _check_consistency(config, origins)


def _build(cls: type, raw: Any, path: str, origin: Origins) -> Any:
    """Make a ``cls`` instance from ``raw`` (a mapping), validating every field."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{origin(path)}: {path or 'the config'} must be a mapping, "
                          f"got {kind_of(raw)} {describe(raw)}")
    fields = {f.name: f for f in schema_fields(cls)}
    for key in raw:
        if key not in fields:
            key_path = join_key(path, str(key))
            raise ConfigError(unknown_key_message(key_path, str(key), list(fields), origin(key_path)))
    missing = [name for name, f in fields.items() if _has_no_default(f) and name not in raw]
    if missing:
        raise ConfigError(f"{origin(path)}: {join_key(path, missing[0])} is required")
    hints = field_types(cls)
    values = {name: _convert(hints[name], raw[name], join_key(path, name), origin, fields[name])
              for name in fields if name in raw}
    return cls(**values)


def _convert(hint: Any, value: Any, key: str, origin: Origins, spec: dataclasses.Field | None = None) -> Any:
    """Check ``value`` against the type ``hint`` and the field's bounds; return the typed value."""
    if hint is StepConfig:
        return _convert_step(value, key, origin)
    if typing.get_origin(hint) is dict:
        return _convert_mapping(value, key, origin)
    section = section_type(hint)
    if section is not None and not (value is None and section is not hint):
        return _build(section, value, key, origin)
    item_type = sequence_item_type(hint)
    if item_type is not None:
        return _convert_sequence(item_type, value, key, origin)
    if typing.get_origin(hint) is Literal:
        return _convert_choice(typing.get_args(hint), value, key, origin)
    allowed = union_members(hint)
    if value is None:
        if type(None) in allowed:
            return None
        raise ConfigError(f"{origin(key)}: {key} must be {_describe_type(hint, spec)}, got null")
    scalar = next(t for t in allowed if t is not type(None))
    converted = _convert_scalar(scalar, value, key, origin, _describe_type(hint, spec))
    _check_bounds(converted, key, origin, spec, _describe_type(hint, spec))
    return converted


def _convert_step(value: Any, key: str, origin: Origins) -> StepConfig:
    """An item of ``prepare.steps``: one registered step's name mapping to its parameters, and ``only``/``except``.
    The steps and their parameters are the data layer's registry (the one import of this module from above it)."""
    from pipeline.data.registry import STEPS

    if not isinstance(value, dict):
        raise ConfigError(f"{origin(key)}: {key} must be a mapping naming one step, e.g. {{c4: {{}}}}; "
                          f"got {kind_of(value)} {describe(value)}")
    names = [name for name in value if name not in _SCOPE_KEYS]
    if len(names) != 1:
        raise ConfigError(f"{origin(key)}: {key} must name exactly one step among {', '.join(STEPS)}, "
                          f"got {names or 'none'}")
    name = str(names[0])
    if name not in STEPS:
        raise ConfigError(unknown_key_message(join_key(key, name), name, list(STEPS), origin(key)).replace(
            "unknown key", "unknown step"))
    settings = _build(STEPS[name].Settings, value[name], join_key(key, name), origin)
    problem = settings.problem() if hasattr(settings, "problem") else None
    if problem:
        raise ConfigError(f"{origin(join_key(key, name))}: {join_key(key, name)} {problem}")
    if "only" in value and "except" in value:
        raise ConfigError(f"{origin(key)}: {key} has both only: and except:; give one of them")
    scope = {field: _convert(tuple[str, ...], value.get(given, []), join_key(key, given), origin)
             for field, given in (("only", "only"), ("except_", "except"))}
    return StepConfig(name, settings, **scope)


_SCOPE_KEYS = ("only", "except")


def _with_step_defaults(prepare: Any, raw: dict[str, Any]) -> Any:
    """``prepare`` with each step's settings filled in (the defaults of a step the config does not list) and the
    deprecated ``prepare.dedup_buckets`` given to each ``exact_dedup`` step that sets no ``buckets`` of its own."""
    from pipeline.data.registry import STEPS

    written = (raw.get("prepare") or {}).get("steps") or []
    steps = []
    for index, step in enumerate(prepare.steps):
        settings = step.settings if step.settings is not None else STEPS[step.name].Settings()
        item = written[index] if index < len(written) and isinstance(written[index], dict) else {}
        if step.name == "exact_dedup" and prepare.dedup_buckets is not None and \
                "buckets" not in (item.get("exact_dedup") or {}):
            settings = dataclasses.replace(settings, buckets=prepare.dedup_buckets)
        steps.append(dataclasses.replace(step, settings=settings))
    return dataclasses.replace(prepare, steps=tuple(steps))


def _convert_mapping(value: Any, key: str, origin: Origins) -> dict[str, Any]:
    """A mapping of names to any YAML values (a user step's ``params``)."""
    if not isinstance(value, dict) or not all(isinstance(name, str) for name in value):
        raise ConfigError(f"{origin(key)}: {key} must be a mapping of names to values, got {kind_of(value)} "
                          f"{describe(value)}")
    return dict(value)


def _convert_sequence(item_type: Any, value: Any, key: str, origin: Origins) -> tuple:
    if not isinstance(value, (list, tuple)):
        raise ConfigError(f"{origin(key)}: {key} must be a list, got {kind_of(value)} {describe(value)}")
    return tuple(_convert(item_type, item, f"{key}[{i}]", origin) for i, item in enumerate(value))


def _convert_choice(choices: tuple, value: Any, key: str, origin: Origins) -> Any:
    if value in choices and type(value) is type(next(c for c in choices if c == value)):
        return value
    allowed = ", ".join(repr(c) for c in choices)
    hint = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1)
    suggestion = f"; did you mean {hint[0]!r}?" if hint else ""
    raise ConfigError(f"{origin(key)}: {key} must be one of {allowed}; got {describe(value)}{suggestion}")


def _convert_scalar(scalar: type, value: Any, key: str, origin: Origins, wanted: str) -> Any:
    if scalar is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise ConfigError(f"{origin(key)}: {key} must be {wanted}, got {describe(value)}")
        return float(value)
    if isinstance(value, scalar) and not (scalar is int and isinstance(value, bool)):
        return value
    raise ConfigError(f"{origin(key)}: {key} must be {wanted}, got {kind_of(value)} {describe(value)}")


def _check_bounds(value: Any, key: str, origin: Origins, spec: dataclasses.Field | None, wanted: str) -> None:
    if spec is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    low, high = spec.metadata.get("low"), spec.metadata.get("high")
    too_high = high is not None and (value > high if spec.metadata.get("high_inclusive") else value >= high)
    too_low = low is not None and (value < low if spec.metadata.get("low_inclusive", True) else value <= low)
    if too_low or too_high:
        raise ConfigError(f"{origin(key)}: {key} must be {wanted}, got {describe(value)}")


def _one_size_key(raw: dict[str, Any]) -> dict[str, Any]:
    """``tokenizer.merges`` given without ``vocab_size``: the vocab size is not the default but unset."""
    tok = raw.get("tokenizer")
    if isinstance(tok, dict) and tok.get("merges") is not None and "vocab_size" not in tok:
        return {**raw, "tokenizer": {**tok, "vocab_size": None}}
    return raw



def _check_consistency(config: Config, origin: Origins) -> None:
    """Rules that involve more than one key."""
    _check_places(config, origin)
    prepare = config.prepare
    _check_step_scopes(config, origin)
    if prepare.max_chars is not None and prepare.max_chars < prepare.min_chars:
        raise ConfigError(f"{origin('prepare.max_chars')}: prepare.max_chars ({prepare.max_chars}) is below "
                          f"prepare.min_chars ({prepare.min_chars})")
    if not config.export.formats or len(set(config.export.formats)) != len(config.export.formats):
        raise ConfigError(f"{origin('export.formats')}: export.formats must list distinct formats among "
                          f"{list(EXPORT_FORMATS)}, got {list(config.export.formats)}")
    _check_tokenizer_size(config.tokenizer, origin)
    vocab_size = resolved_size(config.tokenizer)[0]
    if config.tokenizer.path is None and vocab_size is not None:  # else checked when the export stage starts
        check_export_ids(config.export.formats, vocab_size, "tokenizer.vocab_size is",
                         f"{origin('export.formats')}: export.formats")
    _check_trained_ids(config.tokenizer, origin)
    _check_character_coverage(config.tokenizer, origin)
    _check_document_tokens(config, origin)


def _check_step_scopes(config: Config, origin: Origins) -> None:
    """A step's ``only:``/``except:`` names sources that exist, by their ``name:``, each source named once."""
    names = [source.name for source in config.data.sources if source.name is not None]
    if len(set(names)) != len(names):
        twice = next(name for name in names if names.count(name) > 1)
        raise ConfigError(f"{origin('data.sources')}: two sources are named {twice!r}; give each its own name")
    for index, step in enumerate(config.prepare.steps):
        for which, given in (("only", step.only), ("except", step.except_)):
            unknown = [name for name in given if name not in names]
            if unknown:
                key = f"prepare.steps[{index}].{which}"
                raise ConfigError(f"{origin(key)}: {key}: no source is named {unknown[0]!r} (named sources: "
                                  f"{', '.join(names) or 'none; give a source a name: key'})")


def _check_character_coverage(tok: TokenizerConfig, origin: Origins) -> None:
    """A coverage below 1 drops characters, which only the char kind's unknown ID can stand for."""
    if tok.character_coverage == 0 or (tok.character_coverage < 1 and tok.kind != "char"):
        raise ConfigError(f"{origin('tokenizer.character_coverage')}: tokenizer.character_coverage "
                          f"{tok.character_coverage} must be above 0, and below 1 only for the char kind "
                          f"(tokenizer.kind is {tok.kind!r})")


def _check_places(config: Config, origin: Origins) -> None:
    """Sources split documents somehow, the runner's state is local, and no output is a whole bucket."""
    for index, source in enumerate(config.data.sources):
        if not source.separator:
            raise ConfigError(f"{origin(f'data.sources.{index}.separator')}: data.sources[{index}].separator must "
                              "not be empty; use 'document', 'blank_line', 'line' or a literal string such as "
                              "'<|endoftext|>'")
    _check_weights(config, origin)
    for key in LOCAL_ONLY_KEYS:
        value = config.value(key)
        if value is not None and locations.is_url(value):
            raise ConfigError(f"{origin(key)}: {key} {value!r} must be a local path (URLs are supported for "
                              "data.sources, tokenizer.path and every output)")
    for key in OUTPUT_KEYS:
        value = config.value(key)
        if value is not None and locations.is_url(value) and locations.is_container(value):
            raise ConfigError(f"{origin(key)}: {key} {value!r} is a whole bucket; name a prefix inside it "
                              f"(such as {value.rstrip('/')}/{key.partition('.')[0]}): lmprep replaces and cleans an "
                              "output as a whole")


def _check_weights(config: Config, origin: Origins) -> None:
    """Every source has a weight, or none has: a source left out would otherwise get a share nobody chose."""
    weights = [source.weight for source in config.data.sources]
    if any(weight is not None for weight in weights) and None in weights:
        index, given = weights.index(None), next(i for i, weight in enumerate(weights) if weight is not None)
        raise ConfigError(f"{origin(f'data.sources.{index}')}: data.sources[{index}].weight is not set but "
                          f"data.sources[{given}].weight is; give every source a weight, or none (natural "
                          "proportions)")


def _check_tokenizer_size(tok: TokenizerConfig, origin: Origins) -> None:
    """Distinct special tokens, and exactly one of vocab_size and merges, large enough for the base tokens."""
    if "" in tok.special_tokens or len(set(tok.special_tokens)) != len(tok.special_tokens):
        raise ConfigError(f"{origin('tokenizer.special_tokens')}: tokenizer.special_tokens must be distinct "
                          f"non-empty strings, got {list(tok.special_tokens)}")
    if tok.vocab_size is not None and tok.merges is not None:
        raise ConfigError(f"{origin('tokenizer.merges')}: tokenizer.vocab_size ({tok.vocab_size}) and "
                          f"tokenizer.merges ({tok.merges}) are both set; keep one and set the other to null "
                          "(e.g. --set tokenizer.vocab_size=null)")
    if tok.vocab_size is None and tok.merges is None:
        raise ConfigError(f"{origin('tokenizer.vocab_size')}: tokenizer.vocab_size and tokenizer.merges are both "
                          "null; set one of them")
    if tok.kind == "word" and tok.merges is not None:
        raise ConfigError(f"{origin('tokenizer.merges')}: tokenizer.merges does not apply to the word kind (it has "
                          "no merges); set tokenizer.vocab_size instead")
    floor = base_id_count(tok.kind) + len(tok.special_tokens)
    if tok.vocab_size is not None and tok.vocab_size < floor:
        raise ConfigError(f"{origin('tokenizer.vocab_size')}: tokenizer.vocab_size must be at least {floor} for a "
                          f"{tok.kind}-level tokenizer with {counted(len(tok.special_tokens), 'special token')}, "
                          f"got {tok.vocab_size}")


def _check_document_tokens(config: Config, origin: Origins) -> None:
    """The EOS and BOS tokens are special tokens of the tokenizer trained here (a given one is checked on load)."""
    tok, encode = config.tokenizer, config.encode
    if tok.path is not None:
        return
    for key in ("eos_token", "bos_token"):
        token = getattr(encode, key)
        if token is not None and token not in tok.special_tokens:
            raise ConfigError(f"{origin(f'encode.{key}')}: encode.{key} {token!r} is not one of "
                              f"tokenizer.special_tokens {list(tok.special_tokens)}; add it there or set "
                              f"encode.{key}: null")


def _check_trained_ids(tok: TokenizerConfig, origin: Origins) -> None:
    """BPE base tokens and merges fit in ``MAX_TRAINED_IDS`` (the byte kind's 256 bytes are known here;
    the char kind's alphabet only after counting, when training checks again)."""
    if tok.kind == "word":
        return
    limit = MAX_TRAINED_IDS + len(tok.special_tokens)
    if tok.vocab_size is not None and tok.vocab_size > limit:
        raise ConfigError(f"{origin('tokenizer.vocab_size')}: tokenizer.vocab_size must be at most {limit} "
                          f"({MAX_TRAINED_IDS} base tokens and merges, the most training can hold, and "
                          f"{counted(len(tok.special_tokens), 'special token')}), got {tok.vocab_size}")
    base = base_id_count(tok.kind, alphabet_size=1)  # the char kind: unknown and at least one character
    if tok.merges is not None and tok.merges > MAX_TRAINED_IDS - base:
        raise ConfigError(f"{origin('tokenizer.merges')}: tokenizer.merges must be at most "
                          f"{MAX_TRAINED_IDS - base} for a {tok.kind}-level tokenizer ({MAX_TRAINED_IDS} base "
                          f"tokens and merges, the most training can hold), got {tok.merges}")



def _has_no_default(f: dataclasses.Field) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


_TYPE_WORDS = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}


def _describe_type(hint: Any, spec: dataclasses.Field | None) -> str:
    members = union_members(hint)
    words = " or ".join(_TYPE_WORDS.get(t, "null") for t in members if t is not type(None))
    if spec is not None:
        low, high = spec.metadata.get("low"), spec.metadata.get("high")
        if low is not None:
            words += f" {'>=' if spec.metadata.get('low_inclusive', True) else '>'} {low}"
        if high is not None:
            words += f" and {'<=' if spec.metadata.get('high_inclusive') else '<'} {high}"
    return words + (" (or null)" if type(None) in members else "")



def kind_of(value: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "a list", dict: "a mapping", type(None): "null"}.get(type(value), type(value).__name__)


