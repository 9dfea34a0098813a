"""Reliability bookkeeping as plain code: the acker's XOR ledger and the spout's pending map.

A spout tuple's tree has a random 64-bit root id. Every edge (a tuple sent to a task) has a
random 64-bit edge id, XORed into the ledger once when it is created (by the emitter's ack
or the spout's init) and once when it is acked, so the entry returns to zero exactly when
every edge is acked. Both maps keep insertion order, which is start-time order, so expiring
stale entries looks only at the oldest ones.
"""
from __future__ import annotations

from collections.abc import Hashable
from typing import Any


class AckerLedger:
    """root id -> [xor value, spout task or None, start time]."""

    __slots__ = ("_entries",)

    def __init__(self) -> None:
        self._entries: dict[int, list] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def init(self, root: int, ack_val: int, spout_task: int, now: float) -> int | None:
        """The spout's init; returns the spout task if the tree is already complete."""
        entry = self._entries.get(root)
        if entry is None:
            entry = self._entries[root] = [0, None, now]
        entry[0] ^= ack_val
        entry[1] = spout_task
        return self._complete(root, entry)

    def ack(self, root: int, xor: int, now: float) -> int | None:
        """A bolt's ack (edge ids XORed); returns the spout task if the tree completed."""
        entry = self._entries.get(root)
        if entry is None:  # ack overtook the spout's init: remember it until the init comes
            self._entries[root] = [xor, None, now]
            return None
        entry[0] ^= xor
        return self._complete(root, entry)

    def _complete(self, root: int, entry: list) -> int | None:
        if entry[0] == 0 and entry[1] is not None:
            del self._entries[root]
            return entry[1]
        return None

    def fail(self, root: int) -> int | None:
        """Forget the tree; returns its spout task (None if the init never came)."""
        entry = self._entries.pop(root, None)
        return None if entry is None else entry[1]

    def apply_inits(self, vals: dict[int, int], spout: int, now: float, done: dict[int, list]) -> None:
        """Batch form of ``init``: {root: ack_val} from one spout task; completed roots
        are appended to ``done[spout]``."""
        entries = self._entries
        completed = None
        for root, val in vals.items():
            entry = entries.get(root)
            if entry is None:
                if val:
                    entries[root] = [val, spout, now]
                    continue
            else:
                val = entry[0] = entry[0] ^ val
                entry[1] = spout
                if val:
                    continue
                del entries[root]
            if completed is None:
                completed = done.setdefault(spout, [])
            completed.append(root)

    def apply_acks(self, vals: dict[int, int], now: float, done: dict[int, list]) -> None:
        """Batch form of ``ack``: {root: xor}."""
        entries = self._entries
        for root, x in vals.items():
            entry = entries.get(root)
            if entry is None:
                entries[root] = [x, None, now]
                continue
            val = entry[0] = entry[0] ^ x
            if val == 0 and entry[1] is not None:
                del entries[root]
                done.setdefault(entry[1], []).append(root)

    def expire(self, now: float, timeout: float) -> list[int]:
        """Drop entries older than ``timeout`` (their spout times them out itself)."""
        dead = []
        limit = now - timeout
        for root, entry in self._entries.items():
            if entry[2] > limit:
                break
            dead.append(root)
        for root in dead:
            del self._entries[root]
        return dead


class PendingTuples:
    """A spout task's tuples in flight: root id -> (message id, start time)."""

    __slots__ = ("_pending",)

    def __init__(self) -> None:
        self._pending: dict[int, tuple[Hashable, float]] = {}

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, root: int, msg_id: Any, now: float) -> None:
        self._pending[root] = (msg_id, now)

    def pop(self, root: int) -> tuple[Any, float] | None:
        """Remove and return (message id, start time); None if unknown (timed out already)."""
        return self._pending.pop(root, None)

    def expire(self, now: float, timeout: float) -> list[Any]:
        """Remove and return the message ids of tuples pending longer than ``timeout``."""
        limit = now - timeout
        dead: list[int] = []
        for root, (_, start) in self._pending.items():
            if start > limit:
                break
            dead.append(root)
        return [self._pending.pop(root)[0] for root in dead]
