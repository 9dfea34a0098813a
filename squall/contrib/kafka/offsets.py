"""Per-partition offset bookkeeping (Storm's OffsetManager), plain code with no I/O.

An offset is *emitted* when the spout sends its record's tuple, *acked* when the tuple tree
completes (or when the spout is done with the record otherwise: skipped by the
translator, reported as undecodable). The offset the group may commit is the one past the
highest acked offset below which every emitted offset is acked: a failed or still pending
record holds the commit back however much is acked after it, so a commit never passes a
record that was not fully processed. Offsets the log never had (compaction, transaction
markers) are never emitted and so hold nothing back.
"""
from __future__ import annotations

from bisect import bisect_left
from collections import deque
from itertools import islice


class OffsetManager:
    """One partition's emitted, acked and committed offsets.

    ``committed`` is the next offset to read after a restart (Kafka's meaning of a committed
    offset). ``uncommitted`` counts emitted offsets not yet committed: the spout stops
    polling the partition while it is over its bound.
    """

    __slots__ = ("committed", "_order", "_acked", "_pending", "_last_emitted", "committed_since")

    def __init__(self, committed: int) -> None:
        self.committed = committed             # next offset a restarted reader starts at
        self._order: deque[int] = deque()      # emitted, not committed, in offset order
        self._acked: set[int] = set()          # acked, not committed
        self._pending: set[int] = set()        # emitted, neither acked nor committed
        self._last_emitted = committed - 1
        self.committed_since = 0               # offsets the last commit() moved past

    def __len__(self) -> int:
        return len(self._order)

    @property
    def uncommitted(self) -> int:
        return len(self._order)

    @property
    def last_emitted(self) -> int:
        return self._last_emitted

    def is_done_or_pending(self, offset: int) -> bool:
        """Whether ``offset`` needs no emit now: committed, acked, or in flight."""
        return offset < self.committed or offset in self._acked or offset in self._pending

    def is_pending(self, offset: int) -> bool:
        return offset in self._pending

    def emitted(self, offset: int) -> None:
        """The record at ``offset`` went out (again, after a retry)."""
        if offset < self.committed or offset in self._acked:
            return
        if offset > self._last_emitted:
            self._order.append(offset)
            self._last_emitted = offset
        elif offset not in self._pending and offset not in self._order:
            self._insert(offset)  # a retry below the last emitted one, no longer listed
        self._pending.add(offset)

    def _insert(self, offset: int) -> None:
        order = self._order
        i = len(order)
        while i and order[i - 1] > offset:
            i -= 1
        order.insert(i, offset)

    def acked(self, offset: int) -> bool:
        """The record at ``offset`` is done; False if it was not pending (a late or
        duplicate ack, or one from before a seek) and nothing changed."""
        if offset in self._pending:
            self._pending.discard(offset)
            self._acked.add(offset)
            return True
        return False

    def done(self, offset: int) -> None:
        """Mark ``offset`` done without an emit (a record skipped or reported)."""
        self.emitted(offset)
        self.acked(offset)

    def failed(self, offset: int) -> bool:
        """The tuple of ``offset`` failed: it stays emitted (holding the commit back) but is
        no longer in flight, so a re-read emits it again. False if it was not pending."""
        if offset in self._pending:
            self._pending.discard(offset)
            return True
        return False

    def next_commit(self) -> int:
        """The offset the group may commit now (== ``committed`` when nothing moved)."""
        order, acked = self._order, self._acked
        if order and len(acked) == len(order):  # every listed offset acked (acked is a subset)
            return order[-1] + 1
        nxt = self.committed
        for off in order:
            if off not in acked:
                break
            nxt = off + 1
        return nxt

    def commit(self, offset: int) -> None:
        """``offset`` (from ``next_commit``) was committed: forget everything below it."""
        if offset <= self.committed:
            self.committed_since = 0
            return
        order = self._order
        # In C rather than one offset at a time: a commit covers a whole period's records.
        n = bisect_left(order, offset)
        gone = list(islice(order, n))
        self._order = deque(islice(order, n, None)) if n < len(order) else deque()
        self._acked.difference_update(gone)
        if self._pending:
            self._pending.difference_update(gone)
        self.committed_since = n
        self.committed = offset
        if self._last_emitted < offset - 1:
            self._last_emitted = offset - 1

    def reset(self, committed: int) -> None:
        """Forget everything (a rollback, a partition handed back): start from ``committed``."""
        self.committed = committed
        self._order.clear()
        self._acked.clear()
        self._pending.clear()
        self._last_emitted = committed - 1
        self.committed_since = 0

    def first_unacked(self) -> int | None:
        """The lowest emitted offset not acked, if any."""
        for off in self._order:
            if off not in self._acked:
                return off
        return None
