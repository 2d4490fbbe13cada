"""Which implementation runs the hot loops: the compiled core (``_native``) or the pure-Python path.

``reference.py`` is the definition and the Python path; the native core, built from ``_native.cpp`` by
``pip install`` when a C++ compiler is at hand, gives exactly its chunks, IDs and merges, much faster. Chosen once,
at import: ``LMPREP_BACKEND=python`` forces the Python path; otherwise the core is used when it imports,
and when it does not, one line on stderr says so and the Python path takes over. ``lmprep --version``
names the backend in use (docs/native.md).
"""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType

ENVIRONMENT_VARIABLE = "LMPREP_BACKEND"
CHOICES = ("native", "python")


def _warn(message: str) -> None:
    sys.stderr.write(f"lmprep: warning: {message}\n")


def _load() -> ModuleType | None:
    choice = os.environ.get(ENVIRONMENT_VARIABLE, "").strip().lower() or "native"
    if choice not in CHOICES:
        _warn(f"{ENVIRONMENT_VARIABLE}={choice!r} is not a backend ({' or '.join(CHOICES)}); trying native")
    if choice == "python":
        return None
    try:
        return importlib.import_module("pipeline.tokenizer._native")
    except ImportError as exc:
        _warn(f"the native tokenizer core does not load ({exc}); using the slower pure-Python path")
        return None


native: ModuleType | None = _load()


def name() -> str:
    """``native`` or ``python``: the backend this process encodes with."""
    return "python" if native is None else "native"
