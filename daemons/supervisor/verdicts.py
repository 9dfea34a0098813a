"""What the supervisor concludes about one worker from what it saw; plain code, no I/O.

The slot state machine (``slot.step``) asks these: is the heartbeat good enough, does the
worker use more memory than ``worker.memory.max.mb``, or hold more connections to ZooKeeper
than ``worker.zookeeper.max.connections``, did it finish starting in time, and how long to
hold the relaunch of a worker that keeps dying. A verdict that ends a worker is
reported to the topology's errors (``Problem``), where ``squall status`` and the web UI
show it.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

ExecutorId = tuple[int, int]

# Storm's SYSTEM_EXECUTOR_ID: a worker may report it; it is never in an assignment.
SYSTEM_EXECUTOR: ExecutorId = (-1, -1)
# A worker dying this soon after its launch counts as a crash; crashes in a row of one
# topology's worker on a slot hold its relaunch 1, 2, 4 ... seconds, at most MAX_RELAUNCH_DELAY.
CRASH_WINDOW = 60.0
MAX_RELAUNCH_DELAY = 30.0

MEMORY = "memory violation"
ZOOKEEPER = "zookeeper connections"
START = "start timeout"
ENVIRONMENT = "environment"  # the topology's Python environment could not be built (no worker ended)
PORT_IN_USE = "port in use"


@dataclass(frozen=True)
class Problem:
    """Why the supervisor ended a worker, for its topology's errors."""

    kind: str  # MEMORY, ZOOKEEPER, START, ENVIRONMENT or PORT_IN_USE
    text: str


def executors(rows: Iterable[Any]) -> frozenset[ExecutorId]:
    return frozenset((int(e[0]), int(e[1])) for e in rows)


def beat_problem(assigned: frozenset[ExecutorId] | None, beat_time: float | None,
                 beat_executors: frozenset[ExecutorId] | None, now: float, timeout: float) -> str | None:
    """Why the worker's heartbeat is not good enough to call it running, or None."""
    if beat_time is None:
        return "no heartbeat"
    if beat_executors is not None and assigned is not None:
        if executors(beat_executors) - {SYSTEM_EXECUTOR} != assigned:
            return "heartbeat reports other executors"
    if now - beat_time > timeout:
        return "heartbeat timed out"
    return None


def memory_problem(used_bytes: int | None, max_bytes: int | None) -> Problem | None:
    """The worker's processes together use more than the limit (``worker.memory.max.mb``)."""
    if used_bytes is None or max_bytes is None or used_bytes <= max_bytes:
        return None
    return Problem(MEMORY, f"memory violation: the worker's processes used {used_bytes >> 20} MB, over "
                           f"worker.memory.max.mb ({max_bytes >> 20} MB); killed")


def zookeeper_problem(connections: int | None, most: int | None) -> Problem | None:
    """The worker's processes hold more TCP connections to ZooKeeper than a worker needs
    (``worker.zookeeper.max.connections``): ZooKeeper takes a bounded number from one address,
    and a topology holding them all would keep the daemons and other topologies out."""
    if connections is None or most is None or connections <= most:
        return None
    return Problem(ZOOKEEPER, f"zookeeper connections: the worker's processes held {connections} connections to "
                              f"ZooKeeper, over worker.zookeeper.max.connections ({most}); killed")


def oom_problem(max_bytes: int | None) -> Problem:
    """The kernel ended the worker at its cgroup's memory limit."""
    limit = f" ({max_bytes >> 20} MB)" if max_bytes is not None else ""
    return Problem(MEMORY, f"memory violation: the worker was killed at worker.memory.max.mb{limit}")


def start_problem(ready: bool | None, launch_time: float | None, now: float, timeout: float) -> Problem | None:
    """The worker heartbeats but its spouts' ``open`` or bolts' ``prepare`` have not all
    returned within ``supervisor.worker.start.timeout.secs``. ``ready`` None: the worker
    does not say (an older worker), never a problem."""
    if ready is not False or launch_time is None or now - launch_time <= timeout:
        return None
    return Problem(START, f"start timeout: the worker did not finish starting within "
                          f"supervisor.worker.start.timeout.secs ({timeout:g}s): a spout's open() or a bolt's "
                          f"prepare() has not returned; relaunched")


def crashes_after(previous: int, launch_time: float | None, death_time: float) -> int:
    """Quick deaths in a row, counting this one (a worker that lived past CRASH_WINDOW
    starts the count again)."""
    quick = launch_time is not None and death_time - launch_time <= CRASH_WINDOW
    return previous + 1 if quick else 0


def relaunch_delay(crashes: int) -> float:
    """How long to hold a relaunch after ``crashes`` quick deaths in a row: the first is
    relaunched at once, then 1, 2, 4 ... seconds."""
    if crashes <= 1:
        return 0.0
    return min(2.0 ** (crashes - 2), MAX_RELAUNCH_DELAY)


def port_problem(port: int) -> Problem:
    """A worker that could not bind its port, which another process holds."""
    return Problem(PORT_IN_USE, f"port {port} is held by another process: the worker could not bind it, and "
                                "the slot takes no worker until the port is free (nimbus moves its executors)")
