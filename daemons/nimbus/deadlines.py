"""The leader's pending actions: removing a killed topology, rebalancing one, sweeping what
workers wrote after a removal. Each has a deadline; adding one wakes the leader's loop."""
from __future__ import annotations

import threading

from squall.daemons.timers import Clock, DeadlineQueue

REMOVE, REBALANCE, SWEEP = "remove", "rebalance", "sweep"
# After a topology is removed, its ZooKeeper state is swept once more this much later:
# workers that had not yet noticed the removal may have written a last beat or error.
SWEEP_DELAY_SECS = 30.0


class LeaderDeadlines:
    """Keyed by (action, topology id); not thread-safe: callers hold nimbus's lock.
    ``wake`` is the leader loop's event (set too when the supervisors change)."""

    def __init__(self, clock: Clock) -> None:
        self._queue = DeadlineQueue(clock)
        self.wake = threading.Event()

    def schedule(self, action: str, topology_id: str, delay: float) -> None:
        self._queue.schedule((action, topology_id), delay)
        self.wake.set()

    def cancel(self, action: str, topology_id: str) -> None:
        self._queue.cancel((action, topology_id))

    def pending(self, action: str, topology_id: str) -> bool:
        return (action, topology_id) in self._queue

    def pop_due(self) -> tuple[str, str] | None:
        return self._queue.pop_due()  # type: ignore[return-value]

    def wait_secs(self, longest: float) -> float:
        return self._queue.wait_secs(longest)

    def clear(self) -> None:
        self._queue.clear()
