"""When a spout task's ``next_tuple`` may be called again: its wait strategy, as plain code.

Storm 2's spout wait strategy (``WaitStrategyProgressive`` at its spout defaults: no
spinning level, no parking level, then sleep) sleeps ``topology.sleep.spout.wait.strategy.time.ms``
whenever ``nextTuple`` emits nothing. A squall executor thread wakes sooner than that for
acks, which are handled at once (complete latency never waits for the strategy), but a
spout that ran dry is not asked again before its time is up: asked at every wake, a paced
spout whose own acks woke the thread ran a whole loop turn (every executor's step, a flush,
a delivery) for each tuple or two that had fallen due, and at three quarters of the maximum
rate those turns cost more CPU per tuple than the spout had, so it fell behind its schedule.

A spout that emits in answer to an ack does so from ``ack``/``fail`` (the checkpoint spout
sends the barrier that follows from there), not from the next ``next_tuple``.
"""
from __future__ import annotations

_NEVER = float("-inf")
CHUNK_MAX = 32  # the most next_tuple calls between two looks at what they emitted
PACED_CHUNK_MAX = 8  # the same for a task whose last turn ran dry (paced: a few tuples due)


class SpoutPacing:
    """One spout task's pace. After a turn that ran dry (a ``next_tuple`` call emitted
    nothing), ``next_tuple`` is held for ``hold`` seconds from the end of that turn; a turn
    that did not run dry (its batch filled, max pending capped it, its time ran out) leaves
    the task free to be asked at the next turn.

    A hold is a wait, over when either clock says so: the worker's (``now``; a test's
    FakeClock moves it by hand, so a stepped test holds and releases exactly when it says)
    or the real one (``real``; so a worker on a clock that stands still still emits). In a
    running worker the two are the same clock."""

    __slots__ = ("hold", "until", "real_until")

    def __init__(self, hold: float) -> None:
        if hold < 0.0:
            raise ValueError(f"a spout's wait strategy time cannot be negative: {hold}")
        self.hold = hold
        self.until = self.real_until = _NEVER

    def held(self, now: float, real: float) -> float:
        """Seconds before ``next_tuple`` may be called again (0.0: now)."""
        if now < self.until and real < self.real_until:
            return min(self.until - now, self.real_until - real)
        return 0.0

    def chunk_max(self) -> int:
        """The most ``next_tuple`` calls between two looks at what they emitted. The calls
        of a chunk after the first that emitted nothing are wasted, about half a chunk a
        turn: a task that ran dry last time (paced: the hold ends with a few tuples due)
        looks more often, as a task in bursts needs not (bench/pace_steps.py)."""
        return CHUNK_MAX if self.until == _NEVER else PACED_CHUNK_MAX

    def turn_ended(self, now: float, real: float, dry: bool) -> None:
        """A turn that called ``next_tuple`` ended (at ``now`` and ``real``); ``dry``: a call
        emitted nothing."""
        if dry:
            self.until, self.real_until = now + self.hold, real + self.hold
        else:
            self.until = _NEVER
