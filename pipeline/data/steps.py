"""Prepare's chain of steps, as ``prepare.steps`` declares it.

Every document passes, in order: ``read`` (decoding; rule ``decode_error``), cleaning, ``length``
(``prepare.min_chars``/``max_chars``; rules ``empty``, ``too_short``, ``too_long``), then each step of
``prepare.steps``, each an entry of :mod:`pipeline.data.registry`: the filters decide on one document alone,
so they run inside the partition tasks; a de-duplication step needs the whole corpus, so the chain is cut
into :class:`Segment` s, each some filters then at most one de-duplication step, and prepare runs one round
of partition tasks per segment. A step with ``only:`` or ``except:`` applies to some sources alone (a
de-duplication step then compares the documents of those sources among themselves).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pipeline.config.schema import PrepareConfig, SourceConfig, StepConfig
from pipeline.data.cleaning import drop_reason
from pipeline.data.record import DedupStep, Document, FilterStep, MetadataField, TextRule, parse_field
from pipeline.data.registry import STEPS
from pipeline.errors import ConfigError

READ_STEP = "read"
DECODE_ERROR = "decode_error"


class LengthFilter(TextRule):
    """``prepare.min_chars`` and ``max_chars``: the first rule of every chain, not a step of ``prepare.steps``."""

    name = "length"

    def reject(self, text: str) -> str | None:
        return drop_reason(text, min_chars=self.settings.min_chars, max_chars=self.settings.max_chars)


@dataclass(frozen=True)
class Scoped:
    """A step and the sources it applies to (None: every source)."""

    step: FilterStep | DedupStep
    sources: frozenset[int] | None = None

    def applies(self, document: Document) -> bool:
        return self.sources is None or document.source in self.sources


@dataclass(frozen=True)
class Segment:
    """Filters applied in order in a partition task, then the de-duplication step that follows them."""

    filters: tuple[Scoped, ...]
    dedup: Scoped | None


@dataclass(frozen=True)
class Chain:
    """The segments of the configured chain (the last has no de-duplication step), and the metadata fields its
    documents carry: the sources' then the steps', in order, each a column of the kept parts and ``rejected/``."""

    segments: tuple[Segment, ...]
    fields: tuple[MetadataField, ...]

    @property
    def rewrites(self) -> bool:
        """Whether a step may rewrite documents (so that ``rejected/`` keeps what the rewrites left)."""
        return any(scoped.step.rewrites for segment in self.segments for scoped in segment.filters)

    @property
    def code_files(self) -> tuple[str, ...]:
        """The files of the user's code the steps run."""
        return tuple(file for segment in self.segments for scoped in segment.filters
                     for file in getattr(scoped.step, "code_files", ()))

    def load(self) -> None:
        """Import the user's steps here, so that a broken one fails before any task runs."""
        for segment in self.segments:
            for scoped in segment.filters:
                if hasattr(scoped.step, "load"):
                    scoped.step.load()


def build_chain(settings: PrepareConfig, sources: Sequence[SourceConfig] = (), *, root: str = ".") -> Chain:
    """The configured chain; a user's step's file is relative to ``root`` (the config's directory)."""
    segments: list[Segment] = []
    filters: list[Scoped] = [Scoped(LengthFilter(settings))]
    fields = [parse_field(spec, f"data.sources[{i}].metadata") for i, source in enumerate(sources)
              for spec in source.metadata]
    for index, item in enumerate(settings.steps):
        key = f"prepare.steps[{index}].{item.name}"
        scoped = Scoped(_step(item, key, settings, root), _scope(item, sources))
        if isinstance(scoped.step, DedupStep):
            segments.append(Segment(tuple(filters), scoped))
            filters = []
        else:
            if hasattr(scoped.step, "inherited"):
                scoped.step.inherited = frozenset(field.name for field in fields)
            fields += scoped.step.metadata
            filters.append(scoped)
    return Chain((*segments, Segment(tuple(filters), None)), _distinct(fields))


def _step(item: StepConfig, key: str, settings: PrepareConfig, root: str) -> FilterStep | DedupStep:
    """The step an item of ``prepare.steps`` names, with its settings (the step's defaults where none were given)."""
    cls = STEPS[item.name]
    step_settings = item.settings if item.settings is not None else cls.Settings()
    if item.name == "custom":
        return cls(step_settings, root=root, key=key)  # type: ignore[call-arg]
    return cls(step_settings)


def _scope(item: StepConfig, sources: Sequence[SourceConfig]) -> frozenset[int] | None:
    """The indexes of the sources the step applies to, from its ``only:`` or ``except:`` names (the config's
    validation checked that they name sources)."""
    if not item.only and not item.except_:
        return None
    named = {source.name: index for index, source in enumerate(sources) if source.name is not None}
    if item.only:
        return frozenset(named[name] for name in item.only)
    return frozenset(range(len(sources))) - {named[name] for name in item.except_}


def _distinct(fields: list[MetadataField]) -> tuple[MetadataField, ...]:
    """Each field once, in first-seen order; one name given two types is a ConfigError."""
    seen: dict[str, MetadataField] = {}
    for field in fields:
        if seen.setdefault(field.name, field).type != field.type:
            raise ConfigError(f"metadata {field.name!r} is declared both {seen[field.name].type} and {field.type}; "
                              "give it one type (data.sources[i].metadata and the steps' metadata)")
    return tuple(seen.values())
