"""A bounded queue of batches: one lock round trip per batch, not per tuple.

Built on raw locks rather than threading.Condition, whose pure-Python wait/notify cost
more than the work in a small batch: a consumer that finds work never touches a
condition, and a producer wakes the consumer only when it is actually asleep.
"""
from __future__ import annotations

import threading
from collections import deque
from typing import Any


class BatchQueue:
    """Items are (key, list) batches; the bound counts list elements (tuples).

    ``put(block=False)`` always succeeds (overflow), for traffic that must never wait:
    acker messages, whose volume is bounded by the spouts' pending limits, and batches
    arriving from the network, where the receive thread must keep serving other tasks.
    One consumer thread; any number of producers.
    """

    __slots__ = ("capacity", "_items", "_size", "_lock", "_wake", "_sleeping", "_space",
                 "_space_waiters", "_closed", "peak")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._items: deque = deque()
        self._size = 0
        self._lock = threading.Lock()
        self._wake = threading.Lock()   # held while nobody has woken the consumer
        self._wake.acquire()
        self._sleeping = False
        self._space = threading.Condition(self._lock)
        self._space_waiters = 0
        self._closed = False
        self.peak = 0  # the most tuples ever queued at once

    def put(self, item: Any, n: int, block: bool = True) -> bool:
        """Enqueue; with ``block`` wait while full. False if the queue was closed."""
        lock = self._lock
        lock.acquire()
        try:
            if block and self._size >= self.capacity:
                self._space_waiters += 1
                try:
                    while self._size >= self.capacity and not self._closed:
                        self._space.wait(0.05)
                finally:
                    self._space_waiters -= 1
            if self._closed:
                return False
            self._items.append(item)
            self._size += n
            if self._size > self.peak:
                self.peak = self._size
            wake = self._sleeping
            self._sleeping = False
        finally:
            lock.release()
        if wake:
            self._wake.release()
        return True

    def get_all(self, timeout: float | None) -> list:
        """Everything queued, waiting up to ``timeout`` seconds for something to arrive."""
        lock = self._lock
        lock.acquire()
        if not self._items:
            if not timeout or self._closed:
                lock.release()
                return []
            self._sleeping = True
            lock.release()
            woken = self._wake.acquire(True, timeout)
            lock.acquire()
            if not woken:
                if self._sleeping:
                    self._sleeping = False
                else:
                    # A producer cleared the flag and is about to release: take that
                    # release now so the wake lock stays balanced.
                    lock.release()
                    self._wake.acquire()
                    lock.acquire()
            if not self._items:
                lock.release()
                return []
        items = list(self._items)
        self._items.clear()
        self._size = 0
        if self._space_waiters:
            self._space.notify_all()
        lock.release()
        return items

    def __len__(self) -> int:
        return self._size

    @property
    def fill(self) -> float:
        return self._size / self.capacity

    def close(self) -> None:
        with self._lock:
            self._closed = True
            wake = self._sleeping
            self._sleeping = False
            self._space.notify_all()
        if wake:
            self._wake.release()
