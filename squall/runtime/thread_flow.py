"""Flow control within one executor thread, as plain state: when a spout skips its emit.

Between threads and workers a spout is held only once a queue is full (WorkerRuntime.
overloaded, squall.runtime.flow), as in Storm 2. A queue served by the spout's own thread
needs no such depth: the thread that fills it is the one that drains it, so a tuple emitted
beyond what the consumer takes in a step does not run any sooner; it waits, and is touched
long after it was made, out of cache. Without ``topology.max.spout.pending`` a word count's
spout made ~3,200 words a turn for a count bolt that takes STEP_TUPLES (2,000) a step: the
count's queue stood ~35,000 tuples deep, and the unacked run was slower per word than the
acked one (bench/results/issue31-wordcount-queue-2026-11-29f.txt).

So a spout skips a turn's emits (Storm 2's spout under backpressure: acks are still
handled) while a queue of its thread is over ``mark``. It never waits on anything: the
thread keeps stepping every executor. It never starves: it is held only while a queue over
the mark fell since its previous held turn, and depths are whole numbers above the mark, so
a hold lasts at most (depth - mark) turns; a consumer that does not drain (not ready, fed by
itself in a cycle, fed from another thread or worker as fast as it drains) lets the spout
emit, and the full mark takes over.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

STEP_TUPLES = 2000  # the most input tuples a bolt's step takes from its queue (about); a spout's hold mark


class Sized(Protocol):
    def __len__(self) -> int: ...


class ThreadHold:
    """Decides, once per spout turn, whether a spout skips its emits: ``queues`` are the
    receive queues of the other executors on its thread (anything with a length)."""

    __slots__ = ("queues", "mark", "_seen", "holds", "stalls")

    def __init__(self, queues: Sequence[Sized], mark: int) -> None:
        if mark < 0:
            raise ValueError(f"a queue mark cannot be negative: {mark}")
        self.queues = tuple(queues)
        self.mark = mark
        self._seen: list[int] | None = None  # depths at the previous turn, if the spout was held then
        self.holds = 0   # turns the spout skipped
        self.stalls = 0  # turns a queue over the mark had not fallen, so the spout emitted

    def held(self) -> bool:
        """Should the spout skip this turn's emits? Call once per turn."""
        mark = self.mark
        depths = [len(q) for q in self.queues]
        seen = self._seen
        over = falling = False
        for i, depth in enumerate(depths):
            if depth > mark:
                over = True
                if seen is None or depth < seen[i]:
                    falling = True
                    break
        if not over:
            self._seen = None
            return False
        if not falling:
            self._seen = None
            self.stalls += 1
            return False
        self._seen = depths
        self.holds += 1
        return True
