"""The worker's way in: task messages from the receive thread, checked and put on their
executors' queues, with this worker's tasks raised into backpressure as their queues fill.

What fails a check is counted by cause (squall.runtime.drops) and the rest of the frame
still goes. A tuple whose value does not decode (a registered type's deserializer raised)
fails alone, as one that could not be encoded does (squall.runtime.refusals): its trees fail
with the reason, the next PREPARE barrier on its channel fails, and the rest of its batch
goes on. The receive thread waits only when a queue is past RECEIVE_HARD_LIMIT times its
bound, so memory stays bounded even with a peer that ignores backpressure.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from squall.model import executor_tasks, is_checkpointed
from squall.runtime import drops
from squall.runtime.affinity import pin_thread
from squall.runtime.drops import DropCounter
from squall.runtime.link import WorkerLink
from squall.runtime.queues import BatchQueue
from squall.runtime.refusals import Channels, RefusalLog, TreeFailures
from squall.runtime.serialization import SerializationError, TupleSerializer

# The receive thread never lets an executor's queue grow past this many times its bound:
# beyond it, it waits for the executor to catch up (the senders' sockets then fill and
# their spouts pause). Backpressure normally stops senders long before (at the high mark).
RECEIVE_HARD_LIMIT = 2
_FULL_POLL_SECS = 0.002
_FULL_WARN_SECS = 5.0


class Receiver:
    """What the worker's server connection calls with each decoded frame."""

    def __init__(self, queues: Mapping[int, BatchQueue], executor_ids: Iterable[tuple[int, int]],
                 serializer: TupleSerializer, drop_counter: DropCounter, link: WorkerLink, high: float,
                 set_bp: Callable[[frozenset[int]], None], stopping: threading.Event, cpu: int | None,
                 log: Any) -> None:
        self.queues = queues
        self.serializer = serializer
        self.drops = drop_counter
        self.link = link
        self._high = high  # a queue this full raises its tasks into backpressure
        self._set_bp = set_bp
        self.stopping = stopping
        self.cpu = cpu
        self.log = log
        self._receiver_pinned = False
        self._task_executor = {t: ex for ex in executor_ids for t in executor_tasks(ex)}
        self._drop_for = {ex: self._drop_callback(ex) for ex in set(self._task_executor.values())}
        # Only the receive thread uses these (Delivery has its own for the way out).
        self.failures = TreeFailures(tuple(link.topology.acker_tasks))
        self.channels = Channels(is_checkpointed(link.topology.system))
        self.refusals = RefusalLog(link.clock.monotonic)

    def receive(self, messages: list[tuple[int, bytes]]) -> None:
        """Called by the receive thread with each decoded frame's task messages. Every
        group is checked (squall.runtime.serialization); what fails is counted and the
        rest delivered."""
        if not self._receiver_pinned:  # the transport's thread runs Python here: same CPU
            self._receiver_pinned = True
            pin_thread(self.cpu)
        queues, loads = self.queues, self.serializer.loads
        for task, payload in messages:
            q = queues.get(task)
            if q is None:
                self.drops.add(drops.UNKNOWN_TASK, task=task)
                continue
            ex = self._task_executor[task]
            refused: dict[int, str] = {}
            try:
                tuples = loads(payload, task, self._drop_for[ex], refused)
                if refused or self.channels.broken:
                    tuples = self._sort_out(ex, task, tuples, refused)
            except SerializationError as exc:
                self.drops.add(drops.BAD_PAYLOAD, executor=ex, task=task, error=str(exc))
                continue
            except Exception as exc:  # noqa: BLE001 - a check we lack: the rest of the frame still goes
                self.drops.add(drops.INTERNAL_ERROR, executor=ex, task=task, error=repr(exc))
                continue
            if not tuples:
                continue
            if q._size > q.capacity * RECEIVE_HARD_LIMIT:
                self._wait_for_room(q, task)
            # Never block on the queue itself (it serves every task); raise backpressure.
            q.put((task, tuples), len(tuples))
            if q.fill >= self._high and task not in self.link.bp_tasks:
                self._set_bp(self.link.bp_tasks | set(executor_tasks(ex)))

    def _wait_for_room(self, q: BatchQueue, task: int) -> None:
        """Hold the receive thread while ``q`` is over its hard limit (a peer that ignores
        backpressure, or an executor stuck in user code): memory stays bounded."""
        started = time.monotonic()
        next_warn = started + _FULL_WARN_SECS
        while q._size > q.capacity * RECEIVE_HARD_LIMIT and not self.stopping.is_set():
            time.sleep(_FULL_POLL_SECS)
            now = time.monotonic()
            if now >= next_warn:
                next_warn = now + _FULL_WARN_SECS
                self.log.warning("receive waits for a full executor queue", task=task, queued=len(q),
                                 waited_secs=round(now - started, 1))

    def _sort_out(self, ex: tuple[int, int], task: int, tuples: list, refused: dict[int, str]) -> list:
        """Leave out the tuples that did not decode (failing their trees, with why) and the
        PREPARE barriers after them on their channels."""
        for i, reason in refused.items():
            src = tuples[i].source
            self.drops.add(drops.UNDECODABLE_VALUE, 1, ex, error=reason)
            n = self.refusals.note((src.component, src.stream, "", "undecodable"))
            if n is not None:
                self.link.report_error(src.component, src.task, f"SerializationError: {reason} "
                                       f"({n} tuple{'s' if n > 1 else ''} refused so far)")
        kept = self.channels.sort_out(task, tuples, refused, self.failures)
        for acker, message in self.failures.messages():
            self.link.deliver(acker, [message])
        return kept

    def _drop_callback(self, ex: tuple[int, int]) -> Callable[[str, int, str], None]:
        def drop(cause: str, n: int, detail: str) -> None:
            self.drops.add(cause, n, ex, error=detail)
        return drop

    def bad_frame(self, error: str, size: int) -> None:
        """The server connection's report of a frame it could not decode."""
        self.drops.add(drops.BAD_FRAME, error=error, frame_bytes=size)
