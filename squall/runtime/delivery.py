"""The worker's way out: a batch for a task goes to that task's queue here, or serialized
onto the worker transfer queue, which the transfer thread (squall.runtime.transfer) sends.

This is Storm's mk-transfer-fn (worker.clj). It never waits: a full queue makes the spouts
pause instead (WorkerRuntime.overloaded).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from squall.runtime.queues import BatchQueue
from squall.runtime.serialization import SerializationError, TupleSerializer


class Delivery:
    """Hands batches on, and counts the tuples that could not be put on the wire."""

    def __init__(self, queues: Mapping[int, BatchQueue], transfer_queue: BatchQueue, serializer: TupleSerializer,
                 max_payload: int, log: Any, report_error: Callable[[str, int, str], None]) -> None:
        self.queues = queues
        self.transfer_queue = transfer_queue
        self.serializer = serializer
        self._max_payload = max_payload  # the frame limit less the frame's own bytes
        self.log = log
        self.report_error = report_error
        self.dropped_unserializable = 0  # tuples this worker could not put on the wire

    def deliver(self, task: int, tuples: list) -> None:
        """Hand a batch for ``task`` on: straight to a local queue, else to the transfer
        queue. Never waits: a full queue makes the spouts pause (``overloaded``)."""
        q = self.queues.get(task)
        if q is not None:
            q.put((task, tuples), len(tuples))
            return
        try:
            payload = self.serializer.dumps(tuples)
        except SerializationError as exc:
            # Reported against the emitting component; anchored tuples then time out and
            # their spouts replay them. Nothing crosses the wire half-encoded.
            self.dropped_unserializable += len(tuples)
            src = tuples[0].source
            self.log.error("tuples could not be serialized", component=src.component, task=src.task,
                           stream=src.stream, error=str(exc), tuples=len(tuples))
            self.report_error(src.component, src.task, f"SerializationError: {exc}")
            return
        if len(payload) > self._max_payload:
            self._deliver_oversize(task, tuples, len(payload))
            return
        self.transfer_queue.put((task, payload), len(tuples))

    def _deliver_oversize(self, task: int, tuples: list, size: int) -> None:
        """A batch over the frame limit goes as smaller batches; one tuple over it cannot go."""
        if len(tuples) > 1:
            half = len(tuples) // 2
            self.deliver(task, tuples[:half])
            self.deliver(task, tuples[half:])
            return
        self.dropped_unserializable += 1
        src = tuples[0].source
        text = f"a tuple of {size} bytes is over zmq.max.message.bytes"
        self.log.error("tuple too large to send", component=src.component, task=src.task, bytes=size)
        self.report_error(src.component, src.task, f"SerializationError: {text}")
