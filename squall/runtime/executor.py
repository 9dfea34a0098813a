"""Executors: the tasks of one contiguous task-id range, run a step at a time.

An executor is not a thread: an executor thread (squall.runtime.executor_thread) calls
the ``step`` of each executor it runs in turn. A step takes everything in the executor's
receive queue at once, runs it, then flushes the outbox, so locking and handoffs happen
per batch, not per tuple. ``step`` returns how long the executor can wait before it has
something to do again (0 = at once; new input always wakes it sooner).

This module holds what every kind shares (``Executor``, ``ErrorThrottle``); the kinds are
squall.runtime.bolt_executor, squall.runtime.spout_executor and
squall.runtime.acker_executor.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import structlog

from squall.context import TopologyContext
from squall.logs import error_text, last_line
from squall.metrics import MetricRegistry, task_snapshots
from squall.model import executor_tasks
from squall.runtime.collectors import BoltCollector, Outbox, make_routes
from squall.runtime.link import WorkerLink
from squall.runtime.stats import ExecutorStats
from squall.runtime.wrapping import StatsSections

IDLE = 0.1  # the longest an executor sleeps without input (flags, timers are polled)


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
                             float(self.conf["topology.batch.flush.interval.millis"]) / 1000.0, link.queued)
        self.throttle = ErrorThrottle(int(conf["topology.max.error.report.per.interval"]),
                                      float(conf["topology.error.throttle.interval.secs"]))
        self.executed = 0
        self.task_executed = dict.fromkeys(self.task_ids, 0)
        self.errors = 0
        self.busy_secs = 0.0  # time spent in user execute calls (bolts)
        self.task_metrics = {t: MetricRegistry() for t in self.task_ids}  # context.register_metric
        self.reporting: list[StatsSections] = []  # components with figures of their own
        self.wakes: dict[object, Any] = {}  # queue key -> what a component's wake runs (attach_wake)
        self.between_steps: list[Callable[[], None]] = []  # run between every two steps of the thread

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

    def attach_wake(self, task: int, component: Any) -> None:
        """Give a component that asks for it (``attach_wake``, as shell components do) a
        ``wake`` that any thread may call: the executor's thread then calls the component's
        ``woken`` at its next step. A wake is a queue item without tuples (counted nowhere)."""
        attach = getattr(component, "attach_wake", None)
        if attach is None:
            return
        woken, key = component.woken, object()

        def run(_: list) -> None:
            try:
                woken()
            except Exception as exc:
                self.user_error(task, exc, "woken")

        self.wakes[key] = run
        put = self.queue.put
        item: tuple[object, list] = (key, [])
        attach(lambda: put(item, 0))
        between = getattr(component, "between_steps", None)
        if between is not None:
            # A shell bolt whose child waits for an answer (storm.py's task ids) is answered
            # between the steps of the thread's other executors, not after all of them.
            def run_between() -> None:
                try:
                    between()
                except Exception as exc:
                    self.user_error(task, exc, "between_steps")

            self.between_steps.append(run_between)

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

    def stats(self) -> ExecutorStats:
        emitted: dict[str, int] = {}
        for routes in self._all_routes():
            for stream, r in routes.items():
                emitted[stream] = emitted.get(stream, 0) + r.emitted
        sections: dict[str, dict[str, Any]] = {}
        for comp in self.reporting:
            for section, figures in comp.executor_stats().items():
                have = sections.setdefault(section, {})
                for k, v in figures.items():
                    have[k] = have.get(k, 0) + v if isinstance(v, int) and isinstance(have.get(k, 0), int) else v
        return ExecutorStats(self.component, self.executor_id, self.kind, emitted=emitted, executed=self.executed,
                             errors=self.errors, queue=len(self.queue), queue_peak=self.queue.peak,
                             metrics=task_snapshots(self.task_metrics), sections=sections)

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

