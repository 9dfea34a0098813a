"""Output collectors: emit routing, anchoring and ack bookkeeping, buffered per target task.

Everything a collector sends goes through its executor's Outbox, which buffers tuples per
target task and hands whole lists to the worker (``deliver``) when a buffer fills or the
executor finishes a loop turn. Acker traffic is batched too: acks are XOR-aggregated per
root until the flush, and each flush sends one system tuple per acker task carrying flat
lists (see squall.model), so reliability costs a few dict operations per tuple.
"""
from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

from squall.grouping import Chooser
from squall.model import ACK_ACK, ACK_FAIL, ACK_INIT, ACKER_STREAMS
from squall.tuple import Source, Tuple

_rand = random.getrandbits
Deliver = Callable[[int, list], None]


class EmitError(ValueError):
    """An emit that does not match the declared streams."""


class Outbox:
    """Per-executor output buffers by target task, and pending acker traffic."""

    __slots__ = ("bufs", "acks", "inits", "fails", "batch", "deliver", "ackers", "sources")

    def __init__(self, deliver: Deliver, batch: int, ackers: Sequence[int], component: str, task: int) -> None:
        self.bufs: dict[int, list] = {}
        self.acks: dict[int, int] = {}           # root -> XOR of acked edge ids
        self.inits: dict[tuple[int, int], dict] = {}  # (acker task, spout task) -> {root: ack_val}
        self.fails: dict[int, list] = {}         # acker task -> [root, ...]
        self.batch = batch
        self.deliver = deliver
        self.ackers = tuple(ackers)
        self.sources = {s: Source(component, task, s, f) for s, f in ACKER_STREAMS.items()}

    def full(self, task: int) -> None:
        self.deliver(task, self.bufs.pop(task))

    def acker_of(self, root: int) -> int:
        return self.ackers[root % len(self.ackers)]

    def flush(self) -> None:
        deliver = self.deliver
        if self.bufs:
            items = list(self.bufs.items())
            self.bufs.clear()
            for task, tuples in items:
                deliver(task, tuples)
        if self.inits:
            src = self.sources[ACK_INIT]
            for (acker, spout), vals in self.inits.items():
                deliver(acker, [Tuple([vals, spout], src)])
            self.inits = {}
        if self.acks:
            src = self.sources[ACK_ACK]
            acks, self.acks = self.acks, {}
            if len(self.ackers) == 1:
                deliver(self.ackers[0], [Tuple([acks], src)])
            else:
                per: dict[int, dict] = {}
                ackers, n = self.ackers, len(self.ackers)
                for root, val in acks.items():
                    a = ackers[root % n]
                    d = per.get(a)
                    if d is None:
                        per[a] = {root: val}
                    else:
                        d[root] = val
                for task, d in per.items():
                    deliver(task, [Tuple([d], src)])
        if self.fails:
            src = self.sources[ACK_FAIL]
            for task, flat in self.fails.items():
                deliver(task, [Tuple([flat], src)])
            self.fails = {}


class Route:
    """One output stream of one task: its Source, arity and target chooser."""

    __slots__ = ("source", "arity", "choose", "direct", "direct_tasks", "emitted", "fixed")

    def __init__(self, source: Source, choosers: list[Chooser], direct: bool, direct_tasks: frozenset[int]) -> None:
        self.source = source
        self.arity = len(source.fields)
        self.direct = direct
        self.direct_tasks = direct_tasks
        self.emitted = 0
        # When the targets never vary (global, a single target task), skip the chooser call.
        self.fixed = getattr(choosers[0], "fixed", None) if len(choosers) == 1 else None
        if len(choosers) == 1:
            self.choose = choosers[0]
        elif not choosers:
            self.choose = lambda values: ()
        else:
            def choose_all(values: list) -> tuple[int, ...]:
                out: tuple[int, ...] = ()
                for c in choosers:
                    out += tuple(c(values))
                return out
            self.choose = choose_all


class _Collector:
    def __init__(self, component: str, task: int, routes: dict[str, Route], outbox: Outbox,
                 report: Callable[[BaseException | str], None]) -> None:
        self._component, self._task = component, task
        self._routes, self._outbox = routes, outbox
        self._bufs, self._batch = outbox.bufs, outbox.batch
        self._acking = bool(outbox.ackers)
        self._report = report

    def _route(self, stream: str, values: Any, direct: bool) -> Route:
        """The slow path of emit: find the route, or raise an error naming the problem."""
        route = self._routes.get(stream)
        if route is None:
            raise EmitError(f"component {self._component!r} emitted on undeclared stream {stream!r} "
                            f"(declared: {sorted(self._routes)})")
        try:
            n = len(values)
        except TypeError:
            raise EmitError(f"component {self._component!r} emitted {type(values).__name__} on stream "
                            f"{stream!r}; values must be a list") from None
        if n != route.arity:
            raise EmitError(f"component {self._component!r} emitted {n} values on stream "
                            f"{stream!r}, which declares {route.arity} fields {list(route.source.fields)}")
        if route.direct != direct:
            how = "emit_direct" if route.direct else "emit"
            raise EmitError(f"component {self._component!r}: stream {stream!r} is "
                            f"{'' if route.direct else 'not '}direct; use {how}")
        return route

    def _direct_target(self, route: Route, task: int) -> tuple[int]:
        if task not in route.direct_tasks:
            raise EmitError(f"component {self._component!r}: emit_direct on {route.source.stream!r} "
                            f"to task {task}, which does not subscribe to it with a direct grouping")
        return (task,)

    def _put(self, task: int, tup: Tuple) -> None:
        b = self._bufs.get(task)
        if b is None:
            self._bufs[task] = [tup]
        else:
            b.append(tup)
            if len(b) >= self._batch:
                self._outbox.full(task)

    def report_error(self, error: BaseException | str) -> None:
        """Record an error against this component (shown by ``squall status``)."""
        self._report(error)


class SpoutCollector(_Collector):
    """Given to ``Spout.open``. A message id makes the tuple reliable (when ackers run)."""

    def __init__(self, component: str, task: int, routes: dict[str, Route], outbox: Outbox,
                 report: Callable, pending: Any) -> None:
        super().__init__(component, task, routes, outbox, report)
        self._pending = pending._pending  # root -> (msg_id, start); see squall.acker.PendingTuples
        self.now = 0.0                    # set by the executor once per loop turn
        self.immediate_acks: list[Any] = []

    def emit(self, values: Sequence[Any], stream: str = "default", msg_id: Any = None) -> tuple[int, ...]:
        """Emit ``values``; returns the ids of the tasks it was sent to."""
        route = self._routes.get(stream)
        if route is None or len(values) != route.arity or route.direct:
            route = self._route(stream, values, False)
        if type(values) is not list:
            values = list(values)
        targets = route.fixed or route.choose(values)
        route.emitted += 1
        if msg_id is None:
            tup = Tuple(values, route.source)
            bufs = self._bufs
            for t in targets:
                b = bufs.get(t)
                if b is None:
                    bufs[t] = [tup]
                else:
                    b.append(tup)
                    if len(b) >= self._batch:
                        self._outbox.full(t)
        else:
            self._reliable(route, values, targets, msg_id)
        return targets

    def emit_direct(self, task: int, values: Sequence[Any], stream: str = "default",
                    msg_id: Any = None) -> tuple[int, ...]:
        route = self._route(stream, values, True)
        targets = self._direct_target(route, task)
        route.emitted += 1
        values = list(values)
        if msg_id is None:
            self._put(task, Tuple(values, route.source))
        else:
            self._reliable(route, values, targets, msg_id)
        return targets

    def _reliable(self, route: Route, values: list, targets: tuple[int, ...], msg_id: Any) -> None:
        if not self._acking or not targets:
            # Storm acks at once when nothing can track the tree: no ackers, or no targets.
            tup = Tuple(values, route.source)
            for t in targets:
                self._put(t, tup)
            self.immediate_acks.append(msg_id)
            return
        root = _rand(64) or 1
        ack_val = 0
        src = route.source
        bufs = self._bufs
        for t in targets:
            edge = _rand(64)
            ack_val ^= edge
            tup = Tuple(values, src, {root: edge})
            b = bufs.get(t)
            if b is None:
                bufs[t] = [tup]
            else:
                b.append(tup)
                if len(b) >= self._batch:
                    self._outbox.full(t)
        self._pending[root] = (msg_id, self.now)
        outbox = self._outbox
        key = (outbox.ackers[root % len(outbox.ackers)], self._task)
        vals = outbox.inits.get(key)
        if vals is None:
            outbox.inits[key] = {root: ack_val}
        else:
            vals[root] = ack_val


class BoltCollector(_Collector):
    """Given to ``Bolt.prepare``. Anchor emits to inputs; ack or fail every input."""

    def __init__(self, component: str, task: int, routes: dict[str, Route], outbox: Outbox,
                 report: Callable) -> None:
        super().__init__(component, task, routes, outbox, report)
        self._auto: Tuple | None = None   # BasicBolt: the input being executed
        self._failed = False
        self.acked = 0
        self.failed = 0

    def emit(self, values: Sequence[Any], stream: str = "default",
             anchors: Tuple | Sequence[Tuple] | None = None) -> tuple[int, ...]:
        """Emit ``values`` anchored to ``anchors``; returns the target task ids."""
        route = self._routes.get(stream)
        if route is None or len(values) != route.arity or route.direct:
            route = self._route(stream, values, False)
        if type(values) is not list:
            values = list(values)
        targets = route.fixed or route.choose(values)
        route.emitted += 1
        if self._acking:
            if anchors is None:
                anchors = self._auto
            if anchors is not None:
                if type(anchors) is not Tuple or len(targets) != 1:
                    self._anchored(route, values, targets, anchors)
                    return targets
                # The common case, inline: one anchor, one target.
                aids = anchors.ids
                if aids:
                    edge = _rand(64)
                    anchors.ack_val ^= edge
                    tup = Tuple(values, route.source, dict.fromkeys(aids, edge))
                else:
                    tup = Tuple(values, route.source)
                t = targets[0]
                b = self._bufs.get(t)
                if b is None:
                    self._bufs[t] = [tup]
                else:
                    b.append(tup)
                    if len(b) >= self._batch:
                        self._outbox.full(t)
                return targets
        tup = Tuple(values, route.source)
        bufs = self._bufs
        for t in targets:
            b = bufs.get(t)
            if b is None:
                bufs[t] = [tup]
            else:
                b.append(tup)
                if len(b) >= self._batch:
                    self._outbox.full(t)
        return targets

    def emit_direct(self, task: int, values: Sequence[Any], stream: str = "default",
                    anchors: Tuple | Sequence[Tuple] | None = None) -> tuple[int, ...]:
        route = self._route(stream, values, True)
        targets = self._direct_target(route, task)
        route.emitted += 1
        if anchors is None:
            anchors = self._auto
        if anchors is not None and self._acking:
            self._anchored(route, list(values), targets, anchors)
        else:
            self._put(task, Tuple(list(values), route.source))
        return targets

    def _anchored(self, route: Route, values: list, targets: tuple[int, ...], anchors: Any) -> None:
        if type(anchors) is Tuple:
            single = anchors
        else:
            single = anchors[0] if len(anchors) == 1 else None
        src = route.source
        bufs = self._bufs
        for t in targets:
            if single is not None:
                # The common case: one anchor; every root of it gets the same new edge.
                aids = single.ids
                if aids:
                    edge = _rand(64)
                    single.ack_val ^= edge
                    ids = dict.fromkeys(aids, edge)
                else:
                    ids = None
            else:
                ids = {}
                for a in anchors:
                    aids = a.ids
                    if aids:
                        edge = _rand(64)
                        a.ack_val ^= edge
                        for root in aids:
                            ids[root] = ids.get(root, 0) ^ edge
                ids = ids or None
            tup = Tuple(values, src, ids)
            b = bufs.get(t)
            if b is None:
                bufs[t] = [tup]
            else:
                b.append(tup)
                if len(b) >= self._batch:
                    self._outbox.full(t)

    def ack(self, tup: Tuple) -> None:
        """This input is done: its edge (and the edges it anchored) leave the ledger."""
        self.acked += 1
        ids = tup.ids
        if ids and self._acking:
            acks = self._outbox.acks
            extra = tup.ack_val
            for root, edge in ids.items():
                acks[root] = acks.get(root, 0) ^ edge ^ extra

    def fail(self, tup: Tuple) -> None:
        """Fail the trees this input belongs to: their spouts' ``fail`` runs soon."""
        self.failed += 1
        self._failed = True
        ids = tup.ids
        if ids and self._acking:
            fails = self._outbox.fails
            for root in ids:
                fails.setdefault(self._outbox.acker_of(root), []).append(root)


def make_routes(component: str, task: int, streams: dict[str, Any], subscribers: Callable,
                tasks_of: Callable[[str], list[int]], local_tasks: frozenset[int], context: Any) -> dict[str, Route]:
    """Build the Route of every declared stream of one task."""
    from squall.grouping import DIRECT, make_chooser

    routes = {}
    for stream, decl in streams.items():
        source = Source(component, task, stream, decl.fields)
        choosers, direct_tasks = [], set()
        for bolt, grouping in subscribers(component, stream):
            if grouping.kind == DIRECT:
                direct_tasks.update(tasks_of(bolt))
                continue
            choosers.append(make_chooser(grouping, decl.fields, tasks_of(bolt), local_tasks, task,
                                         context, stream))
        routes[stream] = Route(source, choosers, decl.direct, frozenset(direct_tasks))
    return routes
