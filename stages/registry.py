"""The concrete pipeline: its stages, in order, each declared once.

Each stage lives in its own module under ``stages/``, named after it, exposing
``build(config) -> Stage``. Everything else here is derived from :data:`STAGES`. A stage module imports at
its top only what ``build`` needs and the rest where the stage runs, so that ``lmprep status`` and a run with
nothing to do load no numpy, pyarrow, torch or regex (tests/stages/test_startup.py).

A stage module whose outputs come from code in ``pipeline/`` declares ``CODE_VERSION``, the
version of that code (``Stage.code_version``): bump it whenever the same inputs and settings
would give other outputs, and the stage re-runs wherever it ran before; the comment beside it
says what changed at the current version. tests/stages/test_code_versions.py pins the outputs
of each version on a small corpus.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter
from types import ModuleType

from pipeline.config import Config
from pipeline.engine.runner import Stage
from stages import encode, export, prepare, report, stats, tokenizer, train


@dataclass(frozen=True)
class StageSpec:
    """One stage of the pipeline: its name, the module that builds it, the config key of its main output,
    whether the config may leave it out (it is then in the pipeline when that output is set) and whether
    its outputs are trained checkpoints (``lmprep clean`` keeps those unless asked)."""

    name: str
    module: ModuleType
    output_key: str
    optional: bool = False
    checkpoints: bool = False


STAGES = (
    StageSpec("prepare", prepare, "prepare.output_dir"),
    StageSpec("tokenizer", tokenizer, "tokenizer.output"),
    StageSpec("encode", encode, "encode.output_dir"),
    StageSpec("train", train, "train.output_dir", checkpoints=True),
    StageSpec("export", export, "export.output_dir", optional=True),
    StageSpec("stats", stats, "stats.output_dir", optional=True),
    StageSpec("report", report, "report.output", optional=True),
)
STAGE_NAMES = tuple(spec.name for spec in STAGES)
CHECKPOINT_STAGES = tuple(spec.name for spec in STAGES if spec.checkpoints)


def declared(spec: StageSpec, config: Config) -> bool:
    """Whether the config declares the stage: every required one, an optional one when its output is set."""
    return not spec.optional or attrgetter(spec.output_key)(config) is not None


def build_stages(config: Config) -> list[Stage]:
    """Every stage the config declares, in pipeline order."""
    return [spec.module.build(config) for spec in STAGES if declared(spec, config)]


def stage_outputs(config: Config) -> dict[str, str]:
    """Each declared stage's main output, as a path to open from the current directory, without
    building the stages (building prepare reads the source globs)."""
    outputs = {spec.name: attrgetter(spec.output_key)(config) for spec in STAGES}
    return {stage: config.output_path(value) for stage, value in outputs.items() if value is not None}
