"""Executor threads: each runs several executors, one step of each in turn.

Only one thread of a process runs Python at a time, so an executor per thread buys no
parallelism for Python code; it costs a GIL handoff and a cold cache every time a batch
changes hands. By default a worker runs all its executors on one thread, in topology
order (spouts first, then each bolt after the components that feed it), so one turn
carries a batch from the spout through every bolt it reaches. A bolt that blocks (a
network call, say) holds up the executors that share its thread:
``topology.worker.executor.threads: 0`` gives every executor its own thread, as in Storm.

A component may ask to be looked at between every two steps (``between_steps``, squall.runtime.
executor): a shell bolt whose child waits for its task ids answers it there, not a whole turn later.

Between two turns with no wait, a thread lets the worker's other threads take the GIL
(``time.sleep(0)``): a batch it handed the transfer thread goes out now, and acks the
receive thread holds reach their queues, instead of waiting until this thread sleeps or
the interpreter's switch interval (5 ms) forces a switch. Without it, a spout that is
never idle sends its batches to other workers in bursts, and a spout capped by max
pending waits a whole burst's round trip while the workers downstream idle.

A turn that would sleep but finds its doorbell rung (acks came in, or an acker handed a
verdict to a spout of the same thread) does not give up the CPU or the GIL at all. If it
left tuples on the transfer queue, it ends with ``sched_yield``, which gives up both: the
transfer thread, pinned to the same CPU and rung by those tuples, sends them before the
next turn (``hand_offs`` counts these turns). Only while less than a full batch
(``topology.producer.batch.size``) waits there, and not when the thread has more to do at
once (wait 0): a saturated worker keeps coalescing batches, since sending each at once
costs more frames per tuple (measured: cluster unacked throughput 9-14% lower).
"""
from __future__ import annotations

import os
import threading
import time
import traceback
from collections.abc import Sequence
from typing import TypeVar

from squall.model import ACKER
from squall.runtime.affinity import pin_thread
from squall.runtime.executor import IDLE, Executor
from squall.runtime.link import WorkerLink
from squall.runtime.queues import BatchQueue, Doorbell
from squall.topology import Topology

T = TypeVar("T")
_yield_gil = time.sleep  # sleep(0) releases the GIL and takes it back: a thread waiting for it runs
# sched_yield releases the GIL and the CPU: a runnable thread pinned to this CPU runs now.
_hand_off = getattr(os, "sched_yield", lambda: time.sleep(0))


def component_order(system: Topology) -> dict[str, int]:
    """Rank of each component: spouts first, then breadth-first along subscriptions
    (a cycle keeps its first-reached order), the acker last."""
    rank: dict[str, int] = {}
    frontier = [s.id for s in system.spouts()]
    while frontier:
        nxt: list[str] = []
        for comp in frontier:
            if comp in rank:
                continue
            rank[comp] = len(rank)
            for stream in system.components[comp].streams:
                nxt.extend(bolt for bolt, _ in system.subscribers(comp, stream) if bolt != ACKER)
        frontier = nxt
    for comp in sorted(system.components):  # unreachable bolts, then the acker
        if comp not in rank and comp != ACKER:
            rank[comp] = len(rank)
    rank[ACKER] = len(rank)
    return rank


def thread_groups(ordered: Sequence[T], threads: int) -> list[list[T]]:
    """Spread executors (in run order) over ``threads`` threads; 0 = one thread each."""
    if threads <= 0 or threads >= len(ordered):
        return [[e] for e in ordered]
    return [list(ordered[i::threads]) for i in range(threads)]


class ExecutorThread(threading.Thread):
    """Sets up its executors, then steps them in turn until the worker stops."""

    def __init__(self, link: WorkerLink, executors: list[Executor], doorbell: Doorbell,
                 index: int, outgoing: BatchQueue | None = None) -> None:
        """``outgoing``: the worker's transfer queue (None: nothing leaves the process)."""
        super().__init__(name=f"executors-{index}", daemon=True)
        self.link = link
        self.executors = executors
        self.doorbell = doorbell
        self.outgoing = outgoing
        self.hand_offs = 0  # turns that left batches for the transfer thread and yielded to it
        self.started = threading.Event()

    def run(self) -> None:
        link = self.link
        pin_thread(link.cpu)
        live = []
        for ex in self.executors:
            try:
                ex.setup()
            except BaseException as exc:  # a component that cannot start is a worker error
                ex.log.error("executor failed to start", error=repr(exc))
                link.report_error(ex.component, ex.task_ids[0], "".join(
                    traceback.format_exception(type(exc), exc, exc.__traceback__)))
                link.executor_died(ex.component, ex.executor_id, exc)
                continue
            live.append(ex)
        self.started.set()
        stop, bell, mono, out = link.stopping, self.doorbell, link.clock.monotonic, self.outgoing
        # Less than a full batch waiting: the worker is not saturated, a tuple's wait is its
        # latency. Full batches (a saturated worker) keep the old way: whoever takes the GIL
        # next takes several, which at the maximum rate costs fewer frames per tuple.
        small = int(link.topology.conf["topology.producer.batch.size"]) if out is not None else 0
        between = [check for ex in live for check in ex.between_steps]
        try:
            while not stop.is_set():
                wait = IDLE
                for ex in live:
                    try:
                        w = ex.step(mono())
                    except BaseException as exc:  # noqa: BLE001
                        # User callbacks are caught where they are called; this is whatever
                        # slipped past (a framework bug, SystemExit from user code): what
                        # the step held is lost (anchored tuples replay), the executor lives.
                        ex.user_error(ex.task_ids[0], exc, "step")
                        w = 0.0
                    if w < wait:
                        wait = w
                    if between:
                        for check in between:
                            check()
                if out is not None and 0 < len(out) < small and wait > 0.0 and bell.rung:
                    # The turn left tuples for other workers, fewer than a batch, and this
                    # thread would sleep but its doorbell rang meanwhile (acks came in, or
                    # its acker handed a verdict to its spout): give the transfer thread,
                    # pinned to this CPU and rung by those tuples, the CPU and the GIL so it
                    # sends them now. A wait that finds the doorbell rung gives up neither,
                    # so they waited for a turn that sleeps or for the interpreter's 5 ms
                    # switch interval. (A thread with more to do at once, wait 0, keeps
                    # sleep(0) below: a spout that is never dry is the throughput case.)
                    self.hand_offs += 1
                    _hand_off()
                if wait > 0.0:
                    bell.wait(wait)
                else:
                    bell.wait(0.0)  # forget rings: this thread looks at every queue now
                    _yield_gil(0)
        finally:
            for ex in live:
                try:
                    ex.teardown()
                except Exception as exc:
                    ex.log.error("executor teardown failed", error=repr(exc))
