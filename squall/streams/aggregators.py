"""Aggregations as objects: what ``aggregate`` and ``aggregate_by_key`` take (Storm's
``CombinerAggregator``), and the ones squall's own steps use."""
from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

T_contra = TypeVar("T_contra", contravariant=True)
A = TypeVar("A")
R_co = TypeVar("R_co", covariant=True)
R = TypeVar("R")
T = TypeVar("T")

_IMMUTABLE = (int, float, complex, str, bytes, bool, type(None), tuple, frozenset)


class Aggregator(Protocol[T_contra, A, R_co]):
    """``init()`` starts an accumulator, ``apply(acc, value)`` adds a value to it and
    returns it, ``result(acc)`` is what the step emits."""

    def init(self) -> A: ...

    def apply(self, acc: A, value: T_contra) -> A: ...

    def result(self, acc: A) -> R_co: ...


class Fold(Generic[T, R]):
    """An aggregation from a starting value and ``accumulate(acc, value) -> acc``; each key
    and window starts from a copy of ``initial`` (so a list or dict may be changed in place)."""

    def __init__(self, initial: R, accumulate: Callable[[R, T], R]) -> None:
        self.initial, self.accumulate = initial, accumulate
        self._plain = isinstance(initial, _IMMUTABLE)

    def init(self) -> R:
        return self.initial if self._plain else copy.deepcopy(self.initial)

    def apply(self, acc: R, value: T) -> R:
        return self.accumulate(acc, value)

    def result(self, acc: R) -> R:
        return acc


class Counting:
    """How many values."""

    def init(self) -> int:
        return 0

    def apply(self, acc: int, value: Any) -> int:
        return acc + 1

    def result(self, acc: int) -> int:
        return acc


class Collecting:
    """The values, in arrival order (``group_by_key``)."""

    def init(self) -> list:
        return []

    def apply(self, acc: list, value: Any) -> list:
        acc.append(value)
        return acc

    def result(self, acc: list) -> list:
        return acc


def is_aggregator(obj: Any) -> bool:
    return all(callable(getattr(obj, name, None)) for name in ("init", "apply", "result"))


__all__ = ["Aggregator", "Collecting", "Counting", "Fold", "is_aggregator"]
