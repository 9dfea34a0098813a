"""A bounded stop for every daemon: once asked to stop, the process ends within a deadline.

An orderly shutdown talks to ZooKeeper (unregister, close the session) and joins threads;
with ZooKeeper unreachable either may wait. :class:`StopDeadline` runs a thread that, once
``request()`` is called (safe from a signal handler: it writes to a pipe), first calls
``on_request`` (e.g. close a disconnected ZooKeeper session so that calls stuck in it fail
now), then ends the process with ``exit_code()`` if ``done()`` has not been called within
``secs``.
"""
from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable

import structlog

from squall.daemons.timers import Waker

log = structlog.get_logger("squall.shutdown")


class StopDeadline:
    """Ends the process ``secs`` after a stop request unless the shutdown finished."""

    def __init__(self, secs: float, exit_code: Callable[[], int],
                 on_request: Callable[[], None] | None = None, name: str = "daemon") -> None:
        self.secs = float(secs)
        self._exit_code = exit_code
        self._on_request = on_request
        self._name = name
        self._waker = Waker()
        self._requested = False
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stop-deadline", daemon=True)

    def start(self) -> StopDeadline:
        self._thread.start()
        return self

    def request(self) -> None:
        """A stop was asked for (signal-safe)."""
        self._requested = True
        self._waker.wake()

    def done(self) -> None:
        """The orderly shutdown finished: the process ends on its own."""
        self._done.set()
        self._waker.wake()

    def _run(self) -> None:
        while not self._requested and not self._done.is_set():
            self._waker.wait(3600.0)
        if self._done.is_set():
            return
        if self._on_request is not None:
            try:
                self._on_request()
            except Exception as exc:  # noqa: BLE001 - the deadline must still hold
                log.warning("stop hook failed", daemon=self._name, error=repr(exc))
        if self._done.wait(self.secs):
            return
        code = self._exit_code()
        log.error("shutdown did not finish in time; exiting", daemon=self._name,
                  deadline_secs=self.secs, exit_code=code)
        flush_and_exit(code)


def flush_and_exit(code: int) -> None:
    """Flush stdout/stderr and end the process now (library threads cannot hold it up)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001
            pass
    os._exit(code)
