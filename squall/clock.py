"""Time as squall reads it: one Clock for daemons, the runtime and windows.

Decisions about time (message timeouts, tick tuples, processing-time windows, checkpoint
intervals, daemons' timers) read a :class:`Clock`, so that tests can drive them with a
:class:`FakeClock` instead of sleeping. Measurements (how long a batch took) and waits on
I/O use the real clocks. This module imports nothing of squall: every layer may use it.
"""
from __future__ import annotations

import threading
import time as _time
from typing import Protocol


class Clock(Protocol):
    """Wall time (for records other hosts or processes read, and window bounds) and
    monotonic time (for deadlines and durations within one process)."""

    def time(self) -> float: ...

    def monotonic(self) -> float: ...


class SystemClock:
    """The real clocks. The methods are the ``time`` module's own functions, so reading
    ``SYSTEM_CLOCK.monotonic()`` costs no more than ``time.monotonic()``."""

    time = staticmethod(_time.time)
    monotonic = staticmethod(_time.monotonic)


SYSTEM_CLOCK: Clock = SystemClock()


class FakeClock:
    """A clock that moves only when told to (tests): ``advance(secs)``. Wall and
    monotonic time are the same number."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self._now = float(start)
        self._lock = threading.Lock()

    def time(self) -> float:
        return self._now

    def monotonic(self) -> float:
        return self._now

    def advance(self, secs: float) -> float:
        with self._lock:
            self._now += secs
            return self._now
