"""A function of the user's, named in a config: ``path/to/file.py:name`` (relative to the config's directory)
or ``package.module:name`` (an installed module).

The driver resolves the name once (:func:`resolve`): the file, and the sha256 of its bytes, which the stage
makes a dependency, so editing the function re-runs prepare and ``lmprep status`` names the file. A worker
imports the file itself (:meth:`UserCode.load`), so nothing of the user's is pickled, and refuses to run
another version of it than the driver hashed: a Dask worker on another machine must see the same code.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from pipeline.engine import hashing
from pipeline.errors import ConfigError, DataError, shorten

_LOADED: dict[str, ModuleType] = {}  # sha256 of a file → its module, once per process


@dataclass(frozen=True)
class UserCode:
    """A resolved function name: the file holding it (absolute, so that a worker in another directory finds it),
    its sha256, the module (None for a file given by path) and the function's name; ``key`` is the config key that
    named it and ``spec`` what it says, for messages."""

    key: str
    spec: str
    file: str
    sha256: str
    module: str | None
    attribute: str

    @property
    def shown(self) -> str:
        return f"{self.key} {self.spec!r}"

    @property
    def target(self) -> str:
        """The file or module, as the config names it."""
        return self.spec.rpartition(":")[0]

    def load(self) -> Callable[..., Any]:
        """The function, imported in this process; DataError when the file is another than the driver's."""
        if not os.path.isfile(self.file):
            raise DataError(f"{self.shown}: this worker cannot see {self.file}; give the workers the same code")
        found = hashing.sha256_file(self.file)
        if found != self.sha256:
            raise DataError(f"{self.shown}: this worker sees another {self.file} than the run started with "
                            f"(sha256 {found[:12]}…, not {self.sha256[:12]}…); give every worker the same code")
        module = _LOADED.get(self.sha256) or _import(self)
        _LOADED[self.sha256] = module
        function = getattr(module, self.attribute, None)
        if function is not None and not callable(function):
            raise DataError(f"{self.shown}: {self.attribute!r} in {self.target} is {type(function).__name__} "
                            f"{shorten(repr(function))}, not a function")
        if not callable(function):
            names = sorted(name for name, value in vars(module).items() if callable(value) and not name.startswith("_"))
            raise DataError(f"{self.shown}: {self.target} has no function {self.attribute!r} "
                            f"(it has: {', '.join(names) or 'none'})")
        return function


def resolve(spec: str, *, root: str, key: str) -> UserCode:
    """The function ``spec`` names, a file's path taken relative to ``root``; ConfigError naming ``key`` when
    the spec is malformed or its file or module cannot be found (nothing is imported here)."""
    target, sep, attribute = spec.rpartition(":")
    if not sep or not target or not attribute.isidentifier():
        raise ConfigError(f"{key}: {spec!r} must be 'path/to/file.py:function' or 'package.module:function'")
    if target.endswith(".py"):
        file = os.path.abspath(os.path.join(root, target))
        if not os.path.isfile(file):
            raise ConfigError(f"{key}: {os.path.relpath(file)} (from {spec!r}) does not exist")
        return UserCode(key, spec, file, hashing.sha256_file(file), None, attribute)
    try:
        found = importlib.util.find_spec(target)
    except (ImportError, ValueError) as exc:
        raise ConfigError(f"{key}: cannot find module {target!r} ({shorten(str(exc))})") from None
    if found is None or not found.origin or not os.path.isfile(found.origin):
        raise ConfigError(f"{key}: no module {target!r} on the Python path (from {spec!r}); "
                          "install it, or name a file: 'path/to/file.py:function'")
    return UserCode(key, spec, found.origin, hashing.sha256_file(found.origin), target, attribute)


def _import(code: UserCode) -> ModuleType:
    """Import the module, any error in it (a syntax error, a failed import) a DataError of one line."""
    try:
        if code.module is not None:
            return importlib.import_module(code.module)
        name = f"lmprep_user_{code.sha256[:16]}"
        spec = importlib.util.spec_from_file_location(name, code.file)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses and pickling look a module up by name
        spec.loader.exec_module(module)
        return module
    except Exception as exc:  # the user's module may raise anything while it runs
        line = f" (line {_failing_line(exc, code.file)})" if _failing_line(exc, code.file) else ""
        raise DataError(f"{code.shown}: importing {code.target} failed{line}: "
                        f"{type(exc).__name__}: {shorten(str(exc))}") from exc


def _failing_line(exc: BaseException, file: str) -> int | None:
    """The line of ``file`` where importing it failed: a syntax error's, or the last frame of the file."""
    if isinstance(exc, SyntaxError) and exc.filename == file:
        return exc.lineno
    lines = [frame.lineno for frame in traceback.extract_tb(exc.__traceback__) if frame.filename == file]
    return lines[-1] if lines else None
