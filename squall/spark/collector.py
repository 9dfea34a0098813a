"""The bolt collector of a batch run: streaming's API, with emits put into boxes.

Each emit is checked and routed exactly as in streaming (the same Route and grouping
choosers, so ``emit`` returns the target task ids and fields grouping picks the same
task). The values then go into one box per target task: the input list of a task that
runs in the same Spark task (a fused bolt), or a batch bound for another stage. A sink
stream's values also go into its sink box. There are no ackers in a batch run: anchors
are accepted and ignored, and ``ack``/``fail`` are counted. It shares only the routes and
the emit checks with streaming's collectors (``RoutedCollector``), no outbox.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from squall.runtime.collectors import Route, RoutedCollector
from squall.tuple import Tuple


class BoxRoute(Route):
    """A Route with where its values go: ``boxes`` (target task -> list) and ``sink``;
    ``targets`` is the fixed answer of its choosers (``()`` when nothing subscribes),
    or None when they must be asked per tuple."""

    __slots__ = ("boxes", "sink", "targets")
    boxes: dict[int, list]
    sink: list | None
    targets: tuple[int, ...] | None

    @classmethod
    def of(cls, route: Route, chosen: bool) -> "BoxRoute":
        """``route`` with boxes; ``chosen``: whether any grouping picks its targets."""
        new = cls.__new__(cls)  # not object.__new__: Route is an extension type when compiled
        for slot in Route.__slots__:
            setattr(new, slot, getattr(route, slot))
        new.boxes = {}
        new.sink = None
        new.targets = route.fixed if route.fixed is not None else (None if chosen else ())
        return new

    def put(self, values: list) -> tuple[int, ...]:
        """Route one emit's values (already checked); returns the targets."""
        targets: Any = self.targets
        if targets is None:
            targets = self.choose(values)
        self.emitted += 1
        boxes = self.boxes
        for t in targets:
            box = boxes.get(t)
            if box is not None:  # None: a task that does not run (an excluded bolt's)
                box.append(values)
        if self.sink is not None:
            self.sink.append(values)
        return targets


class BatchBoltCollector(RoutedCollector):
    """Given to ``Bolt.prepare`` in a batch run (the ``OutputCollector`` protocol).
    ``_failed`` tells the runner whether the tuple being executed was failed."""

    _routes: dict[str, BoxRoute]

    def __init__(self, component: str, task: int, routes: dict[str, BoxRoute],
                 report: Callable[[BaseException | str], None]) -> None:
        super().__init__(component, task, routes, report)
        self._failed = False
        self.acked = 0
        self.failed = 0

    def ack(self, tup: Tuple) -> None:
        self.acked += 1

    def fail(self, tup: Tuple) -> None:
        self.failed += 1
        self._failed = True

    def emit(self, values: Sequence[Any], stream: str = "default",
             anchors: Tuple | Sequence[Tuple] | None = None) -> tuple[int, ...]:
        """Emit ``values``; returns the target task ids, as in streaming."""
        # BoxRoute.put, inlined: this runs once per tuple emitted.
        route: Any = self._routes.get(stream)
        if route is None or len(values) != route.arity or route.direct:
            route = self._route(stream, values, False)
        if type(values) is not list:
            values = list(values)
        targets = route.targets
        if targets is None:
            targets = route.choose(values)
        route.emitted += 1
        if targets:
            boxes = route.boxes
            for t in targets:
                box = boxes.get(t)
                if box is not None:
                    box.append(values)
        sink = route.sink
        if sink is not None:
            sink.append(values)
        return targets

    def emit_direct(self, task: int, values: Sequence[Any], stream: str = "default",
                    anchors: Tuple | Sequence[Tuple] | None = None) -> tuple[int, ...]:
        route: Any = self._route(stream, values, True)
        targets = self._direct_target(route, task)
        route.emitted += 1
        box = route.boxes.get(task)
        values = list(values)
        if box is not None:
            box.append(values)
        if route.sink is not None:
            route.sink.append(values)
        return targets
