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

A spout that knows when its next tuple falls due says so (``Spout.due_in``) and is held
until then instead: a fixed hold makes a tuple that falls due during it wait half the hold
on average (the whole p50 of a paced spout at low load), and at a high offered rate the
hold is stretched by the catch-up that follows it (a turn emits the hold's backlog while
more falls due), which made the p99 lag at 75% of the maximum many holds long.
"""
from __future__ import annotations

_NEVER = float("-inf")
MAX_DUE_WAIT = 1.0  # the longest a spout's own due_in holds it (a spout that misjudged is asked again)
# The shortest: a turn costs tens of microseconds (every executor's step, a flush), so a spout
# whose tuples fall due every few microseconds is asked at most ~10,000 times a second, each
# time with what fell due meanwhile, not once a tuple (never longer than its wait strategy's time).
MIN_DUE_WAIT = 0.0001
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

    def hold_after_dry(self, due_in: float | None) -> float | None:
        """How long a task whose ``next_tuple`` ran dry is held, given what its spout's
        ``due_in`` said: None, the wait strategy's time; 0 or less, not held (None: due
        now, or records are on their way); otherwise the spout's time, at least MIN_DUE_WAIT
        (or the wait strategy's time when shorter) and at most MAX_DUE_WAIT."""
        if due_in is None:
            return self.hold
        if due_in <= 0.0:
            return None
        if due_in < MIN_DUE_WAIT:
            return MIN_DUE_WAIT if MIN_DUE_WAIT < self.hold else self.hold
        return due_in if due_in < MAX_DUE_WAIT else MAX_DUE_WAIT

    def turn_ended(self, now: float, real: float, hold: float | None) -> None:
        """A turn that called ``next_tuple`` ended (at ``now`` and ``real``): held for
        ``hold`` seconds after a dry turn; None, not held (its batch filled, max pending
        capped it, its time ran out, or its spout is due again at once)."""
        if hold is not None:
            self.until, self.real_until = now + hold, real + hold
        else:
            self.until = _NEVER
