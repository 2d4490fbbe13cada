"""Safe YAML reading for config files: bounded size, nesting and alias expansion.

A config is read before anything checks it, so the reader itself refuses what could hang or exhaust
the process (a huge file, deep nesting, an alias bomb, an integer too long to convert), each in one
line naming the file and line, and so does a top-level section given twice, which YAML would let replace
the first silently. Floats are read as YAML 1.2 does (``1e-3`` is a number).
"""

from __future__ import annotations

import os
import re
from typing import Any

import yaml

from pipeline.engine import storage
from pipeline.errors import ConfigError, FileTooLargeError, StorageError

MAX_CONFIG_BYTES = 1 << 20
"""A config is a few kilobytes; pure-Python YAML takes a second or more per megabyte, so a bigger file is refused
unread (so is a FIFO or a device, which could block or never end)."""
MAX_NESTING = 32
"""Levels of YAML nesting (after expanding aliases); the schema needs four."""
MAX_NODES = 100_000
"""YAML values after expanding aliases, so that an alias bomb is refused before it is built."""


def read_yaml(path: str | os.PathLike[str]) -> Any:
    """The YAML document of the file at ``path``, within the bounds above; any failure is a ConfigError."""
    name = os.fspath(path)
    try:
        text = storage.read_bounded(path, MAX_CONFIG_BYTES, what="config file").decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file {name} not found; pass --config PATH") from None
    except FileTooLargeError as exc:
        raise ConfigError(f"{exc}; a config holds settings, not data: list data files in data.sources") from None
    except StorageError as exc:  # a FIFO, a device: refused unread
        raise ConfigError(str(exc)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {name} cannot be read as UTF-8 text ({exc})") from None
    return _parse_yaml(text, name)


def _parse_yaml(text: str, origin: str) -> Any:
    """``text`` parsed by :class:`_ConfigLoader`; a YAML error or a refused document is a ConfigError naming
    ``origin`` and the line (PyYAML's own text names the stream ``"<unicode string>"``)."""
    try:
        return yaml.load(text, Loader=_ConfigLoader)
    except _Refused as exc:
        raise ConfigError(f"{origin}: line {_line_of(exc.problem_mark, text)}: {exc.problem}") from None
    except yaml.MarkedYAMLError as exc:
        context = f" ({exc.context} at line {_line_of(exc.context_mark, text)})" if exc.context else ""
        raise ConfigError(f"{origin}: line {_line_of(exc.problem_mark, text)}: not valid YAML: "
                          f"{exc.problem}{context}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{origin}: not valid YAML: {' '.join(str(exc).split())}") from None


def _line_of(mark: yaml.Mark | None, text: str) -> int:
    """The 1-based line of ``mark``; the end of a text that ends with a newline is on its last line, not after."""
    last = max(1, len(text.splitlines()))
    return last if mark is None else min(mark.line + 1, last)


class _Refused(yaml.MarkedYAMLError):
    """A well-formed YAML document that exceeds a bound of :class:`_ConfigLoader`."""


class _ConfigLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` with bounds, reading floats as YAML 1.2 does.

    PyYAML follows YAML 1.1, where a float needs a dot and a signed exponent, so ``1e-3``
    is a string; a user typing a learning rate means a number (as in YAML 1.2 and JSON).

    Bounds: the composer recurses per level, so deeper nesting than ``MAX_NESTING`` is
    refused as it is read, not left to hit Python's recursion limit. Aliases share nodes,
    so a few lines can describe billions of values ("billion laughs"); before anything is
    built the node graph is measured as if expanded, and more than ``MAX_NODES`` values,
    an expanded depth beyond ``MAX_NESTING`` or an alias inside its own anchor is refused.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self._depth >= MAX_NESTING:
            raise _Refused(problem=f"nested more than {MAX_NESTING} levels deep",
                           problem_mark=self.peek_event().start_mark)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_document(self, node: Any) -> Any:
        _check_expanded_size(node)
        _refuse_repeated_sections(node)
        return super().construct_document(node)

    def construct_yaml_int(self, node: Any) -> int:
        """An integer, refusing one too long for Python to convert (over 4,300 digits)."""
        try:
            return super().construct_yaml_int(node)
        except ValueError:
            raise _Refused(problem=f"the integer {node.value[:20]}... has too many digits",
                           problem_mark=node.start_mark) from None


_ConfigLoader.add_constructor("tag:yaml.org,2002:int", _ConfigLoader.construct_yaml_int)
_ConfigLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def _refuse_repeated_sections(root: yaml.Node) -> None:
    """A top-level key given twice (two ``prepare:`` sections): YAML keeps the last one whole, so every setting
    of the first would be dropped without a word."""
    if not isinstance(root, yaml.MappingNode):
        return
    first: dict[str, yaml.Node] = {}
    for key, _ in root.value:
        if not isinstance(key, yaml.ScalarNode) or key.tag == "tag:yaml.org,2002:merge":
            continue
        if key.value in first:
            raise _Refused(problem=f"the section {key.value!r} is given twice (first on line "
                           f"{first[key.value].start_mark.line + 1}), and the second would replace the first "
                           "whole; merge them into one", problem_mark=key.start_mark)
        first[key.value] = key


def _check_expanded_size(root: yaml.Node) -> None:
    """Refuse a node graph whose aliases expand beyond ``MAX_NODES`` values or ``MAX_NESTING`` levels.

    Sizes and depths are memoised per node, so the walk costs one visit per distinct node.
    """
    measured: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded values, levels)
    open_nodes: set[int] = set()

    def too_big(node: yaml.Node) -> _Refused:
        return _Refused(problem=f"aliases expand to more than {MAX_NODES:,} values or {MAX_NESTING} levels "
                        "of nesting", problem_mark=node.start_mark)

    def measure(node: yaml.Node, depth: int) -> tuple[int, int]:
        if id(node) in open_nodes:
            raise _Refused(problem="an alias refers to a node that contains it", problem_mark=node.start_mark)
        if id(node) not in measured:
            if depth > MAX_NESTING:
                raise too_big(node)
            open_nodes.add(id(node))
            children = [measure(child, depth + 1) for child in _child_nodes(node)]
            open_nodes.discard(id(node))
            measured[id(node)] = (1 + sum(size for size, _ in children),
                                  1 + max((levels for _, levels in children), default=0))
        size, levels = measured[id(node)]
        if size > MAX_NODES or depth + levels - 1 > MAX_NESTING:
            raise too_big(node)
        return size, levels

    measure(root, 1)


def parse_value(text: str, key_path: str) -> Any:
    """The value of ``--set key_path=text``: a YAML scalar or flow value, or ``text`` itself when it is
    not valid YAML (so ``--set data.sources.0.separator=a: b`` needs no quoting)."""
    try:
        return yaml.load(text, Loader=_ConfigLoader) if text.strip() else None
    except _Refused as exc:
        raise ConfigError(f"--set {key_path}: {exc.problem}") from None
    except yaml.YAMLError:
        return text


def _child_nodes(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


