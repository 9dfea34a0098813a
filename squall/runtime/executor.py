"""Executors: the tasks of one contiguous task-id range, run a step at a time.

An executor is not a thread: an executor thread (squall.runtime.executor_thread) calls
the ``step`` of each executor it runs in turn. A step takes everything in the executor's
receive queue at once, runs it, then flushes the outbox, so locking and handoffs happen
per batch, not per tuple. ``step`` returns how long the executor can wait before it has
something to do again (0 = at once; new input always wakes it sooner).
"""
from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import Any

import structlog

from squall.components import Spout
from squall.context import TopologyContext
from squall.logs import error_text, last_line
from squall.metrics import MetricRegistry, task_snapshots
from squall.model import ACK_ACK, ACK_FAIL, executor_tasks
from squall.runtime import drops
from squall.runtime.acker import AckerLedger, SpoutBook
from squall.runtime.collectors import BoltCollector, Outbox, SpoutCollector, make_routes
from squall.runtime.histogram import COMPLETE_BOUNDS, EXECUTE_BOUNDS, SAMPLE_PER_BATCH, Histogram
from squall.runtime.link import WorkerLink
from squall.runtime.wrapping import BoltWrapper, ExecutorStats, SpoutWrapper
from squall.tuple import SYSTEM_COMPONENT, TICK_STREAM, Fields, Source, Tuple

_TICK_FIELDS = Fields(["rate_secs"])
# Measurements (busy time, execute latency, the flush deadline of a spout's turn) read the
# real clock; decisions about time (ticks, timeouts) read the worker's clock (link.clock).
_monotonic = time.monotonic
IDLE = 0.1  # the longest an executor sleeps without input (flags, timers are polled)
_NO_DEADLINE = float("inf")
_NO_ACK = Spout.ack  # a spout that does not override ack
STEP_TUPLES = 2000  # the most input tuples a bolt's step takes from its queue (about)


class ErrorThrottle:
    """At most ``limit`` reports per ``interval`` seconds; the rest are only counted."""

    def __init__(self, limit: int, interval: float) -> None:
        self.limit, self.interval = limit, interval
        self.window_start, self.in_window, self.suppressed = 0.0, 0, 0

    def allow(self, now: float) -> bool:
        if now - self.window_start >= self.interval:
            self.window_start, self.in_window = now, 0
        self.in_window += 1
        if self.in_window <= self.limit:
            return True
        self.suppressed += 1
        return False


class Executor:
    """What spout, bolt and acker executors share: tasks, outbox, errors, stats. An
    executor sees its worker only through ``link`` (squall.runtime.link)."""

    kind = "?"

    def __init__(self, link: WorkerLink, executor_id: tuple[int, int], component: str) -> None:
        self.link = link
        self.clock = link.clock
        self.executor_id = executor_id
        self.component = component
        self.task_ids = list(executor_tasks(executor_id))
        self.queue = link.queue(self.task_ids[0])
        topo = self.topology = link.topology
        conf = topo.conf
        self.spec = topo.system.components[component]
        self.conf = {**conf, **self.spec.config}
        self.log = structlog.get_logger("squall.runtime").bind(
            topology=topo.topology_id, component=component, executor=f"{executor_id[0]}-{executor_id[1]}")
        self.outbox = Outbox(link.deliver, int(conf["topology.producer.batch.size"]),
                             topo.acker_tasks, component, self.task_ids[0],
                             float(self.conf["topology.batch.flush.interval.millis"]) / 1000.0)
        self.throttle = ErrorThrottle(int(conf["topology.max.error.report.per.interval"]),
                                      float(conf["topology.error.throttle.interval.secs"]))
        self.executed = 0
        self.task_executed = dict.fromkeys(self.task_ids, 0)
        self.errors = 0
        self.busy_secs = 0.0  # time spent in user execute calls (bolts)
        self.task_metrics = {t: MetricRegistry() for t in self.task_ids}  # context.register_metric
        self.reporting: list[ExecutorStats] = []  # components with figures of their own

    # -- shared helpers -------------------------------------------------------------------
    def context(self, task: int) -> TopologyContext:
        return self.topology.context(task, self.conf, self.clock, self.task_metrics[task])

    def routes(self, task: int, streams: list[str] | None = None) -> dict:
        """Routes of the component's streams (or of ``streams`` only) for ``task``."""
        topo = self.topology
        decls = {s: d for s, d in self.spec.streams.items() if streams is None or s in streams}
        return make_routes(self.component, task, decls, topo.system.subscribers,
                           topo.component_to_tasks.__getitem__, topo.local_tasks, self.context(task),
                           self.link.loads)

    def system_collector(self, task: int) -> BoltCollector:
        """A collector for the component's system streams (ids starting ``__``, which the
        system topology declares), given to wrapping components: its emits anchor to the
        inputs it acks, and it is not counted among the component's own."""
        system = [s for s in self.spec.streams if s.startswith("__")]
        return BoltCollector(self.component, task, self.routes(task, system), self.outbox, self.reporter(task))

    def reporter(self, task: int):
        def report(error: BaseException | str) -> None:
            self.user_error(task, error, "report_error")
        return report

    def user_error(self, task: int, error: BaseException | str, where: str) -> None:
        """Log and report an error from user code; never lets it end the executor."""
        self.errors += 1
        if not self.throttle.allow(self.clock.monotonic()):
            return
        text = error_text(error)  # bounded; throttled above
        trace = {"exception": text} if isinstance(error, BaseException) else {}  # printed below the line
        self.log.error("user code raised", task=task, where=where, error=last_line(text), **trace)
        self.link.report_error(self.component, task, text)

    def tick_period(self) -> float | None:
        freq = self.conf.get("topology.tick.tuple.freq.secs")
        return float(freq) if freq else None

    def setup(self) -> None:
        """Create and prepare (or open) the user's components; an error here is fatal."""
        raise NotImplementedError

    def step(self, now: float) -> float:
        """Do what there is to do now; seconds until there may be more without input."""
        raise NotImplementedError

    def teardown(self) -> None:
        pass

    def stats(self) -> dict[str, Any]:
        emitted: dict[str, int] = {}
        for routes in self._all_routes():
            for stream, r in routes.items():
                emitted[stream] = emitted.get(stream, 0) + r.emitted
        out: dict[str, Any] = {"component": self.component, "executor": list(self.executor_id), "kind": self.kind,
                               "emitted": emitted, "executed": self.executed, "errors": self.errors,
                               "queue": len(self.queue), "queue_peak": self.queue.peak,
                               "metrics": task_snapshots(self.task_metrics)}
        for comp in self.reporting:
            for section, figures in comp.executor_stats().items():
                have = out.setdefault(section, {})
                for k, v in figures.items():
                    have[k] = have.get(k, 0) + v if isinstance(v, int) and isinstance(have.get(k, 0), int) else v
        return out

    def _all_routes(self) -> list[dict]:
        return []

    def task_counts(self, task: int) -> dict[str, int]:
        """acked and failed of one task (kept per task by bolts, per executor elsewhere)."""
        return {}

    def metrics(self) -> dict[str, Any]:
        """Everything the metrics endpoint shows of this executor: per-task counters, then
        executor-wide ones. Read from another thread while the executor runs: only copies."""
        tasks = {}
        routes = dict(zip(self.task_ids, self._all_routes()))
        for task in self.task_ids:
            emitted = {s: r.emitted for s, r in routes.get(task, {}).items()}
            counts = self.task_counts(task)  # acks before executed: see _run_batch
            tasks[str(task)] = {"executed": self.task_executed[task], "emitted": emitted, **counts}
        out: dict[str, Any] = {
            "component": self.component, "executor": list(self.executor_id), "kind": self.kind,
            "tasks": tasks, "transferred": self.outbox.transferred, "errors": self.errors,
            "queue": len(self.queue), "queue_capacity": self.queue.capacity,
            "backpressure": self.task_ids[0] in self.link.bp_tasks, "metrics": task_snapshots(self.task_metrics)}
        for key in ("execute_latency", "complete_latency"):
            hist = getattr(self, key, None)
            if hist is not None:
                out[key] = hist.snapshot()
        return out


class BoltExecutor(Executor):
    kind = "bolt"

    def setup(self) -> None:
        self.tasks: dict[int, tuple[Any, BoltCollector, bool]] = {}
        # task -> what takes its input: the executor's run of the bolt, or a wrapper's feed
        self.inputs: dict[int, Callable[[list], None]] = {}
        for task in self.task_ids:
            bolt: Any = self.spec.runnable()
            coll = BoltCollector(self.component, task, self.routes(task), self.outbox, self.reporter(task))
            target = bolt.bolt if isinstance(bolt, BoltWrapper) else bolt
            basic = bool(getattr(target, "_auto_anchor", False))
            run = partial(self._run_batch, task, target.execute, coll, basic)
            if isinstance(bolt, BoltWrapper):
                bolt.attach(run, self.system_collector(task))
                self.inputs[task] = bolt.feed
            else:
                self.inputs[task] = run
            bolt.prepare(self.conf, self.context(task), coll)
            self.tasks[task] = (bolt, coll, basic)
            if isinstance(bolt, ExecutorStats):
                self.reporting.append(bolt)
        self.tick = self.tick_period() or 0.0
        self.next_tick = self.clock.monotonic() + self.tick if self.tick else None
        self.tick_src = Source(SYSTEM_COMPONENT, -1, TICK_STREAM, _TICK_FIELDS)
        self.execute_latency = Histogram(EXECUTE_BOUNDS)

    def _all_routes(self) -> list[dict]:
        return [c._routes for _, c, _ in getattr(self, "tasks", {}).values()]

    def task_counts(self, task: int) -> dict[str, int]:
        entry = getattr(self, "tasks", {}).get(task)
        return {} if entry is None else {"acked": entry[1].acked, "failed": entry[1].failed}

    def stats(self) -> dict[str, Any]:
        colls = [c for _, c, _ in getattr(self, "tasks", {}).values()]
        acked, failed = sum(c.acked for c in colls), sum(c.failed for c in colls)  # before executed
        out = super().stats()
        out.update(acked=acked, failed=failed, busy_secs=self.busy_secs)
        return out

    def step(self, now: float) -> float:
        inputs, queue = self.inputs, self.queue
        # A bounded bite: what is left stays in the queue, where backpressure and the load
        # peers shuffle by (squall.runtime.load) see it, and is taken on the next step.
        for task, tuples in queue.get_some(STEP_TUPLES):
            inputs[task](tuples)
        next_tick = self.next_tick
        if next_tick is not None and now >= next_tick:
            self.next_tick = next_tick = max(next_tick + self.tick, now)
            for task in self.tasks:
                inputs[task]([Tuple([self.tick], self.tick_src)])
        self.outbox.flush()
        link = self.link
        if link.bp_tasks:
            link.relieve(self.task_ids, queue)
        if queue._size:
            return 0.0  # more is waiting
        return IDLE if next_tick is None else min(IDLE, next_tick - now)

    def _run_batch(self, task: int, execute, coll: BoltCollector, basic: bool, tuples: list) -> None:
        # Counted as executed before execute runs, and read before acks by stats(), which
        # another thread takes mid-batch: acked never shows above executed.
        self.executed += len(tuples)
        self.task_executed[task] += len(tuples)
        started = _monotonic()  # per batch, not per tuple: capacity and execute latency
        if basic:
            for tup in tuples:
                coll._auto = tup
                coll._failed = False
                try:
                    execute(tup)
                    if not coll._failed:
                        coll.ack(tup)
                except Exception as exc:
                    self.user_error(task, exc, "execute")
                    coll.fail(tup)
            coll._auto = None
        else:
            for tup in tuples:
                try:
                    execute(tup)
                except Exception as exc:
                    self.user_error(task, exc, "execute")
                    coll.fail(tup)
        elapsed = _monotonic() - started
        self.busy_secs += elapsed
        self.execute_latency.observe_batch(elapsed, len(tuples))

    def teardown(self) -> None:
        try:
            self.outbox.flush()
        except Exception:
            pass
        for task, (bolt, _, _) in getattr(self, "tasks", {}).items():
            try:
                bolt.cleanup()
            except Exception as exc:
                self.user_error(task, exc, "cleanup")


class SpoutTask:
    """One task of a spout executor: its spout, collector and reliability bookkeeping;
    for a wrapping spout, the wrapper (which takes the task's input) and the spout it
    wraps (whose ``next_tuple`` the executor calls while the wrapper allows)."""

    __slots__ = ("spout", "coll", "book", "pending", "wrapper", "emitter")

    def __init__(self, spout: Any, coll: SpoutCollector, book: SpoutBook) -> None:
        self.spout, self.coll, self.book, self.pending = spout, coll, book, book.pending
        self.wrapper: SpoutWrapper | None = spout if isinstance(spout, SpoutWrapper) else None
        self.emitter: Any = spout if self.wrapper is None else self.wrapper.spout


class SpoutExecutor(Executor):
    kind = "spout"

    def setup(self) -> None:
        self.latencies: deque[float] = deque(maxlen=20000)
        self.tasks: dict[int, SpoutTask] = {}
        for task in self.task_ids:
            spout: Any = self.spec.runnable()
            book = SpoutBook(self.latencies)
            coll = SpoutCollector(self.component, task, self.routes(task), self.outbox,
                                  self.reporter(task), book.pending)
            if isinstance(spout, SpoutWrapper):
                spout.attach(self.system_collector(task), book)
            spout.open(self.conf, self.context(task), coll)
            self.tasks[task] = SpoutTask(spout, coll, book)
            if isinstance(spout, ExecutorStats):
                self.reporting.append(spout)
        self.complete_latency = Histogram(COMPLETE_BOUNDS)
        self.active = False
        conf = self.conf
        self.max_pending = conf.get("topology.max.spout.pending")
        self.batch = int(conf["topology.spout.batch.size"])
        self.idle_wait = float(conf["topology.sleep.spout.wait.strategy.time.ms"]) / 1000.0
        self.flush_interval = float(conf["topology.batch.flush.interval.millis"]) / 1000.0
        self.timeout = float(conf["topology.message.timeout.secs"])
        self.timeouts_on = bool(conf["topology.enable.message.timeouts"]) and bool(self.topology.acker_tasks)
        self.next_expiry = self.clock.monotonic() + 0.1

    @property
    def acked(self) -> int:
        return sum(t.book.acked for t in getattr(self, "tasks", {}).values())

    @property
    def failed(self) -> int:
        return sum(t.book.failed for t in getattr(self, "tasks", {}).values())

    def _all_routes(self) -> list[dict]:
        return [t.coll._routes for t in getattr(self, "tasks", {}).values()]

    def task_counts(self, task: int) -> dict[str, int]:
        t = getattr(self, "tasks", {}).get(task)
        return {"acked": 0 if t is None else t.book.acked, "failed": 0 if t is None else t.book.failed}

    def _set_active(self, active: bool) -> None:
        self.active = active
        for task, t in self.tasks.items():
            try:
                t.spout.activate() if active else t.spout.deactivate()
            except Exception as exc:
                self.user_error(task, exc, "activate" if active else "deactivate")

    def step(self, now: float) -> float:
        link, tasks = self.link, self.tasks
        for task, tuples in self.queue.get_all():
            self._acks(task, tuples, now)
        if link.active != self.active:
            self._set_active(link.active)
        wait = IDLE
        if self.active:
            if link.overloaded():
                wait = self.idle_wait  # backpressure: hold emits until the queues drain
            else:
                # Capped by max pending: acks wake it. Ran dry (a call emitted nothing):
                # the wait strategy, as when it emits nothing at all. Else at once.
                capped, dry = self._emit(now)
                wait = IDLE if capped else self.idle_wait if dry else 0.0
        due = self.outbox.flush_due(_monotonic())
        if due < wait:
            wait = due
        for task, t in tasks.items():
            coll = t.coll
            if coll.immediate_acks:
                done, coll.immediate_acks = coll.immediate_acks, []
                t.book.acked += len(done)
                for msg_id in done:
                    self._call(task, t.spout.ack, msg_id)
        if self.timeouts_on:
            if now >= self.next_expiry:
                self.next_expiry = now + 0.1
                self._expire(now)
            wait = min(wait, self.next_expiry - now)
        return wait

    def _expire(self, now: float) -> None:
        """Fail the tuples pending longer than the message timeout."""
        for task, t in self.tasks.items():
            expired = t.pending.expire(now, self.timeout)
            if expired:
                t.book.failed += len(expired)
                for msg_id in expired:
                    self._call(task, t.spout.fail, msg_id)

    def _emit(self, now: float) -> tuple[bool, bool]:
        """Call next_tuple in chunks, for at most ``flush_interval`` (real time; 0: no
        limit); (whether max pending stopped it, whether a spout ran dry)."""
        max_pending, batch = self.max_pending, self.batch
        deadline = _monotonic() + self.flush_interval if self.flush_interval > 0.0 else _NO_DEADLINE
        capped = dry = False
        for task, t in self.tasks.items():
            if t.wrapper is not None and not t.wrapper.may_emit():
                dry = True  # its wrapper holds its emits (a checkpoint is under way)
                continue
            coll, pending = t.coll, t.pending
            coll.now = now
            routes = coll._routes.values()
            before = sum(r.emitted for r in routes)
            next_tuple = t.emitter.next_tuple
            n = 0
            while n < batch:
                # Call in chunks: per-call bookkeeping costs as much as a small emit.
                k = min(32, batch - n) if max_pending is None else min(32, batch - n, max_pending - len(pending))
                if k <= 0:
                    capped = True
                    break
                try:
                    for _ in range(k):
                        next_tuple()
                except Exception as exc:
                    self.user_error(task, exc, "next_tuple")
                    dry = True
                    break
                n += k
                after = sum(r.emitted for r in routes)
                if after - before < k:
                    dry = True  # a call emitted nothing: nothing more to emit right now
                    break
                if _monotonic() > deadline:
                    break  # time to flush
                before = after
        return capped, dry

    def _call(self, task: int, fn, msg_id: Any) -> None:
        try:
            fn(msg_id)
        except Exception as exc:
            self.user_error(task, exc, fn.__name__)

    def _acks(self, task: int, tuples: list, now: float) -> None:
        t = self.tasks[task]
        if t.wrapper is not None:  # a wrapping spout takes its task's input itself
            t.wrapper.receive(tuples, now)
            return
        spout, book = t.spout, t.book
        lats: list[float] = []
        lat = lats.append
        pop = t.pending.entries.pop
        for tup in tuples:
            stream = tup.source.stream
            if stream == ACK_ACK:
                acked = 0
                if type(spout).ack is _NO_ACK and "ack" not in getattr(spout, "__dict__", ()):
                    # The spout keeps no record of acks: no call per tuple.
                    for root in tup.values[0]:
                        entry = pop(root, None)
                        if entry is not None:  # None: it timed out (and was failed) already
                            acked += 1
                            lat(now - entry[1])
                    book.acked += acked
                    continue
                ack = spout.ack
                for root in tup.values[0]:
                    entry = pop(root, None)
                    if entry is not None:
                        acked += 1
                        lat(now - entry[1])
                        try:
                            ack(entry[0])
                        except Exception as exc:
                            self.user_error(task, exc, "ack")
                book.acked += acked
            elif stream == ACK_FAIL:
                for root in tup.values[0]:
                    entry = pop(root, None)
                    if entry is not None:
                        book.failed += 1
                        self._call(task, spout.fail, entry[0])
        if lats:
            self.latencies.extend(lats)
            self.complete_latency.observe_many(lats[:SAMPLE_PER_BATCH])  # a bounded sample per batch

    def teardown(self) -> None:
        for task, t in getattr(self, "tasks", {}).items():
            try:
                if self.active:
                    t.spout.deactivate()
                t.spout.close()
            except Exception as exc:
                self.user_error(task, exc, "close")

    def stats(self) -> dict[str, Any]:
        out = super().stats()
        lat = sorted(getattr(self, "latencies", ()))
        out.update(acked=self.acked, failed=self.failed,
                   pending=sum(len(t.pending) for t in getattr(self, "tasks", {}).values()))
        if lat:
            out["complete_latency_ms"] = {"p50": lat[len(lat) // 2] * 1000,
                                          "p99": lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000}
        return out


class AckerExecutor(Executor):
    """The system bolt that tracks tuple trees (see squall.runtime.acker). Emitters on its own
    thread write to its ledger directly (Outbox.fuse); others send it ack messages."""

    kind = "acker"

    def __init__(self, link: WorkerLink, executor_id: tuple[int, int], component: str) -> None:
        super().__init__(link, executor_id, component)
        self.ledger = AckerLedger()

    def setup(self) -> None:
        topo = self.topology
        self.spout_tasks = frozenset(t for spec in topo.system.spouts() for t in topo.component_to_tasks[spec.id])
        self.timeout = float(self.conf["topology.message.timeout.secs"])
        # Timeouts off means off everywhere: spouts wait for every tree, so the acker keeps it.
        self.expires = bool(self.conf["topology.enable.message.timeouts"])
        self.ack_src, self.fail_src = self.outbox.sources[ACK_ACK], self.outbox.sources[ACK_FAIL]
        self.next_expiry = self.clock.monotonic() + self.timeout

    def step(self, now: float) -> float:
        ledger = self.ledger
        for _, tuples in self.queue.get_all():
            for tup in tuples:
                stream = tup.source.stream
                if stream == ACK_ACK:
                    ledger.apply(tup.values[0])
                elif stream == ACK_FAIL:
                    for root in tup.values[0]:
                        ledger.fail(root)
        done, failed = ledger.take()
        deliver, spouts = self.link.deliver, self.spout_tasks
        finished = 0
        for spout, roots in done.items():
            finished += len(roots)  # an acker's "executed" counts finished trees
            if spout in spouts:
                deliver(spout, [Tuple([roots], self.ack_src)])
            else:
                self._no_spout(spout, roots)
        for spout, roots in failed.items():
            finished += len(roots)
            if spout in spouts:
                deliver(spout, [Tuple([roots], self.fail_src)])
            else:
                self._no_spout(spout, roots)
        if finished:
            self.executed += finished
            self.task_executed[self.task_ids[0]] += finished
        if self.expires and now >= self.next_expiry:
            self.next_expiry = now + self.timeout
            ledger.expire()
        return IDLE

    def _no_spout(self, task: int, roots: list[int]) -> None:
        """Roots whose low bits name no spout task: only forged ack traffic makes these."""
        self.link.drop(drops.ACKER_STREAM, len(roots), self.executor_id,
                       error=f"tuple trees of task {task}, which is not a spout task")

    def stats(self) -> dict[str, Any]:
        out = super().stats()
        out["pending_trees"] = len(getattr(self, "ledger", ()))
        return out
