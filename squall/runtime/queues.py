"""Executor receive queues and the doorbell that wakes the thread serving them.

An executor thread serves several queues (every executor it runs), so a producer does
not wake a queue's consumer directly: it rings the thread's doorbell. Both are built on
raw locks rather than threading.Condition, whose pure-Python wait/notify cost more than
the work in a small batch. Nothing here blocks a producer: a queue over its capacity
makes the spouts pause instead (see WorkerRuntime.overloaded), as in Storm 2, because a
producer that waits for a consumer on its own thread, or on a thread that waits for it,
never wakes up.
"""
from __future__ import annotations

import threading
from collections import deque
from typing import Any


class Doorbell:
    """Wakes one consumer thread when any of its queues receives something."""

    __slots__ = ("_lock", "_bell", "_sleeping", "_rung")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._bell = threading.Lock()  # held while nobody has woken the consumer
        self._bell.acquire()
        self._sleeping = False
        self._rung = False

    def ring(self) -> None:
        lock = self._lock
        lock.acquire()
        self._rung = True
        wake = self._sleeping
        self._sleeping = False
        lock.release()
        if wake:
            self._bell.release()

    @property
    def rung(self) -> bool:
        """Rung since the last wait (read without the lock: a hint), so the next wait
        returns at once."""
        return self._rung

    def wait(self, timeout: float) -> None:
        """Sleep up to ``timeout`` seconds unless rung since the last wait."""
        lock = self._lock
        lock.acquire()
        if self._rung or timeout <= 0:
            self._rung = False
            lock.release()
            return
        self._sleeping = True
        lock.release()
        woken = self._bell.acquire(True, timeout)
        lock.acquire()
        if not woken:
            if self._sleeping:
                self._sleeping = False
            else:
                # A ringer cleared the flag and is about to release: take that release
                # now so the bell stays balanced.
                lock.release()
                self._bell.acquire()
                lock.acquire()
        self._rung = False
        lock.release()


class BatchQueue:
    """Items are (key, list) batches; ``capacity`` and ``peak`` count list elements.

    Any number of producer threads, one consumer thread (the one ``doorbell`` wakes).
    """

    __slots__ = ("capacity", "_items", "_size", "_lock", "_doorbell", "_closed", "peak")

    def __init__(self, capacity: int, doorbell: Doorbell | None = None) -> None:
        self.capacity = capacity
        self._items: deque = deque()
        self._size = 0
        self._lock = threading.Lock()
        self._doorbell = doorbell or Doorbell()
        self._closed = False
        self.peak = 0  # the most tuples ever queued at once

    def put(self, item: Any, n: int) -> bool:
        """Enqueue and ring the consumer's doorbell. False if the queue was closed."""
        lock = self._lock
        lock.acquire()
        if self._closed:
            lock.release()
            return False
        self._items.append(item)
        size = self._size = self._size + n
        if size > self.peak:
            self.peak = size
        lock.release()
        self._doorbell.ring()
        return True

    def get_all(self) -> list:
        """Everything queued now (possibly nothing); never waits."""
        if not self._items:
            return []
        lock = self._lock
        lock.acquire()
        items = list(self._items)
        self._items.clear()
        self._size = 0
        lock.release()
        return items

    def get_some(self, limit: int) -> list:
        """The oldest batches, up to about ``limit`` tuples (at least one batch); the rest
        stays queued, counted in ``len`` (and so in backpressure and load)."""
        if self._size <= limit:
            return self.get_all()
        lock = self._lock
        lock.acquire()
        items, out, n = self._items, [], 0
        while items and n < limit:
            item = items.popleft()
            out.append(item)
            n += len(item[1])
        self._size -= n
        lock.release()
        return out

    def wait(self, timeout: float) -> list:
        """Everything queued, waiting up to ``timeout`` seconds for something to arrive."""
        items = self.get_all()
        if not items and timeout > 0 and not self._closed:
            self._doorbell.wait(timeout)
            items = self.get_all()
        return items

    def __len__(self) -> int:
        return self._size

    @property
    def doorbell(self) -> Doorbell:
        """The doorbell of the thread that serves this queue (shared by its other queues)."""
        return self._doorbell

    @property
    def full(self) -> bool:
        return self._size >= self.capacity

    @property
    def fill(self) -> float:
        return self._size / self.capacity

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self._doorbell.ring()
