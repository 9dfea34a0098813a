"""What nimbus may conclude from silence: plain decisions, timed by an injected clock.

Nimbus judges workers and supervisors by what it hears through ZooKeeper. Right after it
(re)connects it has heard nothing for a while, and cannot tell a dead worker from one whose
beats it could not read: :class:`ReconnectGrace` holds every reassignment for
``nimbus.task.timeout.secs`` after each (re)connection. A supervisor stopped cleanly leaves a
node marked ``away`` that keeps its slots for ``supervisor.restart.grace.secs``
(:func:`supervisor_alive`), so a restart adopts its workers instead of losing them.
"""
from __future__ import annotations

from squall.daemons.timers import SYSTEM_CLOCK, Clock


class ReconnectGrace:
    """``active()`` for ``period`` seconds after each change of the connection count."""

    def __init__(self, period: float, clock: Clock = SYSTEM_CLOCK) -> None:
        self.period = float(period)
        self._clock = clock
        self._seen: int | None = None
        self._until = float("-inf")

    def observe(self, connections: int) -> bool:
        """Feed the client's connection count; True when it has changed (a new grace)."""
        if connections == self._seen:
            return False
        self._seen = connections
        self._until = self._clock.monotonic() + self.period
        return True

    def active(self) -> bool:
        return self._clock.monotonic() < self._until

    def left(self) -> float:
        return max(0.0, self._until - self._clock.monotonic())


def supervisor_alive(away: bool, silent_secs: float, supervisor_timeout: float,
                     restart_grace: float) -> bool:
    """A registered supervisor counts as alive while its node was refreshed within
    ``supervisor_timeout``; one that stopped cleanly (``away``) keeps its slots for
    ``restart_grace`` after nimbus saw it leave."""
    return silent_secs <= (restart_grace if away else supervisor_timeout)
