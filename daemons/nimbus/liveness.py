"""What nimbus may conclude from silence: plain decisions, timed by an injected clock.

Nimbus judges workers and supervisors by what it hears: supervisors' reports (each carrying
its workers' beats) and supervisors' membership in ZooKeeper. A nimbus that has just taken
the lead has no history, and one that has just (re)connected to ZooKeeper heard nothing for
a while (reports are refused while it cannot lead): neither can tell a dead worker from one
it could not hear. :class:`ReconnectGrace` holds every reassignment for
``nimbus.task.timeout.secs`` after each (re)connection and each takeover, and silence is
counted from then. A supervisor stopped cleanly leaves a node marked ``away`` that keeps
its slots for ``supervisor.restart.grace.secs`` (:func:`supervisor_alive`), so a restart
adopts its workers instead of losing them; its workers' beats come through it, so while it
is away they are vouched for (:func:`vouched_while_away`) and their silence counts from the
last time it was seen away. :func:`next_judgement` says when the next silence runs out, so
that a death is acted on then rather than at the next periodic round.
"""
from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from squall.daemons.state import Assignment, ExecutorId, Slot
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

    def restart(self, connections: int) -> None:
        """A new grace from now (a takeover), with ``connections`` as the count seen."""
        self._seen = connections
        self._until = self._clock.monotonic() + self.period

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


def vouched_while_away(beats: Mapping[Slot, tuple[float, Collection[ExecutorId]]],
                       placed: Mapping[Slot, Collection[ExecutorId]],
                       vouched: Mapping[str, float]) -> dict[Slot, tuple[float, Collection[ExecutorId]]]:
    """``beats`` with each slot of a node in ``vouched`` (node -> the last time nimbus saw its
    supervisor away, stopped cleanly and within its restart grace) heard at that time at the
    latest, with every executor placed there: those workers report through their supervisor,
    so its absence says nothing about them. Once it is back, their silence counts from the
    last time it was seen away; once its grace has run out, its slots are lost anyway."""
    out = dict(beats)
    for slot, executors in placed.items():
        at = vouched.get(slot[0])
        if at is not None and (slot not in out or out[slot][0] < at):
            out[slot] = (at, executors)
    return out


def last_heard(*times: float | None) -> float:
    """The latest of the times something was heard (-inf when none)."""
    return max((t for t in times if t is not None), default=float("-inf"))


def next_judgement(heard: Iterable[float], timeout: float, after: float) -> float | None:
    """The earliest time at which something last heard at one of ``heard`` has been silent
    for ``timeout``, among those that run out after ``after`` (when the last judgement was
    made: what ran out before was judged then); None when nothing will. It may be past
    already (it ran out while a round was running): then judge at once."""
    ends = [t + timeout for t in heard if t + timeout > after]
    return min(ends) if ends else None


def lost_node(assignment: Assignment | None, live: Collection[str]) -> bool:
    """Whether ``assignment`` places executors on a node not among the ``live`` supervisors
    (looked at through its hosts, a few entries, not its executors)."""
    if assignment is None:
        return False
    nodes = assignment.node_host.keys() or {node for node, _ in assignment.slots()}
    return any(node not in live for node in nodes)
