"""YAML that remembers lines: mappings and lists know the line of each of their entries, so a
Flux error can name the file, the line and the key. Safe loading only (no tags)."""
from __future__ import annotations

from typing import Any

import yaml

from squall.errors import SquallError


class FluxError(SquallError, ValueError):
    """A Flux file that cannot be used: ``file:line: key: what``."""

    def __init__(self, file: str, line: int | None, key: str, message: str) -> None:
        self.file, self.line, self.key, self.message = file, line, key, message
        where = f"{file}:{line}" if line else file
        super().__init__(f"{where}: {key}: {message}" if key else f"{where}: {message}")


class MarkedDict(dict):
    """A mapping with ``line`` (its own, 1-based) and ``lines`` (key -> line of the key)."""

    line = 0
    lines: dict[Any, int]


class MarkedList(list):
    """A list with ``line`` and ``lines`` (index -> line of the item)."""

    line = 0
    lines: list[int]


class _Loader(yaml.SafeLoader):
    pass


def _mapping(loader: _Loader, node: yaml.MappingNode) -> MarkedDict:
    out = MarkedDict()
    out.line = node.start_mark.line + 1
    out.lines = {}
    loader.flatten_mapping(node)
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(None, None, "a mapping key must be a plain value",
                                                    key_node.start_mark) from None
        out[key] = loader.construct_object(value_node, deep=True)
        out.lines[key] = key_node.start_mark.line + 1
    return out


def _sequence(loader: _Loader, node: yaml.SequenceNode) -> MarkedList:
    out = MarkedList(loader.construct_object(child, deep=True) for child in node.value)
    out.line = node.start_mark.line + 1
    out.lines = [child.start_mark.line + 1 for child in node.value]
    return out


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)
_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _sequence)


def load(text: str, file: str) -> Any:
    """Parse ``text`` (from ``file``); a syntax error is a FluxError with its line."""
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        raise FluxError(file, line, "", f"not valid YAML: {exc.problem or exc}") from None
    except yaml.YAMLError as exc:
        raise FluxError(file, None, "", f"not valid YAML: {exc}") from None


def line_of(container: Any, key: Any) -> int | None:
    """The line of ``key`` in a MarkedDict/MarkedList, else the container's own line."""
    lines = getattr(container, "lines", None)
    try:
        if isinstance(lines, dict) and key in lines:
            return lines[key]
        if isinstance(lines, list) and isinstance(key, int) and 0 <= key < len(lines):
            return lines[key]
    except TypeError:
        pass
    return getattr(container, "line", None) or None
