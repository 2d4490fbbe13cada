"""With ``tokenizer.path`` set, the tokenizer's settings are the file's.

A frozen tokenizer is not trained, so the settings that describe it (``kind``, the size, ``pattern``,
``special_tokens``) are read from the file, and ``lmprep config show`` prints what the pipeline uses
rather than defaults that disagree with it. A value the config itself gives (a file or ``--set``, not
the built-in default) must agree with the file, or the config is refused in one line naming both: a
config that says ``kind: char`` over a byte-level file is a mistake to point out, not a setting to
drop. ``vocab_size`` and ``merges`` are upper bounds (training may stop early), so they agree with a
file that has at most that many IDs or merges. ``min_frequency``, ``merge_newlines`` and ``workers``
shape training only; a tokenizer file does not record them. A file that is missing or not a tokenizer
file leaves the config as it is: the tokenizer stage refuses it when it runs. The file is loaded once per
process (:mod:`pipeline.tokenizer.shared`): the encode stage, which loads the tokenizer stage's copy of it,
parses it no second time.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from pipeline.config.origins import DEFAULT_ORIGIN, Origins
from pipeline.config.schema import Config
from pipeline.errors import ConfigError, StorageError, TokenizerError

if TYPE_CHECKING:  # loaded only for a config that names a tokenizer file: every command reads the config
    from pipeline.tokenizer import Tokenizer

FROM_FILE = ("kind", "vocab_size", "merges", "pattern", "special_tokens")
NULLABLE = ("vocab_size", "merges", "pattern")


def with_frozen_tokenizer(config: Config, origins: Origins) -> Config:
    """``config`` with the settings of ``FROM_FILE`` read from ``tokenizer.path`` (and their origin recorded as
    that file); unchanged without a path, or while the file is missing or no tokenizer file (the tokenizer stage
    says so when it runs; the commands that need no tokenizer, such as ``lmprep dag``, still work)."""
    settings = config.tokenizer
    if settings.path is None:
        return config
    from pipeline.tokenizer import shared

    try:
        tokenizer = shared.load(config.here(settings.path))  # the run's one load of it (the encode stage's too)
    except (TokenizerError, StorageError):
        return config
    by_merges = settings.vocab_size is None and settings.merges is not None and tokenizer.kind != "word"
    found = _settings_of(tokenizer, by_merges=by_merges)
    for key, value in found.items():
        given, origin = getattr(settings, key), origins.of(f"tokenizer.{key}")
        if given is not None and origin != DEFAULT_ORIGIN and _contradicts(key, given, tokenizer):
            or_null = " or null (the file's is then used)" if key in NULLABLE else ""
            raise ConfigError(f"{origin}: tokenizer.{key} {_shown(given)} contradicts tokenizer.path "
                              f"{settings.path!r}, {_described(key, tokenizer)}; set tokenizer.{key} to "
                              f"{_shown(value)}{or_null}")
        origins.set(f"tokenizer.{key}", f"tokenizer.path {settings.path}")
    return dataclasses.replace(config, tokenizer=dataclasses.replace(settings, **found))


def _settings_of(tokenizer: Tokenizer, *, by_merges: bool) -> dict[str, Any]:
    """The config values that describe ``tokenizer``; its size as ``merges`` when the config gives it so."""
    from pipeline.tokenizer.patterns import pattern_name

    name = pattern_name(tokenizer.pattern)
    return {"kind": tokenizer.kind,
            "vocab_size": None if by_merges else tokenizer.vocab_size,
            "merges": len(tokenizer.merges) if by_merges else None,
            "pattern": tokenizer.pattern if name == "custom" else name,
            "special_tokens": tuple(sorted(tokenizer.special_tokens, key=tokenizer.special_tokens.get))}


def _contradicts(key: str, given: Any, tokenizer: Tokenizer) -> bool:
    if key == "vocab_size":
        return tokenizer.vocab_size > given
    if key == "merges":
        return len(tokenizer.merges) > given
    if key == "pattern":
        from pipeline.tokenizer.patterns import resolve_pattern

        return resolve_pattern(given, kind=tokenizer.kind) != tokenizer.pattern
    return given != _settings_of(tokenizer, by_merges=False)[key]


def _described(key: str, tokenizer: Tokenizer) -> str:
    """What the file has for ``key``: ``a byte tokenizer``, ``which has 2,048 IDs``."""
    if key == "kind":
        return f"a {tokenizer.kind} tokenizer"
    if key == "vocab_size":
        return f"which has {tokenizer.vocab_size:,} IDs"
    if key == "merges":
        return f"which has {len(tokenizer.merges):,} merges"
    return f"whose {key.replace('_', ' ')} is {_shown(_settings_of(tokenizer, by_merges=False)[key])}"


def _shown(value: Any) -> str:
    return repr(list(value)) if isinstance(value, tuple) else repr(value)
