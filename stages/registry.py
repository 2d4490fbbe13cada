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


def stage_outputs(config: Config) -> dict[str, str]:
    """Each stage's output, as a path to open from the current directory, without building the stages
    (building prepare reads the source globs)."""
    return {
        "prepare": config.output_path(config.prepare.output_dir),
        "tokenizer": config.output_path(config.tokenizer.output),
        "encode": config.output_path(config.encode.output_dir),
        "train": config.output_path(config.train.output_dir),
    }
