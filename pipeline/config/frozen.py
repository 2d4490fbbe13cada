"""With ``tokenizer.path`` set, the tokenizer's settings are the file's.

A frozen tokenizer is not trained, so the settings that describe it (``kind``, the size, ``pattern``,
``special_tokens``) are read from the file, and ``lmprep config show`` prints what the pipeline uses
rather than defaults that disagree with it. A value the config itself gives (a file or ``--set``, not
the built-in default) must agree with the file, or the config is refused in one line naming both: a
config that says ``kind: char`` over a byte-level file is a mistake to point out, not a setting to
drop. ``vocab_size`` and ``merges`` are upper bounds (training may stop early), so they agree with a
file that has at most that many IDs or merges. ``min_frequency``, ``merge_newlines`` and ``workers``
shape training only; a tokenizer file does not record them. A file that is missing or not a tokenizer
file leaves the config as it is: the tokenizer stage refuses it when it runs.

Every command reads the config, and loading a tokenizer file of 65,536 IDs costs more than the rest of
``lmprep status``: the project's state dir remembers what each file it met says (:data:`MEMO`, by the file's
content, as :mod:`pipeline.tokenizer.shared` knows it), so the file is loaded only when its bytes are new. The
file is loaded once per process (:mod:`pipeline.tokenizer.shared`): the encode stage, which loads the tokenizer
stage's copy of it, parses it no second time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from typing import TYPE_CHECKING, Any

from pipeline.config.origins import DEFAULT_ORIGIN, Origins
from pipeline.config.schema import Config
from pipeline.engine import atomic, locations, storage
from pipeline.errors import ConfigError, StorageError, TokenizerError

if TYPE_CHECKING:  # loaded only for a config that names a tokenizer file: every command reads the config
    from pipeline.tokenizer import Tokenizer

FROM_FILE = ("kind", "vocab_size", "merges", "pattern", "special_tokens")
NULLABLE = ("vocab_size", "merges", "pattern")
MEMO = "tokenizer-files.json"
"""In the state dir: what the tokenizer files met last say, by their content identity."""
MEMO_ENTRIES = 16
MEMO_BYTES = 1 << 20


@dataclasses.dataclass(frozen=True)
class FileSettings:
    """What a tokenizer file says of the settings in :data:`FROM_FILE`: all that checking a config against it
    needs, so that it can be remembered instead of loading the file again."""

    kind: str
    vocab_size: int
    merges: int
    pattern: str  # the split regex
    pattern_value: str  # as a config gives it: a pattern's name, or the regex of a custom one
    special_tokens: tuple[str, ...]  # in ID order

    @classmethod
    def of(cls, tokenizer: Tokenizer) -> FileSettings:
        from pipeline.tokenizer.patterns import pattern_name

        name = pattern_name(tokenizer.pattern)
        return cls(kind=tokenizer.kind, vocab_size=tokenizer.vocab_size, merges=len(tokenizer.merges),
                   pattern=tokenizer.pattern, pattern_value=tokenizer.pattern if name == "custom" else name,
                   special_tokens=tuple(sorted(tokenizer.special_tokens, key=tokenizer.special_tokens.get)))


def with_frozen_tokenizer(config: Config, origins: Origins) -> Config:
    """``config`` with the settings of ``FROM_FILE`` read from ``tokenizer.path`` (and their origin recorded as
    that file); unchanged without a path, or while the file is missing or no tokenizer file (the tokenizer stage
    says so when it runs; the commands that need no tokenizer, such as ``lmprep dag``, still work)."""
    settings = config.tokenizer
    if settings.path is None:
        return config
    try:
        file = file_settings(config.here(settings.path), config.output_path(config.state_dir))
    except (TokenizerError, StorageError):
        return config
    by_merges = settings.vocab_size is None and settings.merges is not None and file.kind != "word"
    found = _config_values(file, by_merges=by_merges)
    for key, value in found.items():
        given, origin = getattr(settings, key), origins.of(f"tokenizer.{key}")
        if given is not None and origin != DEFAULT_ORIGIN and _contradicts(key, given, file):
            or_null = " or null (the file's is then used)" if key in NULLABLE else ""
            raise ConfigError(f"{origin}: tokenizer.{key} {_shown(given)} contradicts tokenizer.path "
                              f"{settings.path!r}, {_described(key, file)}; set tokenizer.{key} to "
                              f"{_shown(value)}{or_null}")
        origins.set(f"tokenizer.{key}", f"tokenizer.path {settings.path}")
    return dataclasses.replace(config, tokenizer=dataclasses.replace(settings, **found))


def file_settings(path: str, state_dir: str) -> FileSettings:
    """What the tokenizer file ``path`` says, as the memo in ``state_dir`` remembers it for the file's content,
    else loaded (TokenizerError or StorageError for a file that is missing or no tokenizer file) and remembered
    there. A project that has not run (no state dir) or whose state dir is remote or cannot be written loads the
    file each time."""
    from pipeline.tokenizer import shared

    memo_path = None if locations.is_url(state_dir) else os.path.join(state_dir, MEMO)
    try:
        identity = shared.content_identity(path)
    except OSError:  # missing or unreadable: loading it says what is wrong
        identity = memo_path = None
    memo = _read_memo(memo_path) if memo_path else {}
    if identity in memo:
        return memo[identity]
    found = FileSettings.of(shared.load(path))  # the run's one load of it (the encode stage's too)
    if memo_path and os.path.isdir(state_dir) and _unchanged(path, identity):
        _write_memo(memo_path, {**memo, identity: found})
    return found


def _unchanged(path: str, identity: str) -> bool:
    """Whether the file still has the content ``identity`` names: one replaced while it was loaded is not
    remembered under its old bytes."""
    from pipeline.tokenizer import shared

    try:
        return shared.content_identity(path) == identity
    except OSError:
        return False


def _read_memo(path: str) -> dict[str, FileSettings]:
    """The memo's entries; none for a memo missing, torn or not a regular file, and none of an entry that is not
    one :func:`_write_memo` writes (the file is then loaded, and the next write replaces the memo)."""
    try:
        found = json.loads(storage.read_bounded(path, MEMO_BYTES, what="tokenizer memo"))
    except (OSError, ValueError, StorageError, RecursionError):
        return {}
    if not isinstance(found, dict):
        return {}
    return {identity: settings for identity, entry in found.items() if (settings := _entry(entry)) is not None}


def _entry(entry: Any) -> FileSettings | None:
    """The settings of a memo's entry, or None for one that is not what :func:`_write_memo` writes."""
    if not isinstance(entry, dict) or entry.keys() != {field.name for field in dataclasses.fields(FileSettings)}:
        return None
    tokens = entry["special_tokens"]
    if not (all(type(entry[key]) is int for key in ("vocab_size", "merges"))
            and all(type(entry[key]) is str for key in ("kind", "pattern", "pattern_value"))
            and isinstance(tokens, list) and all(type(token) is str for token in tokens)):
        return None
    return FileSettings(**{**entry, "special_tokens": tuple(tokens)})


def _write_memo(path: str, memo: dict[str, FileSettings]) -> None:
    """Replace the memo with its newest :data:`MEMO_ENTRIES` entries; a state dir that cannot be written only
    costs the next command a load."""
    kept = list(memo.items())[-MEMO_ENTRIES:]
    with contextlib.suppress(OSError):
        atomic.write_json(path, {identity: dataclasses.asdict(settings) for identity, settings in kept})


def _config_values(file: FileSettings, *, by_merges: bool) -> dict[str, Any]:
    """The config values that describe the file; its size as ``merges`` when the config gives it so."""
    return {"kind": file.kind,
            "vocab_size": None if by_merges else file.vocab_size,
            "merges": file.merges if by_merges else None,
            "pattern": file.pattern_value,
            "special_tokens": file.special_tokens}


def _contradicts(key: str, given: Any, file: FileSettings) -> bool:
    if key == "vocab_size":
        return file.vocab_size > given
    if key == "merges":
        return file.merges > given
    if key == "pattern":
        from pipeline.tokenizer.patterns import resolve_pattern

        return resolve_pattern(given, kind=file.kind) != file.pattern
    return given != _config_values(file, by_merges=False)[key]


def _described(key: str, file: FileSettings) -> str:
    """What the file has for ``key``: ``a byte tokenizer``, ``which has 2,048 IDs``."""
    if key == "kind":
        return f"a {file.kind} tokenizer"
    if key == "vocab_size":
        return f"which has {file.vocab_size:,} IDs"
    if key == "merges":
        return f"which has {file.merges:,} merges"
    return f"whose {key.replace('_', ' ')} is {_shown(_config_values(file, by_merges=False)[key])}"


def _shown(value: Any) -> str:
    return repr(list(value)) if isinstance(value, tuple) else repr(value)
