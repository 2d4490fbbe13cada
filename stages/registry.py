"""The concrete pipeline: its stages, in order.

Each stage lives in its own module under ``stages/`` exposing
``build(config) -> Stage``; this is the one place that lists them.
"""

from __future__ import annotations

from pipeline.config import Config
from pipeline.runner import Stage
from stages import encode, prepare, tokenize, train

STAGE_MODULES = (prepare, tokenize, encode, train)
# stages whose outputs are trained checkpoints: `lmprep clean` keeps them unless asked
CHECKPOINT_STAGES = ("train",)


def build_stages(config: Config) -> list[Stage]:
    """Every stage, built from ``config``, in pipeline order."""
    return [module.build(config) for module in STAGE_MODULES]
