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

    def __reduce__(self):
        return (Fields, (self.names,))


class Source:
    """What every tuple from one (task, stream) shares; one object, many tuples."""

    __slots__ = ("component", "task", "stream", "fields")

    def __init__(self, component: str, task: int, stream: str, fields: Fields) -> None:
        self.component, self.task, self.stream, self.fields = component, task, stream, fields


class Tuple:
    """An immutable named list of values, with where it came from and its anchoring ids.

    ``ids`` is Storm's MessageId: {root id: edge id} for an anchored tuple, else None.
    """

    __slots__ = ("values", "source", "ids", "ack_val")

    def __init__(self, values: list, source: Source, ids: dict[int, int] | None = None) -> None:
        self.values = values
        self.source = source
        self.ids = ids
        self.ack_val = 0  # XOR of edge ids this tuple anchored (Storm's outAckVal)

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
        return dict(self.ids) if self.ids else {}

    def is_tick(self) -> bool:
        return self.source.stream == TICK_STREAM and self.source.component == SYSTEM_COMPONENT

    def __getitem__(self, key: int | str) -> Any:
        if isinstance(key, str):
            return self.values[self.source.fields.index(key)]
        return self.values[key]

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
