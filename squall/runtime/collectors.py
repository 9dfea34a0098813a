"""Output collectors: emit routing, anchoring and ack bookkeeping, buffered per target task.

Everything a collector sends goes through its executor's Outbox, which buffers tuples per
target task and hands whole lists to the worker (``deliver``) when a buffer fills or the
executor finishes a loop turn. Acker traffic is batched too: acks are XOR-aggregated per
root, in a C table per acker task, until the flush, and each flush sends one system tuple
per acker task carrying them as packed (root, XOR) pairs (see squall.model), so reliability
costs a few C operations per tuple and no int object.
"""
from __future__ import annotations

import random
from collections.abc import Callable, Collection, Sequence
from typing import Any

from squall.errors import SquallError
from squall.grouping import Chooser, make_chooser
from squall.model import ACK_ACK, ACK_FAIL, ACKER_STREAMS
from squall.runtime.acker import AckerLedger, draw_root, root_layout
from squall.runtime.root_table import FULL, RootTable
from squall.tuple import Source, TreeTuple, Tuple, anchored_tuple

try:
    import cython  # Cython's compile-time module; in plain Python its shadow module, if installed
except ImportError:
    from squall import compiled as cython  # cython.compiled is False



def _rand(bits: int) -> int:
    """``bits`` random bits: the top bits of a squall.runtime.acker.next_id, inline in the
    compiled build (collectors.pxd); plain Python binds the name to random.getrandbits
    itself, below, cheaper there and no call of ours."""
    return next_id() >> (64 - bits)


if not cython.compiled:  # a constant in the compiled build, which leaves this out
    from squall.runtime.acker import next_id  # the compiled build cimports these (collectors.pxd)
    from squall.tuple import _new

    _rand = random.getrandbits  # type: ignore[assignment]  # noqa: F811
Deliver = Callable[[int, list], None]
WAIT_NOTHING = 3600.0  # Outbox.flush_due: nothing buffered, so no flush is due
# The trees one outbox folds acks for per acker between flushes: past it, that acker's
# share goes at once (a message sent early, nothing lost) and folding starts again.
FOLD_LIMIT = 1 << 16


class EmitError(SquallError, ValueError):
    """An emit that does not match the declared streams."""


class Outbox:
    """Per-executor output buffers by target task, and pending acker traffic.

    A target's buffer is one list for the executor's lifetime (routes with a fixed target
    keep a reference to it); delivering hands on a copy and empties it.

    ``tables`` fold the spout's inits and the bolts' acks by root (XOR), one RootTable per
    acker (by its place in ``ackers``, made at its first fold), until the flush sends each
    acker its share as packed pairs. When the topology's only acker runs on this executor's
    thread, the outbox is ``fuse``d to its ledger: inits and acks go into the ledger's
    table of C integers at once (``fold``) and no ack message is sent at all. Other
    ackers on this thread are ``near``: a flush hands them their share by a call to their
    ledger instead of a message. The first of them is the ``home`` acker: a tree it tracks
    (``root % len(ackers) == home_slot``; a spout here draws its roots so) has its inits and
    acks XORed into its ledger at once, as when fused, never through ``tables``
    (``home_of`` says which ledger, if any, takes a tree's traffic at once).
    """

    __slots__ = ("bufs", "tables", "fails", "batch", "deliver", "ackers", "sources", "ledger", "near", "transferred",
                 "interval", "held_since", "queued", "home", "home_slot")

    def __init__(self, deliver: Deliver, batch: int, ackers: Sequence[int], component: str, task: int,
                 interval: float = 0.0, queued: Callable[[int], int] | None = None) -> None:
        self.bufs: dict[int, list] = {}
        self.tables: list[RootTable | None] = [None] * len(ackers)  # per acker: root -> XOR of edge ids
        self.fails: dict[int, list] = {}         # acker task -> [root, ...]
        self.batch = batch
        self.deliver = deliver
        self.ackers = tuple(ackers)
        self.sources = {s: Source(component, task, s, f) for s, f in ACKER_STREAMS.items()}
        self.ledger: AckerLedger | None = None
        self.near: dict[int, AckerLedger] = {}  # acker task -> its ledger, for ackers on this thread
        self.home: AckerLedger | None = None   # the first of them (attach)
        self.home_slot = -1                     # its place in ``ackers``: roots r with r % n == home_slot
        self.transferred = 0  # tuples handed on to target tasks (Storm's "transferred")
        self.interval = interval  # the longest a partial batch may wait (flush_due), real seconds
        self.held_since = -1.0    # when flush_due first left something buffered; -1: nothing
        self.queued = queued      # task -> tuples queued ahead at its consumer (flush_due)

    def fuse(self, ledger: AckerLedger) -> None:
        self.ledger = ledger

    def attach(self, task: int, ledger: AckerLedger) -> None:
        """Acker ``task`` runs on this executor's thread: its share goes straight to ``ledger``
        (the first such acker's share at each fold, the others' at the flush)."""
        self.near[task] = ledger
        if self.home is None and task in self.ackers:
            self.home, self.home_slot = ledger, self.ackers.index(task)

    def buffer(self, task: int) -> list:
        b = self.bufs.get(task)
        if b is None:
            b = self.bufs[task] = []
        return b

    def full(self, task: int) -> None:
        b = self.bufs[task]
        self.transferred += len(b)
        self.deliver(task, b[:])
        b.clear()

    def acker_of(self, root: int) -> int:
        return self.ackers[root % len(self.ackers)]

    def home_of(self, root: int) -> AckerLedger | None:
        """The ledger on this thread that tracks ``root``'s tree, which takes its inits and
        acks at once: the fused one, or the home acker's when the tree is its; else None
        (its traffic is folded for the flush)."""
        if self.ledger is not None:
            return self.ledger
        if self.home_slot >= 0 and root % len(self.ackers) == self.home_slot:
            return self.home
        return None

    def fold(self, root: int, x: int) -> None:
        """XOR ``x`` into the acker traffic of ``root``: into its ledger when that is on this
        thread (``home_of``), else into its acker's table for the next flush (a fold that
        reaches zero leaves the table: the acker would skip it anyway)."""
        ledger = self.home_of(root)
        if ledger is not None:
            ledger.xor(root, x)
        else:
            self.fold_for(root % len(self.ackers), root, x)

    def fold_for(self, slot: int, root: int, x: int) -> None:
        """``fold`` into the table of the acker at ``slot`` of ``ackers`` (``root``'s)."""
        table = self.tables[slot]
        if table is None:
            table = self.tables[slot] = RootTable(FOLD_LIMIT)
        if table.fold(root, x) == FULL:
            self.send_acks(slot)  # bounded: this acker's share goes now, the table starts again
            table.fold(root, x)

    def send_acks(self, slot: int) -> None:
        """Hand the acker at ``slot`` what its table folded: a message, or a call to its
        ledger when it runs on this thread."""
        table = self.tables[slot]
        if table is None or not len(table):
            return
        pairs = table.take_pairs()
        task = self.ackers[slot]
        ledger = self.near.get(task)
        if ledger is None:
            self.deliver(task, [Tuple([pairs], self.sources[ACK_ACK])])
        else:
            ledger.apply_pairs(pairs)

    def folding(self) -> bool:
        """Is acker traffic folded and waiting for the flush?"""
        for table in self.tables:
            if table is not None and len(table):
                return True
        return False

    def fail(self, root: int) -> None:
        if self.ledger is not None:
            self.ledger.fail(root)
            return
        task = self.acker_of(root)
        near = self.near.get(task)
        if near is not None:
            near.fail(root)
        else:
            self.fails.setdefault(task, []).append(root)

    def flush_due(self, now: float) -> float:
        """End of a spout's turn: send what is buffered at once when a consumer of it would
        otherwise idle (nothing is queued ahead of it: its executor's queue, or the worker's
        transfer queue for a task elsewhere, is empty), so a tuple never waits for a timer
        while the next stage has nothing to do. While a consumer has work queued, what is
        buffered grows into a batch instead (adaptive batching): it goes at the end of the
        first turn that finds the consumers idle, when a buffer fills, or once it has waited
        ``interval`` seconds (``now``: real time), the backstop. Every turn when ``interval``
        is 0. Returns how long until the backstop is due (``WAIT_NOTHING`` when nothing waits)."""
        interval = self.interval
        if interval <= 0.0 or self.consumer_idle():
            self.held_since = -1.0
            self.flush()
            return WAIT_NOTHING
        since = self.held_since
        if since < 0.0:
            if not self.holding():
                return WAIT_NOTHING
            self.held_since = now
            return interval
        if now - since >= interval:
            self.held_since = -1.0
            self.flush()
            return WAIT_NOTHING
        return since + interval - now

    def consumer_idle(self) -> bool:
        """Would a consumer of what is buffered idle without it (nothing queued for it)?
        False when nothing is buffered, or no ``queued`` was given (consumers unknown)."""
        queued = self.queued
        if queued is None:
            return False
        for task, b in self.bufs.items():
            if b and not queued(task):
                return True
        if self.fails or self.folding():
            for task in self.ackers:
                if not queued(task):
                    return True
        return False

    def holding(self) -> bool:
        """Is anything buffered: tuples, or acker traffic still to send?"""
        for b in self.bufs.values():
            if b:
                return True
        return bool(self.fails) or self.folding()

    def flush(self) -> None:
        deliver = self.deliver
        for task, b in self.bufs.items():
            if b:
                self.transferred += len(b)
                deliver(task, b[:])
                b.clear()
        for slot in range(len(self.tables)):
            self.send_acks(slot)
        if self.fails:
            src = self.sources[ACK_FAIL]
            for task, flat in self.fails.items():
                deliver(task, [Tuple([flat], src)])
            self.fails = {}


class Route:
    """One output stream of one task: its Source, arity and target chooser."""

    __slots__ = ("source", "arity", "choose", "direct", "direct_tasks", "emitted", "fixed", "target", "buf")

    def __init__(self, source: Source, choosers: list[Chooser], direct: bool, direct_tasks: frozenset[int]) -> None:
        self.source = source
        self.arity = len(source.fields)
        self.direct = direct
        self.direct_tasks = direct_tasks
        self.emitted = 0
        # When the targets never vary (global, a single target task), skip the chooser call.
        # tuple[int, ...] | None; typed Any: where ``buf`` is set it is one target, which the
        # emitters return as is (a check per tuple to show mypy would cost the hot path).
        self.fixed: Any = getattr(choosers[0], "fixed", None) if len(choosers) == 1 else None
        # One fixed target: emitters append straight to its buffer (set by the collector).
        self.target: int = self.fixed[0] if self.fixed and len(self.fixed) == 1 else 0
        self.buf: list | None = None
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


class RoutedCollector:
    """What every collector shares, wherever its tuples go: one task's routes, the checks
    of an emit against them, and error reports (a batch run's collector builds on it too,
    squall.spark.collector)."""

    def __init__(self, component: str, task: int, routes: dict[str, Any],
                 report: Callable[[BaseException | str], None]) -> None:
        self._component, self._task = component, task
        self._routes = routes
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

    def fixed_targets(self, stream: str, values: Any) -> tuple[int, ...] | None:
        """The task ids an ``emit`` of ``values`` on ``stream`` goes to, when they are known
        before it is made (a stream whose targets never vary: one target task, global or all
        groupings); None otherwise, or when that emit would be refused. A shell component
        answers its child's task-id request with them before it emits (squall.multilang)."""
        route = self._routes.get(stream)
        if route is None or route.direct or type(values) is not list or len(values) != route.arity:
            return None
        return route.fixed

    def _direct_target(self, route: Route, task: int) -> tuple[int]:
        if task not in route.direct_tasks:
            raise EmitError(f"component {self._component!r}: emit_direct on {route.source.stream!r} "
                            f"to task {task}, which does not subscribe to it with a direct grouping")
        return (task,)

    def report_error(self, error: BaseException | str) -> None:
        """Record an error against this component (shown by ``squall status``)."""
        self._report(error)


class _Collector(RoutedCollector):
    """A streaming collector: tuples go into its executor's Outbox."""

    def __init__(self, component: str, task: int, routes: dict[str, Route], outbox: Outbox,
                 report: Callable[[BaseException | str], None]) -> None:
        super().__init__(component, task, routes, report)
        self._outbox = outbox
        self._bufs, self._batch = outbox.bufs, outbox.batch
        self._acking = bool(outbox.ackers)
        for route in routes.values():
            if route.target:
                route.buf = outbox.buffer(route.target)

    def _put(self, task: int, tup: Tuple) -> None:
        b = self._bufs.get(task)
        if b is None:
            b = self._outbox.buffer(task)
        b.append(tup)
        if len(b) >= self._batch:
            self._outbox.full(task)


class SpoutCollector(_Collector):
    """Given to ``Spout.open``. A message id makes the tuple reliable (when ackers run)."""

    def __init__(self, component: str, task: int, routes: dict[str, Route], outbox: Outbox,
                 report: Callable, pending: Any, near: Collection[int] = ()) -> None:
        super().__init__(component, task, routes, outbox, report)
        self._pending = pending  # root -> (msg_id, start): squall.runtime.pending.PendingTuples
        # Root ids are base + random(bits) * stride: they name this task in their high bits
        # and, when an acker runs in this worker (``near``), pick it (squall.runtime.acker.root_layout).
        self._layout = root_layout(task, outbox.ackers, near)
        self._root_base, self._root_stride, self._root_bits = self._layout
        # The ledger this task's trees go to when their acker runs on this thread (fused, or
        # the outbox's home acker, which root_layout picked): inits XOR into it at once. Every
        # root is base + k * stride, so with a stride of the ackers' count all share base's acker.
        n = len(outbox.ackers)
        self._home = outbox.ledger if not n or self._root_stride % n else self._outbox.home_of(self._root_base)
        self.now = 0.0                    # set by the executor once per loop turn
        self.immediate_acks: list[Any] = []
        self.immediate_fails: list[Any] = []  # tuples refused because the pending map was full

    def emit(self, values: Sequence[Any], stream: str = "default", msg_id: Any = None) -> tuple[int, ...]:
        """Emit ``values``; returns the ids of the tasks it was sent to."""
        route = self._routes.get(stream)
        if route is None or len(values) != route.arity or route.direct:
            route = self._route(stream, values, False)
        if type(values) is not list:
            values = list(values)
        route.emitted += 1
        buf = route.buf
        if buf is None:
            return self._send(route, values, route.fixed or route.choose(values), msg_id)
        # One fixed target (the common case): inline.
        if msg_id is None or not self._acking:
            tup = _new(Tuple)
            tup.values = values
            tup.source = route.source
            buf.append(tup)
            if len(buf) >= self._batch:
                self._outbox.full(route.target)
            if msg_id is not None:  # Storm acks at once when no acker can track the tree
                self.immediate_acks.append(msg_id)
            return route.fixed
        # The common reliable case, inline: one target. The root id, random and used once,
        # doubles as the edge id of the tree's first edge.
        # One operation both checks that the root is unused and records the tuple.
        # Compiled, the root is a C integer up to the tuple's C fields and the ledger.
        root = self._root_base + _rand(self._root_bits) * self._root_stride
        added = self._pending.add(root, msg_id, self.now)
        if added != 1:
            again = self._record(msg_id, added)
            if again is None:
                return ()
            root = again
        tree = _new(TreeTuple)
        tree.values = values
        tree.source = route.source
        tree.root = root
        tree.edge = root
        tree.ack_val = 0
        buf.append(tree)
        if len(buf) >= self._batch:
            self._outbox.full(route.target)
        ledger = self._home
        if ledger is None:
            self._outbox.fold(root, root)
        else:
            ledger.xor(root, root)
        return route.fixed

    def emit_direct(self, task: int, values: Sequence[Any], stream: str = "default",
                    msg_id: Any = None) -> tuple[int, ...]:
        route = self._route(stream, values, True)
        targets = self._direct_target(route, task)
        route.emitted += 1
        return self._send(route, list(values), targets, msg_id)

    def _record(self, msg_id: Any, added: int = 0) -> int | None:
        """Record a new tree under a fresh root and return the root (``added``: the answer
        to the first try, 0 when its root was taken); None when the pending map is full:
        the tuple is not sent, and the spout hears fail for it in this turn."""
        while added == 0:
            root = draw_root(self._layout)
            added = self._pending.add(root, msg_id, self.now)
        if added != 1:
            self.immediate_fails.append(msg_id)
            return None
        return root

    def _send(self, route: Route, values: list, targets: tuple[int, ...], msg_id: Any) -> tuple[int, ...]:
        """Send one tuple per target: with a message id (and ackers), each a new edge of a
        new tree; without, unanchored. Returns the targets (none: the pending map was full)."""
        src = route.source
        if msg_id is None or not self._acking or not targets:
            tup = Tuple(values, src)
            for t in targets:
                self._put(t, tup)
            if msg_id is not None:  # Storm acks at once when nothing can track the tree
                self.immediate_acks.append(msg_id)
            return targets
        root = self._record(msg_id)
        if root is None:
            return ()
        ack_val = 0
        for t in targets:
            edge = _rand(64)
            ack_val ^= edge
            self._put(t, anchored_tuple(values, src, {root: edge}))
        self._outbox.fold(root, ack_val)
        return targets


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
        route.emitted += 1
        buf = route.buf
        if self._acking:
            if anchors is None:
                anchors = self._auto
            if anchors is not None:
                cls = type(anchors)
                if cls is TreeTuple and buf is not None:
                    # The common case, inline: one anchor in one tree, one target.
                    anchor = anchors
                    edge = _rand(64)
                    anchor.ack_val ^= edge  # type: ignore[union-attr]  # cls is TreeTuple
                    tree = _new(TreeTuple)
                    tree.values = values
                    tree.source = route.source
                    tree.root = anchor.root  # type: ignore[union-attr]
                    tree.edge = edge
                    tree.ack_val = 0
                    buf.append(tree)
                    if len(buf) >= self._batch:
                        self._outbox.full(route.target)
                    return route.fixed
                if cls is not Tuple:
                    targets = route.fixed or route.choose(values)
                    self._anchored(route, values, targets, anchors)
                    return targets
        tup = _new(Tuple)
        tup.values = values
        tup.source = route.source
        if buf is not None:
            buf.append(tup)
            if len(buf) >= self._batch:
                self._outbox.full(route.target)
            return route.fixed
        targets = route.fixed or route.choose(values)
        for t in targets:
            self._put(t, tup)
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
        """Storm's anchoring: per target and anchor a new edge id, XORed into the anchor's
        ack value and into the new tuple's id for each tree the anchor belongs to."""
        anchors = (anchors,) if isinstance(anchors, Tuple) else anchors
        src = route.source
        for t in targets:
            ids: dict[int, int] = {}
            for a in anchors:
                root = a.root
                if root or a.roots:
                    edge = _rand(64)
                    a.ack_val ^= edge
                    for r in ((root,) if root else a.roots):
                        ids[r] = ids.get(r, 0) ^ edge
            self._put(t, anchored_tuple(values, src, ids))

    def ack(self, tup: Tuple) -> None:
        """This input is done: its edge (and the edges it anchored) leave the ledger."""
        self.acked += 1
        if self._acking:
            if type(tup) is TreeTuple:
                tree = tup  # one tree (the common case)
                # C integers (compiled): no int objects, into a C table either way
                self._outbox.fold(tree.root, tree.edge ^ tree.ack_val)
            elif tup.roots:
                outbox = self._outbox
                extra = tup.ack_val
                for root, edge in tup.roots.items():
                    outbox.fold(root, edge ^ extra)

    def fail(self, tup: Tuple) -> None:
        """Fail the trees this input belongs to: their spouts' ``fail`` runs soon."""
        self.failed += 1
        self._failed = True
        if self._acking:
            for root in ((tup.root,) if tup.root else tup.roots or ()):
                self._outbox.fail(root)


def make_routes(component: str, task: int, streams: dict[str, Any], subscribers: Callable,
                tasks_of: Callable[[str], list[int]], local_tasks: frozenset[int], context: Any,
                loads: Any = None) -> dict[str, Route]:
    """Build the Route of every declared stream of one task (``loads``: the worker's task
    loads, for load-aware shuffles; squall.runtime.load)."""
    routes = {}
    for stream, decl in streams.items():
        source = Source(component, task, stream, decl.fields)
        choosers, direct_tasks = [], set()
        for bolt, grouping in subscribers(component, stream):
            chooser = make_chooser(grouping, decl.fields, tasks_of(bolt), local_tasks, task, context, stream,
                                   loads)
            if chooser is None:  # a direct grouping: the emitter names the task
                direct_tasks.update(tasks_of(bolt))
            else:
                choosers.append(chooser)
        routes[stream] = Route(source, choosers, decl.direct, frozenset(direct_tasks))
    return routes
