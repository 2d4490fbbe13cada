"""The concrete pipeline: its stages, in order.

Each stage lives in its own module under ``stages/`` exposing
``build(config) -> Stage`` (``Stage | None`` for an optional stage the config
may leave out); this is the one place that lists them.
"""

from __future__ import annotations

from pipeline.config import Config
from pipeline.runner import Stage
from stages import encode, export, prepare, stats, tokenize, train

STAGE_MODULES = (prepare, tokenize, encode, train, export, stats)
STAGE_NAMES = ("prepare", "tokenizer", "encode", "train", "export", "stats")
OPTIONAL_STAGES = ("export", "stats")  # in the pipeline when the config sets their output_dir
# stages whose outputs are trained checkpoints: `lmprep clean` keeps them unless asked
CHECKPOINT_STAGES = ("train",)


def build_stages(config: Config) -> list[Stage]:
    """Every stage the config declares, in pipeline order."""
    return [stage for stage in (module.build(config) for module in STAGE_MODULES) if stage is not None]
