"""The user's own filter step: ``- custom: {function: "steps/my_filter.py:drop_boilerplate", params: {…}}``.

The function is called on each document, in the partition tasks, as ``function(document, **params)`` and
answers as datatrove's filters do, or as a built-in step:

- ``True`` or ``None``: keep it; ``False``: drop it (rule ``dropped``); ``(False, "rule")``: drop it by ``rule``;
- a ``str``: keep that text in place of the document's (a rewrite);
- :data:`~pipeline.data.record.KEEP`, :class:`~pipeline.data.record.Drop` or
  :class:`~pipeline.data.record.Rewrite`.

It may set the metadata it declares (``metadata: [score:float64]``) in ``document.metadata``. Anything else
it returns, an undeclared field or an exception is a DataError of one line naming the step and the document
(the traceback goes to the stage's log).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pipeline.data.record import KEEP, Answer, Document, Drop, FilterStep, Keep, Rewrite, parse_field
from pipeline.data.user_code import UserCode, resolve
from pipeline.errors import DataError, PipelineError, shorten

DROPPED = "dropped"
"""The rule of a document the function answered ``False`` for."""


@dataclass(frozen=True)
class CustomStep:
    """A filter of the user's: ``function`` (``path/to/file.py:name``, relative to the config's directory, or
    ``package.module:name``) called as ``function(document, **params)``; ``metadata`` the fields it sets
    (``name`` or ``name:type``); ``name`` its name in the stats and ``rejected/`` (the function's by default)."""

    function: str
    params: dict[str, Any] = field(default_factory=dict)
    metadata: tuple[str, ...] = ()
    name: str | None = None

    @property
    def step_name(self) -> str:
        return self.name or self.function.rpartition(":")[2]


class Custom(FilterStep):
    name = "custom"
    Settings = CustomStep

    def __init__(self, settings: CustomStep, *, root: str = ".", key: str = "custom"):
        super().__init__(settings)
        self.name = settings.step_name  # type: ignore[misc]  # each custom step is named for its function
        self.code: UserCode = resolve(settings.function, root=root, key=f"{key}.function")
        self.metadata = tuple(parse_field(spec, f"{key}.metadata") for spec in settings.metadata)
        self.rewrites = True
        self.inherited: frozenset[str] = frozenset()  # fields the sources and earlier steps set (the chain sets it)
        self._function: Any = None

    @property
    def code_files(self) -> tuple[str, ...]:
        return (self.code.file,)

    def load(self) -> None:
        """Import the function now (the driver does, so that a bad module fails before any task starts)."""
        self._function = self.code.load()

    def apply(self, document: Document) -> Answer:
        if self._function is None:
            self.load()
        before = len(document.metadata)
        try:
            answer = self._function(document, **self.settings.params)
        except PipelineError:
            raise
        except Exception as exc:  # the user's code may raise anything: one line here, the traceback in the log
            raise DataError(f"step {self.name!r} ({self.code.shown}) raised {type(exc).__name__}: "
                            f"{shorten(str(exc))} on document {document.id}") from exc
        if self.metadata or len(document.metadata) != before:
            self._check_metadata(document)
        return self._answer(answer, document)

    def _answer(self, answer: Any, document: Document) -> Answer:
        if answer is None or answer is True:
            return KEEP
        if answer is False:
            return Drop(DROPPED)
        if isinstance(answer, str):
            return Rewrite(answer)
        if isinstance(answer, (Keep, Drop, Rewrite)):
            return answer
        if isinstance(answer, tuple) and [type(part) for part in answer] == [bool, str]:
            return KEEP if answer[0] else Drop(answer[1] or DROPPED)
        raise DataError(f"step {self.name!r} ({self.code.shown}) returned {type(answer).__name__} "
                        f"{shorten(repr(answer))} for document {document.id}; a step returns True/None (keep), "
                        "False or (False, 'rule') (drop), a str (the text to keep), KEEP, Drop(rule) or Rewrite(text)")

    def _check_metadata(self, document: Document) -> None:
        for name, value in document.metadata.items():
            declared = next((f for f in self.metadata if f.name == name), None)
            if declared is None:
                if name in self.inherited:
                    continue
                raise DataError(f"step {self.name!r} ({self.code.shown}) set metadata {name!r} on document "
                                f"{document.id} without declaring it; add it to the step's metadata: "
                                f"[{name}:{_type_name(value)}]")
            problem = declared.check(value)
            if problem is not None:
                raise DataError(f"step {self.name!r} ({self.code.shown}) on document {document.id}: {problem}")

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without the imported function: each worker imports the file itself (and checks its hash)."""
        return {**self.__dict__, "_function": None}


def _type_name(value: Any) -> str:
    """The metadata type that holds ``value``, for the message that asks to declare it."""
    return {bool: "bool", int: "int64", float: "float64"}.get(type(value), "string")
