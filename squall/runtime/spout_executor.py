"""The spout executor: calls a spout's ``next_tuple`` while it may emit, and hands the
acker's verdicts (acks, fails, timeouts) back to the spout."""
from __future__ import annotations

import time
from collections import deque
from typing import Any

from squall.components import Spout
from squall.model import ACK_ACK, ACK_FAIL
from squall.runtime import drops
from squall.runtime.acker import SpoutBook
from squall.runtime.collectors import SpoutCollector
from squall.runtime.executor import IDLE, Executor
from squall.runtime.histogram import COMPLETE_BOUNDS, SAMPLE_PER_BATCH, Histogram
from squall.runtime.pending import pending_limit
from squall.runtime.spout_pacing import SpoutPacing
from squall.runtime.stats import ExecutorStats, Latency
from squall.runtime.thread_flow import STEP_TUPLES, ThreadHold
from squall.runtime.wrapping import SpoutWrapper, StatsSections

# Measurements (the flush deadline of a spout's turn) read the real clock; decisions about
# time (timeouts) read the worker's clock (link.clock).
_monotonic = time.monotonic
_NO_DEADLINE = float("inf")
_NO_ACK = Spout.ack  # a spout that does not override ack
_NOT_BEHIND = Spout.behind  # a spout that never says records are on their way
IN_FLIGHT = 4  # batches a spout capped by max pending keeps in flight (turn_limit)


def turn_limit(batch: int, max_pending: int | None) -> int:
    """The most tuples a spout task emits in one turn: ``topology.spout.batch.size``, and
    under ``topology.max.spout.pending`` at most a fourth of it (IN_FLIGHT), so that its
    allowance is several batches in flight, not one or two. A turn's emits travel as one
    batch; with the allowance in one or two batches, the spout waits for a whole batch's
    round trip while the workers downstream wait for its next batch (ping-pong), and
    across workers each side idles while the other works. With several, acks of the
    first batch come back while later ones are still on their way, and the spout emits
    again at once. ``max_pending`` None: no bound (no cap, or acks that never cross a thread)."""
    if max_pending is None:
        return batch
    return max(1, min(batch, -(-max_pending // IN_FLIGHT)))


class SpoutTask:
    """One task of a spout executor: its spout, collector and reliability bookkeeping;
    for a wrapping spout, the wrapper (which takes the task's input) and the spout it
    wraps (whose ``next_tuple`` the executor calls while the wrapper allows); and when
    its ``next_tuple`` may be called again (``pace``); ``behind``, the spout's own ``behind``
    (None: it does not override it); ``waits``, the turns after which it was held."""

    __slots__ = ("spout", "coll", "book", "pending", "wrapper", "emitter", "pace", "behind", "waits")

    def __init__(self, spout: Any, coll: SpoutCollector, book: SpoutBook, pace: SpoutPacing) -> None:
        self.spout, self.coll, self.book, self.pending, self.pace = spout, coll, book, book.pending, pace
        self.wrapper: SpoutWrapper | None = spout if isinstance(spout, SpoutWrapper) else None
        self.emitter: Any = spout if self.wrapper is None else self.wrapper.spout
        self.behind: Any = None if getattr(type(self.emitter), "behind", _NOT_BEHIND) is _NOT_BEHIND \
            else self.emitter.behind
        self.waits = 0


class SpoutExecutor(Executor):
    kind = "spout"

    def setup(self) -> None:
        self.latencies: deque[float] = deque(maxlen=20000)  # recent complete latencies, sampled per ack batch
        self.tasks: dict[int, SpoutTask] = {}
        idle_wait = float(self.conf["topology.sleep.spout.wait.strategy.time.ms"]) / 1000.0
        limit = pending_limit(self.conf.get("topology.max.spout.pending"))
        for task in self.task_ids:
            spout: Any = self.spec.runnable()
            book = SpoutBook(self.latencies, limit)
            coll = SpoutCollector(self.component, task, self.routes(task), self.outbox,
                                  self.reporter(task), book.pending, self.near_ackers())
            if isinstance(spout, SpoutWrapper):
                spout.attach(self.system_collector(task), book)
            self.attach_wake(task, spout)
            spout.open(self.conf, self.context(task), coll)
            self.tasks[task] = SpoutTask(spout, coll, book, SpoutPacing(idle_wait))
            if isinstance(spout, StatsSections):
                self.reporting.append(spout)
        self.complete_latency = Histogram(COMPLETE_BOUNDS)
        self.active = False
        conf = self.conf
        self.max_pending = conf.get("topology.max.spout.pending")
        # A spout fused to the only acker (local mode, one worker) sees its trees complete
        # within the turn that emitted them: nothing is in flight between turns to bound.
        self.batch = turn_limit(int(conf["topology.spout.batch.size"]),
                                None if self.outbox.ledger is not None else self.max_pending)
        self.idle_wait = idle_wait
        self.flush_interval = float(conf["topology.batch.flush.interval.millis"]) / 1000.0
        self.timeout = float(conf["topology.message.timeout.secs"])
        self.timeouts_on = bool(conf["topology.enable.message.timeouts"]) and bool(self.topology.acker_tasks)
        self.next_expiry = self.clock.monotonic() + 0.1
        # Emits skipped while an executor on this thread has over a step's worth queued
        # (squall.runtime.thread_flow); None: no other executor shares the thread.
        neighbours = self.link.neighbours(self.task_ids[0])
        self.hold: ThreadHold | None = ThreadHold(neighbours, STEP_TUPLES) if neighbours else None

    def near_ackers(self) -> frozenset[int]:
        """The acker tasks this executor's trees should go to: those on its thread, else
        those in its worker (none: any acker; squall.runtime.acker.root_layout)."""
        if self.outbox.near:
            return frozenset(self.outbox.near)
        return frozenset(t for t in self.topology.acker_tasks if t in self.topology.local_tasks)

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
        for t in tasks.values():
            t.coll.now = now  # also for what a spout emits from ack or fail
        for task, tuples in self.queue.get_all():
            self._acks(task, tuples, now)
        if link.active != self.active:
            self._set_active(link.active)
        wait = IDLE
        if self.active:
            # Backpressure: hold emits until the queues drain.
            if link.overloaded():
                wait = self.idle_wait
            elif self.hold is not None and self.hold.held():
                wait = 0.0  # this thread drains that queue now; look again at the next turn
            else:
                wait = self._emit(now)
        for task, t in tasks.items():
            coll = t.coll
            if coll.immediate_acks:
                done, coll.immediate_acks = coll.immediate_acks, []
                t.book.acked += len(done)
                for msg_id in done:
                    self._call(task, t.spout.ack, msg_id)
            if coll.immediate_fails:
                self._refused(task, t)
        if self.timeouts_on:
            if now >= self.next_expiry:
                self.next_expiry = now + 0.1
                self._expire(now)
            wait = min(wait, self.next_expiry - now)
        # Last, so that what the spout emitted from ack or fail goes in this turn too.
        due = self.outbox.flush_due(_monotonic())
        return due if due < wait else wait

    def _refused(self, task: int, t: SpoutTask) -> None:
        """Tuples emitted while the task's pending map was full: never sent; they fail now
        (the spout replays them) and count as dropped."""
        refused, t.coll.immediate_fails = t.coll.immediate_fails, []
        t.book.failed += len(refused)
        self.link.drop(drops.PENDING_FULL, len(refused), self.executor_id,
                       error=f"spout task {task} has {t.pending.limit} tuples pending: {len(refused)} new "
                             f"tuples failed at once; lower what one next_tuple call emits or raise "
                             f"topology.max.spout.pending")
        for msg_id in refused:
            self._call(task, t.spout.fail, msg_id)

    def _expire(self, now: float) -> None:
        """Fail the tuples pending longer than the message timeout."""
        for task, t in self.tasks.items():
            expired = t.pending.expire(now, self.timeout)
            if expired:
                t.book.failed += len(expired)
                for msg_id in expired:
                    self._call(task, t.spout.fail, msg_id)

    def _emit(self, now: float) -> float:
        """Call the next_tuple of each task that may be asked now (``SpoutPacing``) in
        chunks, for at most ``flush_interval`` (real time; 0: no limit); how long until a
        task may be asked again: at once when none ran dry or was capped; its wait
        strategy's time when one ran dry; IDLE when capped by max pending (acks wake it)."""
        max_pending, batch, idle_wait = self.max_pending, self.batch, self.idle_wait
        deadline = _monotonic() + self.flush_interval if self.flush_interval > 0.0 else _NO_DEADLINE
        wait = IDLE
        for task, t in self.tasks.items():
            if t.wrapper is not None and not t.wrapper.may_emit():
                # Its wrapper holds its emits (a checkpoint is under way); what releases
                # them arrives as input and wakes the thread.
                if idle_wait < wait:
                    wait = idle_wait
                continue
            held = t.pace.held(now, _monotonic())
            if held > 0.0:  # ran dry less than its wait strategy's time ago
                if held < wait:
                    wait = held
                continue
            coll, pending = t.coll, t.pending
            capped = dry = False
            routes = tuple(coll._routes.values())
            single = routes[0] if len(routes) == 1 else None  # most spouts: one stream, one route
            before = single.emitted if single is not None else sum(r.emitted for r in routes)
            next_tuple = t.emitter.next_tuple
            n = 0
            # Call in chunks (per-call bookkeeping costs as much as a small emit) that start
            # at one call and double while every call emits: a paced spout with a few tuples
            # due makes about as many calls as it has tuples, not a whole chunk of empty ones.
            chunk, chunk_max = 1, t.pace.chunk_max()
            while n < batch:
                k = batch - n
                if chunk < k:
                    k = chunk
                if max_pending is not None and max_pending - len(pending) < k:
                    k = max_pending - len(pending)
                if chunk < chunk_max:
                    chunk += chunk
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
                after = single.emitted if single is not None else sum(r.emitted for r in routes)
                if after - before < k:
                    dry = True  # a call emitted nothing: nothing more to emit right now
                    break
                if _monotonic() > deadline:
                    break  # time to flush
                before = after
            if dry and t.behind is not None and self._behind(task, t):
                dry = False  # records are on their way (a fetch not yet landed): not held
            if dry:
                t.waits += 1
                t.pace.turn_ended(self.clock.monotonic(), _monotonic(), True)
                if idle_wait < wait:
                    wait = idle_wait
            else:
                t.pace.turn_ended(now, 0.0, False)
                if not capped:
                    wait = 0.0
        return wait

    def _behind(self, task: int, t: SpoutTask) -> bool:
        try:
            return bool(t.behind())
        except Exception as exc:
            self.user_error(task, exc, "behind")
            return False

    def _call(self, task: int, fn, msg_id: Any) -> None:
        try:
            fn(msg_id)
        except Exception as exc:
            self.user_error(task, exc, fn.__name__)

    def _acks(self, task: Any, tuples: list, now: float) -> None:
        t = self.tasks.get(task)
        if t is None:  # a component's wake (attach_wake)
            self.wakes[task](tuples)
            return
        if t.wrapper is not None:  # a wrapping spout takes its task's input itself
            t.wrapper.receive(tuples, now)
            return
        spout, book, pending = t.spout, t.book, t.pending
        lats: list[float] = []  # complete latencies of the first few completed trees
        for tup in tuples:
            stream = tup.source.stream
            if stream == ACK_ACK:
                if getattr(spout.ack, "__func__", None) is _NO_ACK:
                    # The spout keeps no record of acks: no call, nor list, per tuple.
                    book.acked += pending.complete(tup.values[0], now, lats, SAMPLE_PER_BATCH - len(lats), None)
                    continue
                done: list[Any] = []
                book.acked += pending.complete(tup.values[0], now, lats, SAMPLE_PER_BATCH - len(lats), done)
                ack = spout.ack
                for msg_id in done:
                    try:
                        ack(msg_id)
                    except Exception as exc:
                        self.user_error(task, exc, "ack")
            elif stream == ACK_FAIL:
                for root in tup.values[0]:
                    reason = None
                    if type(root) is not int:  # [root, reason]: a tuple of the tree could not be delivered
                        root, reason = root
                    held = pending.pop(root)
                    if held is not None:
                        book.failed += 1
                        if reason is None:
                            self._call(task, spout.fail, held[0])
                        else:  # a tuple of the tree could not be delivered: replaying fails again
                            try:
                                spout.undeliverable(held[0], reason)
                            except Exception as exc:
                                self.user_error(task, exc, "undeliverable")
        if lats:
            # A bounded sample per batch, for the histogram and the recent latencies.
            self.latencies.extend(lats)
            self.complete_latency.observe_many(lats)

    def teardown(self) -> None:
        for task, t in getattr(self, "tasks", {}).items():
            try:
                if self.active:
                    t.spout.deactivate()
                t.spout.close()
            except Exception as exc:
                self.user_error(task, exc, "close")

    def stats(self) -> ExecutorStats:
        out = super().stats()
        lat = sorted(getattr(self, "latencies", ()))
        out.acked, out.failed = self.acked, self.failed
        out.pending = sum(len(t.pending) for t in getattr(self, "tasks", {}).values())
        out.waits = sum(t.waits for t in getattr(self, "tasks", {}).values())
        hist = getattr(self, "complete_latency", None)
        if hist is not None:  # sums, so that nimbus can take latencies over any window
            snap = hist.snapshot()
            out.complete_latency_sum_secs, out.complete_latency_count = snap["sum"], sum(snap["counts"])
        if lat:
            out.complete_latency = Latency(p50=lat[len(lat) // 2] * 1000,
                                           p99=lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000)
        return out

