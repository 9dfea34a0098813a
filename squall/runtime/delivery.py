"""The worker's way out: a batch for a task goes to that task's queue here, or serialized
onto the worker transfer queue, which the transfer thread (squall.runtime.transfer) sends.

This is Storm's mk-transfer-fn (worker.clj). It never waits: a full queue makes the spouts
pause instead (WorkerRuntime.overloaded). A tuple that cannot be serialized fails alone
(squall.runtime.refusals): its trees fail with the reason, the rest of its batch goes.
With ``topology.testing.always.try.serialize`` a batch for a task of this worker is
serialized and decoded too, so a topology in one process receives what a cluster would
deliver and refuses what a cluster would refuse.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from squall.clock import SYSTEM_CLOCK, Clock
from squall.runtime.queues import BatchQueue
from squall.runtime.refusals import Channels, RefusalLog, TreeFailures
from squall.runtime.serialization import SerializationError, TupleSerializer


class Delivery:
    """Hands batches on, and fails the tuples that could not be put on the wire."""

    def __init__(self, queues: Mapping[int, BatchQueue], transfer_queue: BatchQueue, serializer: TupleSerializer,
                 max_payload: int, log: Any, report_error: Callable[[str, int, str], None],
                 ackers: tuple[int, ...] = (), always_serialize: bool = False, clock: Clock = SYSTEM_CLOCK,
                 checkpointed: bool = False) -> None:
        self.queues = queues
        self.transfer_queue = transfer_queue
        self.serializer = serializer
        self._max_payload = max_payload  # the frame limit less the frame's own bytes
        self.log = log
        self.report_error = report_error
        self.always_serialize = always_serialize
        self.failures = TreeFailures(tuple(ackers))
        self.channels = Channels(checkpointed)
        self.refusals = RefusalLog(clock.monotonic)
        self._refusing = threading.Lock()  # executor threads deliver at once; only refusals take it
        self.dropped_unserializable = 0  # tuples this worker could not put on the wire

    def deliver(self, task: int, tuples: list) -> None:
        """Hand a batch for ``task`` on: straight to a local queue, else to the transfer
        queue. Never waits: a full queue makes the spouts pause (``overloaded``)."""
        q = self.queues.get(task)
        if q is not None and not self.always_serialize:
            q.put((task, tuples), len(tuples))
            return
        if self.channels.broken:  # a PREPARE barrier after a refused tuple must not go
            tuples = self._sort_out(task, tuples, {})
            if not tuples:
                return
        try:
            payload = self.serializer.dumps(tuples)
        except SerializationError as exc:
            tuples, encoded = self._without_unsendable(task, tuples, exc)
            if encoded is None:
                return
            payload = encoded
        if q is not None:
            self._deliver_decoded(q, task, payload, len(tuples))
            return
        if len(payload) > self._max_payload:
            self._deliver_oversize(task, tuples, len(payload))
            return
        self.transfer_queue.put((task, payload), len(tuples))

    def queued(self, task: int) -> int:
        """Tuples queued ahead of a batch for ``task`` now: at its executor here, else at
        the transfer thread (Outbox.flush_due sends at once when this is 0)."""
        q = self.queues.get(task)
        return (self.transfer_queue if q is None else q)._size

    def _without_unsendable(self, task: int, tuples: list, exc: Exception) -> tuple[list, bytes | None]:
        """The slow path: refuse each tuple that cannot be serialized, encode the rest."""
        found = self.serializer.unsendable(tuples)
        if not found:  # the batch failed but no tuple alone does (a serializer that fails at random)
            found = [(i, f"SerializationError: {exc}", (t.source.component, t.source.stream, "", ""))
                     for i, t in enumerate(tuples)]
        refused = {}
        for i, reason, cause in found:
            refused[i] = reason
            self._count(tuples[i].source, cause, reason)
        tuples = self._sort_out(task, tuples, refused)
        if not tuples:
            return tuples, None
        try:
            return tuples, self.serializer.dumps(tuples)
        except SerializationError as again:  # what encoded alone does not encode together
            reason = f"SerializationError: {again}"
            for t in tuples:
                self._count(t.source, (t.source.component, t.source.stream, "", ""), reason)
            self._sort_out(task, tuples, dict.fromkeys(range(len(tuples)), reason))
            return [], None

    def _sort_out(self, task: int, tuples: list, refused: dict[int, str]) -> list:
        with self._refusing:
            kept = self.channels.sort_out(task, tuples, refused, self.failures)
            messages = self.failures.messages()
        for acker, message in messages:
            self.deliver(acker, [message])
        return kept

    def _count(self, src: Any, cause: tuple[str, ...], reason: str) -> None:
        with self._refusing:
            self.dropped_unserializable += 1
            n = self.refusals.note(cause)
        if n is not None:
            self.log.error("tuple refused: it cannot cross to another worker", component=src.component,
                           task=src.task, stream=src.stream, field=cause[2], type=cause[3], refused=n, error=reason)
            self.report_error(src.component, src.task,
                              f"SerializationError: {reason} ({n} tuple{'s' if n > 1 else ''} refused so far)")

    def _deliver_decoded(self, q: BatchQueue, task: int, payload: bytes, n: int) -> None:
        """``always_serialize``: a local task gets the batch as a remote one would (a value
        that does not decode fails its own tuple, as the receive thread does it)."""
        refused: dict[int, str] = {}
        try:
            tuples = self.serializer.loads(payload, task, None, refused)
        except SerializationError as exc:  # not one value's failure: the batch cannot be read
            self.dropped_unserializable += n
            self.log.error("tuples could not be decoded", task=task, error=str(exc), tuples=n)
            return
        if refused:
            for i, reason in refused.items():
                src = tuples[i].source
                self._count(src, (src.component, src.stream, "", "undecodable"), reason)
            tuples = self._sort_out(task, tuples, refused)
        if tuples:
            q.put((task, tuples), len(tuples))

    def _deliver_oversize(self, task: int, tuples: list, size: int) -> None:
        """A batch over the frame limit goes as smaller batches; one tuple over it cannot go."""
        if len(tuples) > 1:
            half = len(tuples) // 2
            self.deliver(task, tuples[:half])
            self.deliver(task, tuples[half:])
            return
        src = tuples[0].source
        reason = (f"component {src.component!r} stream {src.stream!r}: a tuple of {size} bytes is over "
                  f"zmq.max.message.bytes ({self._max_payload} bytes of payload)")
        self._count(src, (src.component, src.stream, "", "oversize"), reason)
        self._sort_out(task, tuples, {0: reason})
