"""The concrete pipeline: which stages exist, in order.

Each stage lives in its own module ``stages/<module>.py`` exposing
``build(config) -> Stage``. A stage whose module is not there yet is listed
as unavailable, as are the stages after it, so the CLI can say so instead of pretending.
"""

from __future__ import annotations

import importlib
import importlib.util

from pipeline.config import Config
from pipeline.runner import Stage

# stage name → module under stages/, in pipeline order
PIPELINE = {"prepare": "prepare", "tokenizer": "tokenize", "encode": "encode", "train": "train"}
# stages whose outputs are trained checkpoints: `lmprep clean` keeps them unless asked
CHECKPOINT_STAGES = ("train",)


def available_stages() -> list[str]:
    """The stages up to the first one not built yet (a later stage would lack its inputs)."""
    names = []
    for name, module in PIPELINE.items():
        if not _module_exists(module):
            break
        names.append(name)
    return names


def unavailable_stages() -> list[str]:
    return [name for name in PIPELINE if name not in available_stages()]


def build_stages(config: Config) -> list[Stage]:
    """The available stages, built from ``config``, in pipeline order."""
    return [importlib.import_module(f"stages.{PIPELINE[name]}").build(config) for name in available_stages()]


def _module_exists(module: str) -> bool:
    return importlib.util.find_spec(f"stages.{module}") is not None
