"""Tuples that cannot cross to another worker, as plain bookkeeping: which trees to fail
with which reason, which checkpoint barriers must fail after them, and when to log.

A tuple is refused alone (a value no serializer carries, a tuple over the frame limit):
its trees fail with the reason, so its spout hears ``undeliverable`` (squall.components),
and the rest of its batch goes on. A refused tuple also breaks the promise of the channel
it was on (source task -> target task): the next PREPARE barrier on that channel would
cover it, so that barrier fails instead (its checkpoint rolls back and the spouts replay).
A recovery barrier (ROLLBACK, INIT) starts the channel afresh.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from squall.model import ACK_FAIL, ACKER_STREAMS, CHECKPOINT_STREAM
from squall.tuple import Source, Tuple

MAX_REASON = 1000      # characters of a reason that travel with a failed tree
MAX_CAUSES = 256       # causes counted apart; the rest are counted together
RELOG_SECS = 60.0      # a cause logged again with its count at most this often
OTHER = ("...", "...", "...", "...")
PREPARE = "prepare"
RECOVERY = ("rollback", "init")
BARRIER_FAILED = ("a tuple sent before this checkpoint barrier on the same channel could not be delivered; "
                  "the checkpoint must not cover it")


def roots_of(t: Any) -> tuple[int, ...]:
    """The tuple trees ``t`` belongs to."""
    return (t.root,) if t.root else tuple(t.roots or ())


class TreeFailures:
    """Failed trees with their reasons, gathered per (acker task, emitting component and
    task) and handed on as acker fail messages (a batch of ``[root, reason]`` entries)."""

    def __init__(self, ackers: tuple[int, ...]) -> None:
        self.ackers = ackers
        self._sources: dict[tuple[str, int], Source] = {}
        self.pending: dict[tuple[int, str, int], list[list]] = {}

    def add(self, t: Any, reason: str) -> None:
        if not self.ackers:
            return
        src = t.source
        text = reason[:MAX_REASON]
        for root in roots_of(t):
            key = (self.ackers[root % len(self.ackers)], src.component, src.task)
            entries = self.pending.get(key)
            if entries is None:
                entries = self.pending[key] = []
            entries.append([root, text])

    def messages(self) -> list[tuple[int, Tuple]]:
        """(acker task, fail message) for everything added since the last call."""
        out = []
        for (acker, component, task), entries in self.pending.items():
            src = self._sources.get((component, task))
            if src is None:
                src = self._sources[(component, task)] = Source(component, task, ACK_FAIL, ACKER_STREAMS[ACK_FAIL])
            out.append((acker, Tuple([entries], src)))
        self.pending = {}
        return out


class Channels:
    """Channels (source task, target task) that lost a tuple since their last barrier; kept
    only in a checkpointed topology (``barriers``): elsewhere no barrier would clear one."""

    def __init__(self, barriers: bool = True) -> None:
        self.barriers = barriers
        self.broken: set[tuple[int, int]] = set()

    def sort_out(self, target: int, tuples: list, refused: dict[int, str],
                 failures: TreeFailures) -> list:
        """``tuples`` bound for ``target`` without the refused ones (index -> reason) and
        without the PREPARE barriers that came after a refused tuple on their channel;
        those fail (into ``failures``). In arrival order, so a barrier sent before a
        refused tuple still goes."""
        broken = self.broken
        kept = []
        for i, t in enumerate(tuples):
            src = t.source
            reason = refused.get(i)
            if reason is not None:
                if self.barriers:
                    broken.add((src.task, target))
                failures.add(t, reason)
            elif broken and src.stream == CHECKPOINT_STREAM and (src.task, target) in broken:
                action = t.values[1] if len(t.values) > 1 else None
                if action == PREPARE:
                    broken.discard((src.task, target))
                    failures.add(t, BARRIER_FAILED)
                    continue
                if action in RECOVERY:
                    broken.discard((src.task, target))
                kept.append(t)
            else:
                kept.append(t)
        return kept


class RefusalLog:
    """Counts refused tuples per cause (component, stream, field, type) and says when one
    is worth a log line: its first time, then at most every ``RELOG_SECS`` with its count.
    At most ``MAX_CAUSES`` causes are kept apart."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.counts: dict[tuple[str, ...], int] = {}
        self._logged: dict[tuple[str, ...], tuple[float, int]] = {}

    def note(self, cause: tuple[str, ...]) -> int | None:
        """Count one refusal; the count to log now, or None."""
        if cause not in self.counts and len(self.counts) >= MAX_CAUSES:
            cause = OTHER
        n = self.counts[cause] = self.counts.get(cause, 0) + 1
        now = self.clock()
        last = self._logged.get(cause)
        if last is None or now - last[0] >= RELOG_SECS and n > last[1]:
            self._logged[cause] = (now, n)
            return n
        return None

    def total(self) -> int:
        return sum(self.counts.values())
