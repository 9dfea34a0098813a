"""Time for the daemons: one clock, halting timers, deadline queues and a loop waker.

Every daemon reads time through a :class:`Clock` (``SYSTEM_CLOCK`` in production) so that
its decisions about time can be tested with a :class:`FakeClock` and no sleeping. The clock
lives in :mod:`squall.clock` (the runtime and windows read the same one) and is re-exported
here. Nothing else under ``daemons/`` calls ``time.time()``, ``time.monotonic()`` or
``time.sleep()`` (``tests/unit/daemons/test_timers.py`` checks).

* :class:`HaltingTimer` runs a callback periodically on its own thread; a callback that
  raises halts its owner (Storm's ``mk-halting-timer``): a half-alive daemon is worse
  than a dead one.
* :class:`DeadlineQueue` holds keyed one-shot deadlines (nimbus's kill and rebalance
  delays), earliest first.
* :class:`Every` is a periodic deadline a loop polls (the supervisor's refreshes).
* :class:`Waker` wakes a loop from any thread or a signal handler.
"""
from __future__ import annotations

import heapq
import itertools
import os
import select
import threading
import time as _time
from collections.abc import Callable, Hashable

import structlog

from squall.clock import SYSTEM_CLOCK, Clock, FakeClock, SystemClock

__all__ = ["SYSTEM_CLOCK", "Clock", "DeadlineQueue", "Every", "FakeClock", "HaltingTimer", "SystemClock",
           "Waker", "sleep"]

log = structlog.get_logger("squall.timers")


def sleep(secs: float) -> None:
    """Block the calling thread (real time; the only sleep daemons use)."""
    _time.sleep(max(0.0, secs))


class HaltingTimer:
    """Runs ``fn`` every ``period`` seconds on its own thread; ``trigger()`` runs it soon.

    If ``fn`` raises, the error is logged, ``on_halt(name, exc)`` is called and the timer
    stops: the owner ends the process. While ``quiet()`` is true (the owner is already
    stopping) a failure is only logged at info level.
    """

    def __init__(self, name: str, period: float, fn: Callable[[], None],
                 on_halt: Callable[[str, BaseException], None],
                 quiet: Callable[[], bool] = lambda: False, clock: Clock = SYSTEM_CLOCK,
                 owner: str = "daemon") -> None:
        self.owner = owner
        self.name, self.period, self._fn, self._on_halt = name, max(0.01, float(period)), fn, on_halt
        self._quiet = quiet
        self._clock = clock
        self._wake = threading.Event()
        self._cancelled = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"timer-{name}", daemon=True)
        self.runs = 0

    def start(self) -> HaltingTimer:
        self._thread.start()
        return self

    def trigger(self) -> None:
        """Run the callback as soon as the timer thread is free (a watch's fast path)."""
        self._wake.set()

    def cancel(self, timeout: float = 10.0) -> None:
        """Stop the timer and wait (at most ``timeout``) for a callback in progress."""
        self._cancelled.set()
        self._wake.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        next_at = self._clock.monotonic() + self.period
        while True:
            triggered = self._wake.wait(max(0.0, next_at - self._clock.monotonic()))
            if self._cancelled.is_set():
                return
            if not triggered and self._clock.monotonic() < next_at:
                continue  # an injected clock that has not reached the deadline yet
            self._wake.clear()
            try:
                self._fn()
            except BaseException as exc:  # noqa: BLE001 - any failure halts the owner
                if self._cancelled.is_set() or self._quiet():
                    log.info("timer callback failed while stopping", timer=self.name, error=repr(exc))
                else:
                    log.exception(f"timer callback raised; the {self.owner} halts", timer=self.name)
                if not self._cancelled.is_set():
                    self._on_halt(self.name, exc)
                return
            self.runs += 1
            next_at = self._clock.monotonic() + self.period


class DeadlineQueue:
    """Keyed one-shot deadlines, earliest first; at most one entry per key. Not
    thread-safe: the owner holds its own lock."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self._clock = clock
        self._heap: list[tuple[float, int, Hashable]] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def __contains__(self, key: Hashable) -> bool:
        return any(k == key for _, _, k in self._heap)

    def schedule(self, key: Hashable, delay: float) -> None:
        """Make ``key`` due ``delay`` seconds from now (replacing an earlier entry)."""
        self.cancel(key)
        heapq.heappush(self._heap, (self._clock.monotonic() + delay, next(self._seq), key))

    def cancel(self, key: Hashable) -> bool:
        kept = [entry for entry in self._heap if entry[2] != key]
        if len(kept) == len(self._heap):
            return False
        self._heap = kept
        heapq.heapify(self._heap)
        return True

    def clear(self) -> None:
        self._heap.clear()

    def pop_due(self) -> Hashable | None:
        """The earliest key whose deadline has passed (removed), or None."""
        if self._heap and self._heap[0][0] <= self._clock.monotonic():
            return heapq.heappop(self._heap)[2]
        return None

    def wait_secs(self, longest: float) -> float:
        """Seconds until the earliest deadline, at most ``longest``."""
        if not self._heap:
            return longest
        return max(0.0, min(longest, self._heap[0][0] - self._clock.monotonic()))


class Every:
    """A periodic deadline a loop polls: ``due()`` is true once per ``period``."""

    def __init__(self, period: float, clock: Clock = SYSTEM_CLOCK) -> None:
        self.period = float(period)
        self._clock = clock
        self.next_at = clock.monotonic() + self.period

    def due(self) -> bool:
        """True (and the next deadline set) once the period has passed."""
        now = self._clock.monotonic()
        if now < self.next_at:
            return False
        self.next_at = now + self.period
        return True

    def left(self) -> float:
        return max(0.0, self.next_at - self._clock.monotonic())


class Waker:
    """Wakes a loop; a self-pipe, so it is safe from signal handlers (a
    ``threading.Event`` is not: its lock may be held by the very thread the signal hits)."""

    def __init__(self) -> None:
        self._r, self._w = os.pipe()
        for fd in (self._r, self._w):
            os.set_blocking(fd, False)

    def wake(self) -> None:
        try:
            os.write(self._w, b"x")
        except (BlockingIOError, OSError):
            pass  # the pipe is full (a wake-up is pending anyway) or closed

    def wait(self, timeout: float) -> bool:
        """Return on a wake-up (True) or after ``timeout`` seconds (False); pending
        wake-ups are consumed."""
        ready, _, _ = select.select([self._r], [], [], max(0.0, timeout))
        if ready:
            try:
                while os.read(self._r, 4096):
                    pass
            except BlockingIOError:
                pass
        return bool(ready)

    def close(self) -> None:
        for fd in (self._r, self._w):
            try:
                os.close(fd)
            except OSError:
                pass
