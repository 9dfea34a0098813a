"""When to read a failed record again (Storm's KafkaSpoutRetryExponentialBackoff), plain code.

The n-th failure of an offset schedules its retry ``initial * multiplier ** (n - 1)``
seconds later, never more than ``max_delay``. After ``max_count`` failures (None: no
limit) the record is given up: the spout reports it and commits past it. Entries are kept
per (topic, partition, offset) only while a retry is scheduled or counted.
"""
from __future__ import annotations

import heapq
from collections.abc import Hashable
from typing import Generic, TypeVar

P = TypeVar("P", bound=Hashable)  # what names a partition: the spout's (topic, partition)


class RetrySchedule(Generic[P]):
    def __init__(self, initial: float, multiplier: float, max_delay: float, max_count: int | None) -> None:
        if initial < 0 or multiplier < 1 or max_delay < initial:
            raise ValueError("retry delays need 0 <= initial <= max_delay and multiplier >= 1")
        if max_count is not None and max_count < 0:
            raise ValueError("retry max count must be >= 0 (or None for no limit)")
        self.initial, self.multiplier, self.max_delay, self.max_count = initial, multiplier, max_delay, max_count
        self.failures: dict[tuple[P, int], int] = {}   # (partition, offset) -> failures so far
        self._due: dict[tuple[P, int], float] = {}     # scheduled: (partition, offset) -> when
        self._heap: list[tuple[float, P, int]] = []

    def delay(self, failures: int) -> float:
        """Seconds before the retry that follows failure number ``failures`` (1-based)."""
        d = self.initial * self.multiplier ** min(failures - 1, 64)
        return min(d, self.max_delay)

    def failed(self, partition: P, offset: int, now: float) -> bool:
        """Count a failure; True and a retry scheduled, or False when the record is given up
        (``max_count`` retries used), which forgets it."""
        key = (partition, offset)
        n = self.failures.get(key, 0) + 1
        if self.max_count is not None and n > self.max_count:
            self.forget(partition, offset)
            return False
        self.failures[key] = n
        when = now + self.delay(n)
        self._due[key] = when
        heapq.heappush(self._heap, (when, partition, offset))
        return True

    def schedule(self, partition: P, offset: int, when: float) -> None:
        """Schedule a read of ``offset`` at ``when`` without counting a failure."""
        self._due[(partition, offset)] = when
        heapq.heappush(self._heap, (when, partition, offset))

    def is_scheduled(self, partition: P, offset: int) -> bool:
        return (partition, offset) in self._due

    def is_ready(self, partition: P, offset: int, now: float) -> bool:
        when = self._due.get((partition, offset))
        return when is not None and when <= now

    def next_due(self) -> float | None:
        heap, due = self._heap, self._due
        while heap and due.get((heap[0][1], heap[0][2])) != heap[0][0]:
            heapq.heappop(heap)  # a stale entry: retried, forgotten or rescheduled
        return heap[0][0] if heap else None

    def ready(self, now: float) -> dict[P, int]:
        """Partitions with a retry due, and the lowest such offset of each (where to seek).
        The entries stay scheduled until ``retried`` or ``forget``."""
        out: dict[P, int] = {}
        for (partition, offset), when in self._due.items():
            if when <= now and (partition not in out or offset < out[partition]):
                out[partition] = offset
        return out

    def retried(self, partition: P, offset: int) -> None:
        """The record was emitted again: no longer scheduled (its count is kept)."""
        self._due.pop((partition, offset), None)

    def forget(self, partition: P, offset: int) -> None:
        """The record is done (acked or given up)."""
        key = (partition, offset)
        self._due.pop(key, None)
        self.failures.pop(key, None)

    def forget_partition(self, partition: P) -> None:
        for key in [k for k in (*self.failures, *self._due) if k[0] == partition]:
            self._due.pop(key, None)
            self.failures.pop(key, None)

    def __len__(self) -> int:
        return len(self._due)
