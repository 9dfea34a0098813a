"""Executors: one thread each, running the tasks of a contiguous task-id range.

Each loop turn takes everything in the executor's receive queue at once, runs it, then
flushes the outbox, so thread handoffs and locking happen per batch, not per tuple.
"""
from __future__ import annotations

import threading
import time
import traceback
from collections import deque
from typing import TYPE_CHECKING, Any

import structlog

from squall.acker import AckerLedger, PendingTuples
from squall.context import TopologyContext
from squall.model import ACK_ACK, ACK_FAIL, ACK_INIT, executor_tasks
from squall.runtime.collectors import BoltCollector, Outbox, SpoutCollector, make_routes
from squall.runtime.affinity import pin_thread
from squall.tuple import SYSTEM_COMPONENT, TICK_STREAM, Fields, Source, Tuple

if TYPE_CHECKING:
    from squall.runtime.worker_runtime import WorkerRuntime

_TICK_FIELDS = Fields(["rate_secs"])
_monotonic = time.monotonic


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


class Executor(threading.Thread):
    """What spout, bolt and acker executors share: tasks, outbox, errors, stats."""

    kind = "?"

    def __init__(self, runtime: "WorkerRuntime", executor_id: tuple[int, int], component: str) -> None:
        super().__init__(name=f"executor-{component}-{executor_id[0]}-{executor_id[1]}", daemon=True)
        self.runtime = runtime
        self.executor_id = executor_id
        self.component = component
        self.task_ids = list(executor_tasks(executor_id))
        self.queue = runtime.queues[self.task_ids[0]]
        conf = runtime.conf
        spec = runtime.system.components[component]
        self.conf = {**conf, **spec.config}
        self.log = structlog.get_logger("squall.runtime").bind(
            topology=runtime.topology_id, component=component, executor=f"{executor_id[0]}-{executor_id[1]}")
        self.outbox = Outbox(runtime.deliver, int(conf["topology.producer.batch.size"]),
                             runtime.acker_tasks, component, self.task_ids[0])
        self.throttle = ErrorThrottle(int(conf["topology.max.error.report.per.interval"]),
                                      float(conf["topology.error.throttle.interval.secs"]))
        self.executed = 0
        self.errors = 0
        self.started = threading.Event()
        self.failed_to_start: BaseException | None = None

    # -- shared helpers -------------------------------------------------------------------
    def context(self, task: int) -> TopologyContext:
        rt = self.runtime
        return TopologyContext(rt.topology_id, rt.system, rt.task_to_component, rt.component_to_tasks,
                               task, rt.local_tasks, rt.port, self.conf)

    def routes(self, task: int) -> dict:
        rt = self.runtime
        spec = rt.system.components[self.component]
        return make_routes(self.component, task, dict(spec.streams), rt.system.subscribers,
                           rt.component_to_tasks.__getitem__, rt.local_tasks, self.context(task))

    def reporter(self, task: int):
        def report(error: BaseException | str) -> None:
            self.user_error(task, error, "report_error")
        return report

    def user_error(self, task: int, error: BaseException | str, where: str) -> None:
        """Log and report an error from user code; never lets it end the executor."""
        self.errors += 1
        if not self.throttle.allow(_monotonic()):
            return
        if isinstance(error, BaseException):
            text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        else:
            text = str(error)
        self.log.error("user code raised", task=task, where=where, error=text.strip().splitlines()[-1])
        self.runtime.report_error(self.component, task, text)

    def tick_period(self) -> float | None:
        freq = self.conf.get("topology.tick.tuple.freq.secs")
        return float(freq) if freq else None

    def run(self) -> None:
        pin_thread(self.runtime.cpu)
        try:
            self.setup()
        except BaseException as exc:  # a component that cannot start is a worker error
            self.failed_to_start = exc
            self.log.error("executor failed to start", error=repr(exc))
            self.runtime.report_error(self.component, self.task_ids[0], "".join(
                traceback.format_exception(type(exc), exc, exc.__traceback__)))
            self.started.set()
            self.runtime.executor_died(self, exc)
            return
        self.started.set()
        try:
            self.loop()
        except BaseException as exc:
            self.log.error("executor crashed", error=repr(exc), trace=traceback.format_exc())
            self.runtime.executor_died(self, exc)
        finally:
            self.teardown()

    def setup(self) -> None:
        raise NotImplementedError

    def loop(self) -> None:
        raise NotImplementedError

    def teardown(self) -> None:
        pass

    def stats(self) -> dict[str, Any]:
        emitted: dict[str, int] = {}
        for routes in self._all_routes():
            for stream, r in routes.items():
                emitted[stream] = emitted.get(stream, 0) + r.emitted
        return {"component": self.component, "executor": list(self.executor_id), "kind": self.kind,
                "emitted": emitted, "executed": self.executed, "errors": self.errors,
                "queue": len(self.queue), "queue_peak": self.queue.peak}

    def _all_routes(self) -> list[dict]:
        return []


class BoltExecutor(Executor):
    kind = "bolt"

    def setup(self) -> None:
        spec = self.runtime.system.components[self.component]
        self.tasks: dict[int, tuple[Any, BoltCollector, bool]] = {}
        for task in self.task_ids:
            bolt = spec.instantiate()
            coll = BoltCollector(self.component, task, self.routes(task), self.outbox, self.reporter(task))
            bolt.prepare(self.conf, self.context(task), coll)
            self.tasks[task] = (bolt, coll, bool(getattr(bolt, "_auto_anchor", False)))

    def _all_routes(self) -> list[dict]:
        return [c._routes for _, c, _ in getattr(self, "tasks", {}).values()]

    def stats(self) -> dict[str, Any]:
        out = super().stats()
        colls = [c for _, c, _ in getattr(self, "tasks", {}).values()]
        out.update(acked=sum(c.acked for c in colls), failed=sum(c.failed for c in colls))
        return out

    def loop(self) -> None:
        q, rt, tasks, flush = self.queue, self.runtime, self.tasks, self.outbox.flush
        stop = rt.stopping
        tick = self.tick_period()
        next_tick = _monotonic() + tick if tick else None
        tick_src = Source(SYSTEM_COMPONENT, -1, TICK_STREAM, _TICK_FIELDS)
        while not stop.is_set():
            wait = 0.1 if next_tick is None else max(0.0, min(0.1, next_tick - _monotonic()))
            for task, tuples in q.get_all(wait):
                bolt, coll, basic = tasks[task]
                self._run_batch(task, bolt.execute, coll, basic, tuples)
            if next_tick is not None and _monotonic() >= next_tick:
                next_tick += tick
                for task, (bolt, coll, basic) in tasks.items():
                    self._run_batch(task, bolt.execute, coll, basic, [Tuple([tick], tick_src)])
            flush()
            if rt.bp_tasks:
                rt.check_relief(self)

    def _run_batch(self, task: int, execute, coll: BoltCollector, basic: bool, tuples: list) -> None:
        if basic:
            for tup in tuples:
                coll._auto = tup
                coll._failed = False
                try:
                    execute(tup)
                except Exception as exc:
                    self.user_error(task, exc, "execute")
                    coll.fail(tup)
                    continue
                if not coll._failed:
                    coll.ack(tup)
            coll._auto = None
        else:
            for tup in tuples:
                try:
                    execute(tup)
                except Exception as exc:
                    self.user_error(task, exc, "execute")
                    coll.fail(tup)
        self.executed += len(tuples)

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


class SpoutExecutor(Executor):
    kind = "spout"

    def setup(self) -> None:
        spec = self.runtime.system.components[self.component]
        self.tasks: dict[int, tuple[Any, SpoutCollector, PendingTuples]] = {}
        for task in self.task_ids:
            spout = spec.instantiate()
            pending = PendingTuples()
            coll = SpoutCollector(self.component, task, self.routes(task), self.outbox,
                                  self.reporter(task), pending)
            spout.open(self.conf, self.context(task), coll)
            self.tasks[task] = (spout, coll, pending)
        self.acked = self.failed = 0
        self.latencies: deque[float] = deque(maxlen=20000)
        self.active = False

    def _all_routes(self) -> list[dict]:
        return [c._routes for _, c, _ in getattr(self, "tasks", {}).values()]

    def _set_active(self, active: bool) -> None:
        self.active = active
        for task, (spout, _, _) in self.tasks.items():
            try:
                spout.activate() if active else spout.deactivate()
            except Exception as exc:
                self.user_error(task, exc, "activate" if active else "deactivate")

    def loop(self) -> None:
        q, rt, tasks, outbox = self.queue, self.runtime, self.tasks, self.outbox
        stop = rt.stopping
        conf = self.conf
        max_pending = conf.get("topology.max.spout.pending")
        batch = int(conf["topology.spout.batch.size"])
        idle_wait = float(conf["topology.sleep.spout.wait.strategy.time.ms"]) / 1000.0
        flush_interval = float(conf["topology.batch.flush.interval.millis"]) / 1000.0
        timeout = float(conf["topology.message.timeout.secs"])
        timeouts_on = bool(conf["topology.enable.message.timeouts"]) and bool(rt.acker_tasks)
        next_expiry = _monotonic() + 0.1
        wait = 0.0
        while not stop.is_set():
            for task, tuples in q.get_all(wait):
                self._acks(task, tuples)
            if rt.active != self.active:
                self._set_active(rt.active)
            emitted = 0
            if self.active:
                now = _monotonic()
                deadline = now + flush_interval
                for task, (spout, coll, pending) in tasks.items():
                    coll.now = now
                    routes = coll._routes.values()
                    start = before = sum(r.emitted for r in routes)
                    next_tuple = spout.next_tuple
                    n = 0
                    while n < batch:
                        # Call in chunks: per-call bookkeeping costs as much as a small emit.
                        k = 32 if max_pending is None else min(32, max_pending - len(pending))
                        if k <= 0:
                            break
                        try:
                            for _ in range(k):
                                next_tuple()
                        except Exception as exc:
                            self.user_error(task, exc, "next_tuple")
                            break
                        n += k
                        after = sum(r.emitted for r in routes)
                        if after == before or _monotonic() > deadline:
                            break  # nothing to emit right now, or time to flush
                        before = after
                    emitted += sum(r.emitted for r in routes) - start
            outbox.flush()
            for task, (spout, coll, pending) in tasks.items():
                if coll.immediate_acks:
                    done, coll.immediate_acks = coll.immediate_acks, []
                    self.acked += len(done)
                    for msg_id in done:
                        self._call(task, spout.ack, msg_id)
            if timeouts_on:
                now = _monotonic()
                if now >= next_expiry:
                    next_expiry = now + 0.1
                    for task, (spout, coll, pending) in tasks.items():
                        for msg_id in pending.expire(now, timeout):
                            self.failed += 1
                            self._call(task, spout.fail, msg_id)
            wait = 0.0 if emitted else idle_wait

    def _call(self, task: int, fn, msg_id: Any) -> None:
        try:
            fn(msg_id)
        except Exception as exc:
            self.user_error(task, exc, fn.__name__)

    def _acks(self, task: int, tuples: list) -> None:
        spout, coll, pending = self.tasks[task]
        now = _monotonic()
        lat = self.latencies
        pop = pending.pop
        for tup in tuples:
            stream = tup.source.stream
            if stream == ACK_ACK:
                ack = spout.ack
                for root in tup.values[0]:
                    entry = pop(root)
                    if entry is not None:  # None: it timed out (and was failed) already
                        self.acked += 1
                        lat.append(now - entry[1])
                        try:
                            ack(entry[0])
                        except Exception as exc:
                            self.user_error(task, exc, "ack")
            elif stream == ACK_FAIL:
                for root in tup.values[0]:
                    entry = pop(root)
                    if entry is not None:
                        self.failed += 1
                        self._call(task, spout.fail, entry[0])

    def teardown(self) -> None:
        for task, (spout, _, _) in getattr(self, "tasks", {}).items():
            try:
                if self.active:
                    spout.deactivate()
                spout.close()
            except Exception as exc:
                self.user_error(task, exc, "close")

    def stats(self) -> dict[str, Any]:
        out = super().stats()
        lat = sorted(getattr(self, "latencies", ()))
        out.update(acked=getattr(self, "acked", 0), failed=getattr(self, "failed", 0),
                   pending=sum(len(p) for _, _, p in getattr(self, "tasks", {}).values()))
        if lat:
            out["complete_latency_ms"] = {"p50": lat[len(lat) // 2] * 1000,
                                          "p99": lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000}
        return out


class AckerExecutor(Executor):
    """The system bolt that tracks tuple trees (see squall.acker)."""

    kind = "acker"

    def setup(self) -> None:
        self.ledger = AckerLedger()

    def loop(self) -> None:
        q, rt, ledger, outbox = self.queue, self.runtime, self.ledger, self.outbox
        stop = rt.stopping
        timeout = float(self.conf["topology.message.timeout.secs"])
        ack_src, fail_src = outbox.sources[ACK_ACK], outbox.sources[ACK_FAIL]
        deliver = rt.deliver
        next_expiry = _monotonic() + 1.0
        while not stop.is_set():
            batches = q.get_all(0.1)
            now = _monotonic()
            done: dict[int, list] = {}
            failed: dict[int, list] = {}
            for _, tuples in batches:
                for tup in tuples:
                    stream = tup.source.stream
                    v = tup.values
                    if stream == ACK_ACK:
                        ledger.apply_acks(v[0], now, done)
                    elif stream == ACK_INIT:
                        ledger.apply_inits(v[0], v[1], now, done)
                    elif stream == ACK_FAIL:
                        for root in v[0]:
                            spout = ledger.fail(root)
                            if spout is not None:
                                failed.setdefault(spout, []).append(root)
                self.executed += len(tuples)
            for spout, roots in done.items():
                deliver(spout, [Tuple([roots], ack_src)], False)
            for spout, roots in failed.items():
                deliver(spout, [Tuple([roots], fail_src)], False)
            if now >= next_expiry:
                next_expiry = now + 1.0
                ledger.expire(now, timeout * 2)

    def stats(self) -> dict[str, Any]:
        out = super().stats()
        out["pending_trees"] = len(getattr(self, "ledger", ()))
        return out
