"""Every step prepare's chain can name and every reader a source can use, each registered once here.

A step's entry generates its ``prepare.steps`` key (its ``name``), the key's parameters (its ``Settings``
dataclass, validated as any config section) and its dispatch: adding a built-in step is its module and
one line below. A user's own step is the ``custom`` entry; a user's own reader is ``data.sources[i].reader``
(docs/extending.md).
"""

from __future__ import annotations

from pipeline.data.custom import Custom
from pipeline.data.dedup import ExactDedup
from pipeline.data.language import LanguageFilter
from pipeline.data.near_dedup import NearDedup
from pipeline.data.quality import C4, FineWeb, GopherQuality, GopherRepetition
from pipeline.data.readers import JsonlReader, ParquetReader, TxtReader, UserReader
from pipeline.data.reading import Reader
from pipeline.data.record import DedupStep, FilterStep

StepClass = type[FilterStep] | type[DedupStep]

STEPS: dict[str, StepClass] = {step.name: step for step in (
    ExactDedup,
    NearDedup,
    GopherQuality,
    GopherRepetition,
    C4,
    FineWeb,
    LanguageFilter,
    Custom,
)}

READERS: dict[str, Reader] = {reader.name: reader for reader in (
    TxtReader(),
    JsonlReader(),
    ParquetReader(),
    UserReader(),
)}
