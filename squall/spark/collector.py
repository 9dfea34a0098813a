"""The bolt collector of a batch run: streaming's API, with emits recorded instead of sent.

Each emit is checked and routed exactly as in streaming (the same Route and grouping
choosers, so ``emit`` returns the same kind of target task ids and fields grouping picks
the same task), then recorded once as ``(stream, source task, values, targets)``. The
Spark task turns the records into the next bolt's partitions. There are no ackers in a
batch run: anchors are accepted and ignored, and ``ack``/``fail`` are counted.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from squall.runtime.collectors import BoltCollector, Outbox, Route
from squall.tuple import Tuple


def _no_delivery(task: int, tuples: list) -> None:  # pragma: no cover
    raise AssertionError("a batch collector delivers nothing itself")


class BatchBoltCollector(BoltCollector):
    """Given to ``Bolt.prepare`` in a batch run. ``out`` holds the records emitted since the
    runner last took them; only streams in ``keep`` (read downstream or written out) are
    recorded, the others are checked and counted only."""

    def __init__(self, component: str, task: int, routes: dict[str, Route],
                 report: Callable[[BaseException | str], None], keep: frozenset[str]) -> None:
        outbox = Outbox(_no_delivery, 1 << 62, (), component, task)
        super().__init__(component, task, routes, outbox, report)
        self.keep = keep
        self.out: list[tuple[str, int, list, tuple[int, ...]]] = []

    def emit(self, values: Sequence[Any], stream: str = "default",
             anchors: Tuple | Sequence[Tuple] | None = None) -> tuple[int, ...]:
        """Emit ``values``; returns the target task ids, as in streaming."""
        route = self._routes.get(stream)
        if route is None or len(values) != route.arity or route.direct:
            route = self._route(stream, values, False)
        if type(values) is not list:
            values = list(values)
        targets = route.fixed or route.choose(values)
        route.emitted += 1
        if stream in self.keep:
            self.out.append((stream, self._task, values, targets))
        return targets

    def emit_direct(self, task: int, values: Sequence[Any], stream: str = "default",
                    anchors: Tuple | Sequence[Tuple] | None = None) -> tuple[int, ...]:
        route = self._route(stream, values, True)
        targets = self._direct_target(route, task)
        route.emitted += 1
        if stream in self.keep:
            self.out.append((stream, self._task, list(values), targets))
        return targets

    def take(self) -> list:
        """The records emitted since the last call."""
        out, self.out = self.out, []
        return out
