"""Prepare's chain of steps, as ``prepare.steps`` declares it.

Every document passes, in order: ``read`` (decoding; rule ``decode_error``), cleaning, ``length``
(``prepare.min_chars``/``max_chars``; rules ``empty``, ``too_short``, ``too_long``), then each step of
``prepare.steps``: ``exact_dedup`` (rule ``duplicate``), ``near_dedup`` (rule ``near_duplicate``), and
the filters ``gopher_quality``, ``gopher_repetition``, ``c4``, ``fineweb`` (:mod:`pipeline.data.quality`;
``c4`` also removes lines) and ``language`` (:mod:`pipeline.data.language`). A filter decides on one document
alone, so it runs inside a partition task; a de-duplication step needs the whole corpus, so the chain is
cut into :class:`Segment` s, each some filters then at most one de-duplication step, and prepare runs one
round of partition tasks per segment.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from pipeline.config.schema import PrepareConfig, StepConfig
from pipeline.data.cleaning import drop_reason
from pipeline.data.dedup import ExactDedup
from pipeline.data.language import LanguageFilter
from pipeline.data.near_dedup import NearDedup
from pipeline.data.quality import C4, FineWeb, GopherQuality, GopherRepetition, KeepsText

READ_STEP = "read"
DECODE_ERROR = "decode_error"


class Filter(Protocol):
    name: str

    def rewrite(self, text: str) -> tuple[str, Mapping[str, int]]:
        """The text the step keeps of ``text`` (most keep all of it), and the lines it removed by rule."""

    def reject(self, text: str) -> str | None:
        """The rule that drops the (rewritten) ``text``, or None to keep it."""

    def decide(self, text: str) -> tuple[str | None, tuple[str, float] | None]:
        """:meth:`reject`'s rule, and the language and its probability when the step identifies one."""


@dataclass(frozen=True)
class LengthFilter(KeepsText):
    min_chars: int
    max_chars: int | None
    name: str = "length"

    def reject(self, text: str) -> str | None:
        return drop_reason(text, min_chars=self.min_chars, max_chars=self.max_chars)


Dedup = ExactDedup | NearDedup


@dataclass(frozen=True)
class Segment:
    """Filters applied in order in a partition task, then the de-duplication step that follows them."""

    filters: tuple[Filter, ...]
    dedup: Dedup | None


def identifies_language(chain: tuple[Segment, ...]) -> bool:
    """Whether the chain has a ``language`` step, whose findings the kept parts then record."""
    return any(isinstance(check, LanguageFilter) for segment in chain for check in segment.filters)


def build_chain(settings: PrepareConfig) -> tuple[Segment, ...]:
    """The segments of the configured chain; the last has no de-duplication step."""
    segments: list[Segment] = []
    filters: list[Filter] = [LengthFilter(settings.min_chars, settings.max_chars)]
    for step in settings.steps:
        made = _step(step, settings)
        if isinstance(made, (ExactDedup, NearDedup)):
            segments.append(Segment(tuple(filters), made))
            filters = []
        else:
            filters.append(made)
    return (*segments, Segment(tuple(filters), None))


def _step(step: StepConfig, settings: PrepareConfig) -> Filter | Dedup:
    """The step an item of ``prepare.steps`` names (the config allows exactly one key per item)."""
    if step.exact_dedup is not None:
        return ExactDedup(settings.dedup_buckets)
    if step.near_dedup is not None:
        return NearDedup(step.near_dedup)
    if step.gopher_quality is not None:
        return GopherQuality(step.gopher_quality)
    if step.gopher_repetition is not None:
        return GopherRepetition(step.gopher_repetition)
    if step.c4 is not None:
        return C4(step.c4)
    if step.fineweb is not None:
        return FineWeb(step.fineweb)
    assert step.language is not None
    return LanguageFilter(step.language)
