"""Where each value of a config came from: a file of an ``extends`` chain, ``--set``, a frozen tokenizer's
file or the built-in default; errors and ``lmprep config show --origin`` name it."""

from __future__ import annotations

from typing import Any

from pipeline.config.schema import join_key

SET_ORIGIN = "--set"
DEFAULT_ORIGIN = "built-in default"


class Origins:
    """Where each key's value came from: the longest recorded prefix of a key path names its source."""

    def __init__(self, fallback: str):
        self.fallback = fallback
        self._by_key: dict[str, str] = {}

    def set(self, key_path: str, origin: str) -> None:
        """Record ``origin`` for ``key_path`` and everything under it."""
        prefix = key_path + "."
        for key in [key for key in self._by_key if key.startswith(prefix)]:
            del self._by_key[key]
        self._by_key[key_path] = origin

    def record(self, raw: Any, origin: str, prefix: str = "") -> None:
        """Record ``origin`` for every leaf of ``raw`` (a list counts as one value)."""
        if isinstance(raw, dict) and raw:
            for key, value in raw.items():
                self.record(value, origin, join_key(prefix, str(key)))
        elif prefix:
            self.set(prefix, origin)

    def of(self, key_path: str) -> str:
        """The source of ``key_path`` (``a.b[0].c`` or ``a.b.0.c``); the built-in default if none set it."""
        parts = key_path.replace("[", ".").replace("]", "").split(".")
        for end in range(len(parts), 0, -1):
            origin = self._by_key.get(".".join(parts[:end]))
            if origin is not None:
                return origin
        return DEFAULT_ORIGIN

    def __call__(self, key_path: str) -> str:
        """The source to name in an error about ``key_path``: a default value's error is the file's."""
        origin = self.of(key_path)
        return self.fallback if origin == DEFAULT_ORIGIN else origin
