"""The bolt executor: runs a bolt's tasks on the batches in its queue, and its ticks."""
from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any

from squall.components import Bolt
from squall.runtime.collectors import BoltCollector
from squall.runtime.executor import IDLE, Executor
from squall.runtime.histogram import EXECUTE_BOUNDS, Histogram
from squall.runtime.stats import ExecutorStats
from squall.runtime.thread_flow import STEP_TUPLES
from squall.runtime.wrapping import BoltWrapper, StatsSections
from squall.tuple import SYSTEM_COMPONENT, TICK_STREAM, Fields, Source, Tuple

_TICK_FIELDS = Fields(["rate_secs"])
# Measurements (busy time, execute latency) read the real clock; decisions about time
# (ticks) read the worker's clock (link.clock).
_monotonic = time.monotonic
HELD_WAIT = 0.001  # how soon a bolt that is not ready for input is asked again


class BoltExecutor(Executor):
    kind = "bolt"

    def setup(self) -> None:
        self.tasks: dict[int, tuple[Any, BoltCollector, bool]] = {}
        # task -> what takes its input: the executor's run of the bolt, or a wrapper's feed
        self.inputs: dict[Any, Callable[[list], None]] = {}  # and wake keys (attach_wake)
        # The ``ready`` of the bolts that have one of their own (flow control, Bolt.ready).
        self.readiness: list[Callable[[], bool]] = []
        for task in self.task_ids:
            bolt: Any = self.spec.runnable()
            coll = BoltCollector(self.component, task, self.routes(task), self.outbox, self.reporter(task))
            target = bolt.bolt if isinstance(bolt, BoltWrapper) else bolt
            if type(target).ready is not Bolt.ready:
                self.readiness.append(target.ready)
            basic = bool(getattr(target, "_auto_anchor", False))
            run = partial(self._run_batch, task, target.execute, coll, basic)
            if isinstance(bolt, BoltWrapper):
                bolt.attach(run, self.system_collector(task))
                self.inputs[task] = bolt.feed
            else:
                self.inputs[task] = run
            self.attach_wake(task, target)
            bolt.prepare(self.conf, self.context(task), coll)
            self.tasks[task] = (bolt, coll, basic)
            if isinstance(bolt, StatsSections):
                self.reporting.append(bolt)
        self.inputs.update(self.wakes)
        self.tick = self.tick_period() or 0.0
        self.next_tick = self.clock.monotonic() + self.tick if self.tick else None
        self.tick_src = Source(SYSTEM_COMPONENT, -1, TICK_STREAM, _TICK_FIELDS)
        self.execute_latency = Histogram(EXECUTE_BOUNDS)

    def _all_routes(self) -> list[dict]:
        return [c._routes for _, c, _ in getattr(self, "tasks", {}).values()]

    def task_counts(self, task: int) -> dict[str, int]:
        entry = getattr(self, "tasks", {}).get(task)
        return {} if entry is None else {"acked": entry[1].acked, "failed": entry[1].failed}

    def stats(self) -> ExecutorStats:
        colls = [c for _, c, _ in getattr(self, "tasks", {}).values()]
        acked, failed = sum(c.acked for c in colls), sum(c.failed for c in colls)  # before executed
        out = super().stats()
        out.acked, out.failed, out.busy_secs = acked, failed, self.busy_secs
        return out

    def step(self, now: float) -> float:
        inputs, queue = self.inputs, self.queue
        held = False
        if self.readiness and queue._size:
            held = not self._ready()
        if not held:
            # A bounded bite: what is left stays in the queue, where backpressure and the
            # load peers shuffle by (squall.runtime.load) see it, and is taken on the next step.
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
            return HELD_WAIT if held else 0.0  # more is waiting
        return IDLE if next_tick is None else min(IDLE, next_tick - now)

    def _ready(self) -> bool:
        """Do the executor's bolts take input now? A ``ready`` that raises counts as ready
        (the error is the user's; input must not stop for it)."""
        for ready in self.readiness:
            try:
                if not ready():
                    return False
            except Exception as exc:
                self.user_error(self.task_ids[0], exc, "ready")
        return True

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

