"""Counting what a worker refuses from the wire: per cause, per executor, logged at a bounded rate.

Everything that arrives from another process is checked before use; what fails a check is
dropped here with a named cause (never silently). Anchored tuples dropped this way time
out and their spouts replay them. The counters travel in the worker beat, so
``squall status`` shows them.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

# Causes, as they appear in stats and logs.
BAD_FRAME = "bad_frame"            # not a squall frame: version, kind, msgpack, shape, size
UNKNOWN_TASK = "unknown_task"      # a task message for a task this worker does not run
BAD_PAYLOAD = "bad_payload"        # a tuple payload that does not decode to a list of groups
BAD_GROUP = "bad_group"            # a group of the wrong shape, or tuples of the wrong arity
UNKNOWN_SOURCE = "unknown_source"  # a group from a task or stream the topology does not have
NOT_SUBSCRIBED = "not_subscribed"  # a stream the target task does not subscribe to
BAD_IDS = "bad_ids"                # message ids that are not a map of 64-bit unsigned ints
ACKER_STREAM = "acker_stream"      # acker traffic from a task that may not send it, or malformed
BAD_CONTROL = "bad_control"        # a control frame with a body of the wrong shape
INTERNAL_ERROR = "internal_error"  # a payload that made decoding fail unexpectedly (a bug of ours)
LEDGER_FULL = "ledger_full"        # a new tuple tree the acker's bounded ledger had no room for: it fails
PENDING_FULL = "pending_full"      # a tuple a spout emitted while its bounded pending map was full: it fails
UNDECODABLE_VALUE = "undecodable_value"  # a tuple whose value did not decode (a deserializer raised): it fails

LOG_EVERY_SECS = 10.0


class DropCounter:
    """Thread-safe counts by (executor or None, cause); one warning per cause per
    LOG_EVERY_SECS, carrying how many were dropped since the last one."""

    def __init__(self, warn: Callable[..., Any], clock: Callable[[], float] = time.monotonic) -> None:
        self._warn, self._clock = warn, clock
        self._lock = threading.Lock()
        self._counts: dict[tuple[tuple[int, int] | None, str], int] = {}
        self._last_log: dict[str, float] = {}
        self._since_log: dict[str, int] = {}

    def add(self, cause: str, n: int = 1, executor: tuple[int, int] | None = None, **detail: Any) -> None:
        now = self._clock()
        with self._lock:
            key = (executor, cause)
            self._counts[key] = self._counts.get(key, 0) + n
            since = self._since_log[cause] = self._since_log.get(cause, 0) + n
            last = self._last_log.get(cause)
            if last is not None and now - last < LOG_EVERY_SECS:
                return
            self._last_log[cause] = now
            self._since_log[cause] = 0
        self._warn("input dropped", cause=cause, dropped=since, **detail)

    def by_cause(self, executor: tuple[int, int] | None = None, *, every: bool = False) -> dict[str, int]:
        """Counts of one executor (None: drops not charged to any executor), or of all."""
        with self._lock:
            items = list(self._counts.items())
        out: dict[str, int] = {}
        for (ex, cause), n in items:
            if every or ex == executor:
                out[cause] = out.get(cause, 0) + n
        return out

    def total(self) -> int:
        with self._lock:
            return sum(self._counts.values())
