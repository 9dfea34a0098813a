"""Tuples and the per-stream facts they share."""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

TICK_STREAM = "__tick"
SYSTEM_COMPONENT = "__system"


class Fields:
    """An ordered list of field names with O(1) name -> index."""

    __slots__ = ("names", "_index")

    def __init__(self, names: Sequence[str]) -> None:
        names = tuple(names)
        for name in names:
            if not isinstance(name, str) or not name:
                raise ValueError(f"field names must be non-empty strings, got {name!r}")
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate field name in {list(names)}")
        self.names = names
        self._index = {n: i for i, n in enumerate(names)}

    def index(self, name: str) -> int:
        try:
            return self._index[name]
        except KeyError:
            raise KeyError(f"no field {name!r}; fields are {list(self.names)}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._index

    def __len__(self) -> int:
        return len(self.names)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Fields) and other.names == self.names

    def __hash__(self) -> int:
        return hash(self.names)

    def __repr__(self) -> str:
        return f"Fields({list(self.names)!r})"

    def __reduce__(self) -> tuple[type[Fields], tuple[tuple[str, ...]]]:
        return (Fields, (self.names,))


class Source:
    """What every tuple from one (task, stream) shares; one object, many tuples."""

    __slots__ = ("component", "task", "stream", "fields")

    def __init__(self, component: str, task: int, stream: str, fields: Fields) -> None:
        self.component, self.task, self.stream, self.fields = component, task, stream, fields


class Tuple:
    """An immutable named list of values, with where it came from and its anchoring.

    A plain Tuple is unanchored. Anchored tuples are the two subclasses below; the runtime
    makes all three with ``object.__new__`` and slot stores, which costs half as much as a
    call to ``__init__`` (tuples are made and freed millions of times a second).
    ``ids`` is Storm's MessageId: {root id: edge id}, or None when unanchored.
    """

    __slots__ = ("values", "source")
    root = 0        # the one tuple tree it belongs to (0: none, or several: see roots)
    edge = 0        # its edge id in that tree
    roots: dict[int, int] | None = None  # anchored to several trees: {root: edge}
    ack_val = 0     # XOR of the edge ids it anchored (Storm's outAckVal)

    def __init__(self, values: list, source: Source) -> None:
        self.values = values
        self.source = source

    @property
    def ids(self) -> dict[int, int] | None:
        return {self.root: self.edge} if self.root else self.roots

    @property
    def fields(self) -> Fields:
        return self.source.fields

    @property
    def source_component(self) -> str:
        return self.source.component

    @property
    def source_task(self) -> int:
        return self.source.task

    @property
    def source_stream(self) -> str:
        return self.source.stream

    @property
    def message_id(self) -> dict[int, int]:
        """Root id -> edge id of this tuple's tuple trees (empty when unanchored)."""
        return dict(self.ids or {})

    def is_tick(self) -> bool:
        return self.source.stream == TICK_STREAM and self.source.component == SYSTEM_COMPONENT

    def __getitem__(self, key: int | str) -> Any:
        if type(key) is str:
            i = self.source.fields._index.get(key)
            if i is not None:  # the common case, without a method call
                return self.values[i]
        elif not isinstance(key, str):
            return self.values[key]
        return self.values[self.source.fields.index(key)]

    def get(self, name: str, default: Any = None) -> Any:
        fields = self.source.fields
        return self.values[fields.index(name)] if name in fields else default

    def as_dict(self) -> dict[str, Any]:
        return dict(zip(self.source.fields.names, self.values))

    def __len__(self) -> int:
        return len(self.values)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.values)

    def __repr__(self) -> str:
        s = self.source
        return f"Tuple({s.component}:{s.task} {s.stream} {self.values!r})"


class TreeTuple(Tuple):
    """A tuple in one tuple tree (the common case)."""

    __slots__ = ("root", "edge", "ack_val")


class MultiTreeTuple(Tuple):
    """A tuple anchored to several trees (a join or an aggregate of several inputs)."""

    __slots__ = ("roots", "ack_val")


_new = object.__new__


def anchored_tuple(values: list, source: Source, ids: dict[int, int] | None) -> Tuple:
    """The tuple for ``ids`` ({root: edge}, as on the wire); off the hot path."""
    if not ids:
        t = _new(Tuple)
    elif len(ids) == 1:
        t = _new(TreeTuple)
        (t.root, t.edge), = ids.items()
        t.ack_val = 0
    else:
        t = _new(MultiTreeTuple)
        t.roots = dict(ids)
        t.ack_val = 0
    t.values = values
    t.source = source
    return t
