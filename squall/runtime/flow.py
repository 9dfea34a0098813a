"""Backpressure between workers as plain state: what peers report, and when it goes stale.

Every worker tells every other worker of its topology, over the transport's control path,
which of its tasks are under backpressure: at once when that changes, and again every
RESEND_SECS. A report not renewed within STALE_SECS no longer counts, so a peer that died
under backpressure cannot hold the spouts of the topology forever.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

RESEND_SECS = 1.0
STALE_SECS = 5.0


class RemoteBackpressure:
    """Tasks of other workers under backpressure, with the time each report arrived."""

    def __init__(self, own_tasks: Iterable[int], topology_tasks: Iterable[int]) -> None:
        self._own = frozenset(own_tasks)
        self._known = frozenset(topology_tasks)
        self._since: dict[int, float] = {}

    def foreign(self, status: Mapping[int, object]) -> bool:
        """Does a peer's report name only tasks of the topology that are not ours?"""
        own, known = self._own, self._known
        return all(task not in own and task in known for task in status)

    def report(self, status: Mapping[int, bool], now: float) -> set[int]:
        """Apply one peer's {task: under backpressure} (checked with ``foreign``); returns
        the tasks now under backpressure."""
        for task, on in status.items():
            if on:
                self._since[task] = now
            else:
                self._since.pop(task, None)
        return set(self._since)

    def expire(self, now: float) -> set[int]:
        """Forget reports older than STALE_SECS; the tasks still under backpressure."""
        for task in [t for t, at in self._since.items() if now - at > STALE_SECS]:
            del self._since[task]
        return set(self._since)
