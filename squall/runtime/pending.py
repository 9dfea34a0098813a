"""A spout task's tuples in flight: root id -> (message id, start time), at most ``limit``.

Compiled (pending.pxd), an entry lives in a slot: its message id in a list, its start time
and root in C arrays, the slots reused through a free list, and a RootTable maps a root to
its slot + 1. An emit and its tree's completion then cost no dict operation, no tuple per
entry and no int hashing (bench/results/issue31-spoutpend.txt). Plain Python keeps a dict in
insertion order, which is start-time order. Both behave the same (tests/unit/runtime/
test_pending.py holds them side by side).

Expiry: the dict looks at its oldest entries only; the slots have no order, so expiry scans
them, but only once the oldest start the last scan left (or an older one added since) may
have timed out: about once per message timeout, not once per call.
"""
from __future__ import annotations

from typing import Any

try:
    import cython  # Cython's compile-time module; in plain Python its shadow module, if installed
except ImportError:
    from squall import compiled as cython  # cython.compiled is False

from squall.runtime.root_table import FULL, MAX_LIMIT, RootTable

if cython.compiled:
    from cython.cimports.cpython.mem import PyMem_Free, PyMem_Realloc

_MIN_SLOTS = 64
_NEVER = float("inf")
# A spout task's bound when ``topology.max.spout.pending`` sets none: as the acker's ledger's.
DEFAULT_LIMIT = 1 << 22


def pending_limit(max_pending: int | None) -> int:
    """The tuples a spout task may hold in flight: twice ``topology.max.spout.pending`` (one
    next_tuple call may emit several tuples after the executor's check), at least 1,024;
    DEFAULT_LIMIT without a cap."""
    if not max_pending or max_pending <= 0:
        return DEFAULT_LIMIT
    return max(1024, min(MAX_LIMIT, 2 * max_pending))


class PendingTuples:
    """root -> (message id, start time), at most ``limit`` roots (see the module's docstring).
    ``held`` counts tuples whose trees are complete but that a wrapping spout keeps back
    (checkpointing acks them once a commit covers them): they count toward
    ``topology.max.spout.pending`` while the table stays as small, and as fast, as without them."""

    __slots__ = ("held", "limit", "_d", "_index", "_msgs", "_starts", "_roots", "_free",
                 "_nfree", "_top", "_cap", "_oldest")

    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        if not 0 < limit <= MAX_LIMIT:
            raise ValueError(f"pending limit {limit} is not in 1..{MAX_LIMIT}")
        self.limit = limit
        self.held = 0
        self._d: dict[int, tuple[Any, float]] = {}
        self._nfree = self._top = self._cap = 0
        self._oldest = _NEVER
        if cython.compiled:
            self._starts = self._roots = self._free = cython.NULL  # allocated by _grow
            self._index = RootTable(limit)
            self._msgs: list[Any] = []
            self._grow()

    # -- compiled internals: slots 0.._top-1 used so far, free ones (message id None) on a stack --

    def _grow(self) -> None:
        cap = min(self.limit, max(_MIN_SLOTS, 2 * self._cap))
        starts = PyMem_Realloc(self._starts, cap * 8)
        if starts == cython.NULL:
            raise MemoryError(f"pending table of {cap} slots")
        self._starts = cython.cast(cython.p_double, starts)
        roots = PyMem_Realloc(self._roots, cap * 8)
        if roots == cython.NULL:
            raise MemoryError(f"pending table of {cap} slots")
        self._roots = cython.cast(cython.p_ulonglong, roots)
        free = PyMem_Realloc(self._free, cap * cython.sizeof(cython.Py_ssize_t))
        if free == cython.NULL:
            raise MemoryError(f"pending table of {cap} slots")
        self._free = cython.cast(cython.pointer(cython.Py_ssize_t), free)
        self._msgs.extend([None] * (cap - self._cap))
        self._cap = cap

    def __dealloc__(self) -> None:
        if cython.compiled:
            PyMem_Free(self._starts)
            PyMem_Free(self._roots)
            PyMem_Free(self._free)

    def _release(self, s: int) -> None:
        """Slot ``s`` is free again (its root already left the index)."""
        self._msgs[s] = None
        self._free[self._nfree] = s
        self._nfree += 1

    def _used(self) -> list[tuple[float, int]]:
        """(start, slot) of every entry, oldest first."""
        msgs = self._msgs
        out = []
        for s in range(self._top):
            if msgs[s] is not None:
                out.append((self._starts[s], s))
        out.sort()
        return out

    # -- the map --

    def __len__(self) -> int:
        """Tuples in flight, the held ones included."""
        if cython.compiled:
            return self._top - self._nfree + self.held
        return len(self._d) + self.held

    def __contains__(self, root: int) -> bool:
        if cython.compiled:
            return root in self._index
        return root in self._d

    def add(self, root: int, msg_id: Any, now: float) -> int:
        """Record a new tree (``msg_id`` not None): 1; 0 when ``root`` is pending already
        (the caller draws another); FULL when ``limit`` tuples are, whatever ``root``
        (nothing changes)."""
        if cython.compiled:
            if self._top - self._nfree >= self.limit:
                return FULL
            if self._nfree:
                s = self._free[self._nfree - 1]
            else:
                if self._top == self._cap:
                    self._grow()
                s = self._top
            if self._index.insert(root, s + 1) != 1:
                return 0  # the limits agree: only a root already there is refused here
            if self._nfree:
                self._nfree -= 1
            else:
                self._top += 1
            with cython.boundscheck(False), cython.wraparound(False):  # _msgs holds _cap slots
                self._msgs[s] = msg_id
            self._starts[s] = now
            self._roots[s] = root
            if now < self._oldest:
                self._oldest = now
            return 1
        d = self._d
        if len(d) >= self.limit:
            return FULL
        entry = (msg_id, now)
        return 1 if d.setdefault(root, entry) is entry else 0

    def pop(self, root: int) -> tuple[Any, float] | None:
        """Remove and return (message id, start time); None if unknown (timed out already)."""
        if cython.compiled:
            v = self._index.pop(root)
            if v == 0:
                return None
            s = v - 1
            entry = (self._msgs[s], self._starts[s])
            self._release(s)
            return entry
        return self._d.pop(root, None)

    def pop_entries(self, roots: Any) -> list[tuple[Any, float]]:
        """``pop`` of each of ``roots``, in order, the unknown ones left out."""
        out = []
        for root in roots:
            entry = self.pop(root)
            if entry is not None:
                out.append(entry)
        return out

    def complete(self, roots: Any, now: float, lats: list, sample: int, msg_ids: list | None) -> int:
        """Remove the entries of completed ``roots`` (unknown ones: timed out already) and
        return how many there were; their message ids go to ``msg_ids`` (None: not wanted)
        and the complete latencies of the first ``sample`` to ``lats``. The spout executor's
        ack batches: compiled, a probe of the root table per root and nothing else."""
        n = 0
        if cython.compiled:
            index, msgs = self._index, self._msgs
            for root in roots:
                v = index.pop(root)
                if v == 0:
                    continue
                s = v - 1  # a slot add stored: below _cap, the length of msgs
                with cython.boundscheck(False), cython.wraparound(False):
                    if msg_ids is not None:
                        msg_ids.append(msgs[s])
                    msgs[s] = None
                if n < sample:
                    lats.append(now - self._starts[s])
                self._free[self._nfree] = s
                self._nfree += 1
                n += 1
            return n
        pop = self._d.pop
        for root in roots:
            entry = pop(root, None)
            if entry is None:
                continue
            if msg_ids is not None:
                msg_ids.append(entry[0])
            if n < sample:
                lats.append(now - entry[1])
            n += 1
        return n

    def expire(self, now: float, timeout: float) -> list[Any]:
        """Remove and return the message ids of tuples pending longer than ``timeout``, oldest first."""
        limit = now - timeout
        if cython.compiled:
            if self._oldest > limit:
                return []  # nothing started early enough
            out = []
            oldest = _NEVER
            for start, s in self._used():
                if start > limit:
                    oldest = start
                    break
                self._index.discard(self._roots[s])
                out.append(self._msgs[s])
                self._release(s)
            self._oldest = oldest
            return out
        d = self._d
        dead: list[int] = []
        for root, (_, start) in d.items():
            if start > limit:
                break
            dead.append(root)
        return [d.pop(root)[0] for root in dead]

    def drain(self) -> list[tuple[Any, float]]:
        """Remove and return every (message id, start time), oldest first (``held`` is the caller's)."""
        if cython.compiled:
            out = [(self._msgs[s], start) for start, s in self._used()]
            self._index.clear()
            for s in range(self._top):
                self._msgs[s] = None
            self._nfree = self._top = 0
            self._oldest = _NEVER
            return out
        out = list(self._d.values())
        self._d.clear()
        return out

    def as_dict(self) -> dict[int, tuple[Any, float]]:
        """root -> (message id, start time) of every entry (for tests and inspection)."""
        if cython.compiled:
            return {self._roots[s]: (self._msgs[s], start) for start, s in self._used()}
        return dict(self._d)
