"""A document as prepare's steps see it, what a step answers, and the two kinds of step.

A **filter step** decides on one document alone, so it runs inside the partition tasks: one method,
:meth:`FilterStep.apply`, answers :data:`KEEP`, :class:`Drop` (with the rule that drops it) or
:class:`Rewrite` (the text it keeps). A **de-duplication step** needs the whole corpus: it records a key
per document in the partition tasks, runs its own bucket tasks and marks the duplicates
(:class:`DedupStep`). Both are entries of :mod:`pipeline.data.registry`, which generates the config's
``prepare.steps`` entries from their ``Settings``; docs/extending.md shows how to write one.

A document carries ``metadata``: values by name, each a typed column of the kept parts and of
``rejected/``. A step declares the fields it sets (:attr:`FilterStep.metadata`), a reader those it
gives, and a source those it keeps from its records (``data.sources[i].metadata``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

from pipeline.errors import ConfigError

if TYPE_CHECKING:
    from pathlib import Path

    import pyarrow as pa

    from pipeline.engine.executor import Tasks


@dataclass(slots=True)
class Document:
    """One document: its text, its entry in ``data.sources``, its ID (the raw file, or the part one task read,
    then ``#`` and its number there), its metadata, and its position in its partition (the rounds' key)."""

    text: str
    source: int
    id: str
    metadata: dict[str, Any] = field(default_factory=dict)
    position: int = 0
    read: str | None = None  # the text as read, once a step rewrote it (rejected/ keeps both)


_NOTHING_REMOVED: Mapping[str, int] = MappingProxyType({})


class Keep(NamedTuple):
    """Keep the document as it is."""


KEEP = Keep()


class Drop(NamedTuple):
    """Drop the document by ``rule``; a step that removed lines first says how many by rule (``removed``) and
    what was left (``text``), which ``rejected/`` keeps beside the document as read."""

    rule: str
    removed: Mapping[str, int] = _NOTHING_REMOVED
    text: str | None = None


class Rewrite(NamedTuple):
    """Keep ``text`` in place of the document's; ``removed`` counts the lines removed by rule (the stats show them)."""

    text: str
    removed: Mapping[str, int] = _NOTHING_REMOVED


Answer = Keep | Drop | Rewrite
"""Named tuples, as they are made for every document a step drops or rewrites."""


# -- metadata ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MetadataField:
    """A metadata field and its type: ``string``, ``int64``, ``float64`` or ``bool``. Documents without it
    (of another source, or before a step set it) hold the type's zero (``""``, 0, 0.0, false)."""

    name: str
    type: str = "string"

    @property
    def arrow(self) -> pa.Field:
        import pyarrow as pa  # when a part is written: the config's checks and ``lmprep status`` need no pyarrow

        return pa.field(self.name, getattr(pa, METADATA_TYPES[self.type][0])(), nullable=False)

    @property
    def zero(self) -> Any:
        return METADATA_TYPES[self.type][1]

    def check(self, value: Any) -> str | None:
        """Why ``value`` cannot be this field's, or None."""
        wanted = METADATA_TYPES[self.type][2]
        typed = isinstance(value, wanted) and not (self.type in ("int64", "float64") and isinstance(value, bool))
        if typed and (self.type != "int64" or -(2**63) <= value < 2**63):
            return None
        return f"metadata {self.name!r} must be {self.type}, got {type(value).__name__} {value!r:.60}"


METADATA_TYPES: dict[str, tuple[str, Any, type | tuple[type, ...]]] = {  # the arrow type's factory, zero, Python types
    "string": ("large_string", "", str),
    "int64": ("int64", 0, int),
    "float64": ("float64", 0.0, (int, float)),
    "bool": ("bool_", False, bool),
}
RESERVED_FIELDS = ("text", "source", "document", "position", "step", "rule", "duplicate_of", "rewritten")


def parse_field(spec: str, key: str) -> MetadataField:
    """``name`` or ``name:type`` (as ``data.sources[i].metadata`` and a custom step's ``metadata`` write them)."""
    name, _, kind = spec.partition(":")
    kind = kind or "string"
    if not name.isidentifier() or name in RESERVED_FIELDS:
        raise ConfigError(f"{key}: {spec!r} is not a metadata field name (an identifier, not one of "
                          f"{', '.join(RESERVED_FIELDS)})")
    if kind not in METADATA_TYPES:
        raise ConfigError(f"{key}: {spec!r} has no known type; write name:{'|'.join(METADATA_TYPES)}")
    return MetadataField(name, kind)


# -- the two kinds of step ---------------------------------------------------------------------------


class FilterStep:
    """A rule on one document alone. Subclasses set ``name`` (its key in ``prepare.steps`` and in the stats),
    ``Settings`` (a frozen dataclass: the step's parameters, validated as any config section), optionally
    ``metadata`` (the fields :meth:`apply` sets in ``document.metadata``) and ``rewrites`` (whether it may
    answer :class:`Rewrite`, so that ``rejected/`` keeps what the rewrites left)."""

    name: ClassVar[str]
    Settings: ClassVar[type]
    metadata: tuple[MetadataField, ...] = ()
    rewrites: bool = False

    def __init__(self, settings: Any):
        self.settings = settings

    def apply(self, document: Document) -> Answer:
        raise NotImplementedError


class TextRule(FilterStep):
    """A filter that decides from the text alone, through :meth:`reject`."""

    def apply(self, document: Document) -> Answer:
        rule = self.reject(document.text)
        return KEEP if rule is None else Drop(rule)

    def reject(self, text: str) -> str | None:
        """The rule that drops ``text``, or None to keep it."""
        raise NotImplementedError


class DedupStep:
    """A step over every partition: a key writer per partition task (:meth:`keys`), its own tasks
    (:meth:`resolve`), and the marks the next round reads (:meth:`marks`). ``rule`` names what it drops."""

    name: ClassVar[str]
    Settings: ClassVar[type]
    rule: ClassVar[str]

    def __init__(self, settings: Any):
        self.settings = settings

    @property
    def buckets(self) -> int:
        return self.settings.buckets

    def keys(self, work: Path | str, round_: int, index: int) -> Any:
        raise NotImplementedError

    def resolve(self, tasks: Tasks, work: Path | str, round_: int, partitions: int, *, progress: bool) -> None:
        raise NotImplementedError

    def mark_files(self, work: Path | str, round_: int) -> list[Path | str]:
        """What :meth:`resolve` writes and the next round reads."""
        raise NotImplementedError

    def marks(self, work: Path | str, round_: int, index: int) -> dict[int, tuple[int, int]]:
        """Partition ``index``'s marked positions, each with the (partition, position) of the document it repeats."""
        raise NotImplementedError
