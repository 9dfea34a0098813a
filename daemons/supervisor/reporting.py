"""What a supervisor puts in its report to nimbus, and when it sends it: plain decisions.

The reporter (``reporter.py``) reads the files its workers leave (``heartbeat.json``,
``stats.json``), turns each into a beat here and sends one bounded report per
``supervisor.heartbeat.frequency.secs`` (``squall.daemons.reports``): the beat, the
executors' counters (nimbus's rates) and the stats as JSON text. Those files are written by
user code's process, so they are hostile input: the topology and port come from the
supervisor's own record of the launch, the executors are those the worker was launched with
(a worker cannot claim another's), and its stats were read as typed records (only what has
their documented shape is sent on: ``squall.runtime.stats``).

While nimbus does not answer, :class:`RetrySchedule` tries again after 0.5, 1, 2 ... seconds,
never waiting longer than one interval, with jitter so that supervisors cut off together do
not come back together; each attempt sends a report built then, so only the newest is ever
kept.
"""
from __future__ import annotations

import json
import random
from collections.abc import Iterable

from squall.daemons.local_state import LocalHeartbeat, StatsFile
from squall.daemons.reports import ReportedBeat

FIRST_RETRY_SECS = 0.5
JITTER = 0.1  # +-10% on every wait


def worker_beat(node: str, topology_id: str, port: int, launched: Iterable[tuple[int, int]],
                heartbeat: LocalHeartbeat | None, stats: StatsFile | None,
                launch_time: float) -> ReportedBeat | None:
    """The beat of one launched worker; None before its first heartbeat: nimbus gives a new
    worker ``nimbus.task.launch.secs``."""
    if heartbeat is None:
        return None
    executors = sorted(set(launched) & set(heartbeat.executors or ()))
    uptime = stats.uptime if stats is not None else max(0.0, heartbeat.time - launch_time)
    if stats is None:
        return ReportedBeat(topology_id, node, port, heartbeat.time, executors, uptime)
    wire = stats.stats.to_dict()
    text = json.dumps(wire, separators=(",", ":")) if wire else ""
    return ReportedBeat(topology_id, node, port, heartbeat.time, executors, uptime, stats.stats.time,
                        stats.stats.counters(executors), text)


class RetrySchedule:
    """When the next report is due: every ``interval`` while nimbus answers; after failures,
    sooner (0.5 s, doubling, at most one interval); each wait jittered."""

    def __init__(self, interval: float, rng: random.Random | None = None) -> None:
        self.interval = float(interval)
        self.failures = 0
        self._rng = rng or random.Random()
        self.due_at = 0.0  # the first report goes at once

    def due(self, now: float) -> bool:
        return now >= self.due_at

    def wait(self, now: float) -> float:
        return max(0.0, self.due_at - now)

    def sent(self, now: float) -> None:
        self.failures = 0
        self.due_at = now + self._jitter(self.interval)

    def failed(self, now: float) -> float:
        """Note a failed attempt; the seconds until the next one."""
        self.failures += 1
        delay = min(self.interval, FIRST_RETRY_SECS * 2 ** (self.failures - 1))
        delay = self._jitter(delay)
        self.due_at = now + delay
        return delay

    def _jitter(self, secs: float) -> float:
        return secs * (1.0 + self._rng.uniform(-JITTER, JITTER))
