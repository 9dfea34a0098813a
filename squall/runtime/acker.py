"""Reliability bookkeeping as plain code: the acker's XOR ledger and a spout task's book
(its pending map is squall.runtime.pending).

A spout tuple's tree has a random root id. Every edge (a tuple sent to a task) has a random
64-bit edge id, XORed into the ledger once when it is created (by the emitter's ack or the
spout's init) and once when it is acked, so the entry returns to zero exactly when every
edge is acked (a false zero has probability 2**-64).
"""
from __future__ import annotations

import os
import random
from collections.abc import Collection, Sequence
from typing import Any

from squall.runtime.pending import DEFAULT_LIMIT, PendingTuples
from squall.runtime.root_table import MAX_LIMIT, PAIR_BYTES, RootTable, unpack_pairs

try:
    import cython  # Cython's compile-time module; in plain Python its shadow module, if installed
except ImportError:
    from squall import compiled as cython  # cython.compiled is False

if cython.compiled:
    from cython.cimports.cpython.bytes import PyBytes_AS_STRING
    from cython.cimports.squall.runtime.wire_ints import load_u64le

# A root id is 64 bits (it crosses the wire as a msgpack uint64): 20 bits that name its
# spout task above 44 random bits, so the acker needs no record of which spout to tell,
# and the low bits that dicts hash on are random. A spout task never has two pending
# trees with one root (it draws again), and an edge id is 64 random bits, so a tree still
# completes early only with probability 2**-64.
TASK_BITS = 20
ROOT_RANDOM_BITS = 64 - TASK_BITS
ROOT_RANDOM_MASK = (1 << ROOT_RANDOM_BITS) - 1
_rand = random.getrandbits


def new_root(task: int) -> int:
    """A fresh root id for spout task ``task``."""
    return (task << ROOT_RANDOM_BITS) | _rand(ROOT_RANDOM_BITS)


def spout_task(root: int) -> int:
    return root >> ROOT_RANDOM_BITS


def root_layout(task: int, ackers: Sequence[int], near: Collection[int]) -> tuple[int, int, int]:
    """How spout task ``task`` draws its root ids so that their acker is one of ``near``
    (the ackers in its own worker), when there is one: ``(base, stride, bits)``, a root being
    ``base + random(bits) * stride``.

    Every emitter, in any worker and any version, sends a tree's traffic to acker
    ``ackers[root % len(ackers)]``; a spout that picks its roots in one residue class
    therefore has its whole tree tracked next to it (Storm's local-acker affinity): its inits
    and the acker's verdicts never cross the network, and bolts in its worker ack locally
    too. Among several near ackers the task's id picks one. With none, roots are uniform as
    before (stride 1). ``bits`` leaves the product below the 44 random bits: at least 24 of
    them stay random for any acker count a topology can have."""
    tag = task << ROOT_RANDOM_BITS
    n = len(ackers)
    home = [i for i, a in enumerate(ackers) if a in near]
    if n <= 1 or not home:
        return tag, 1, ROOT_RANDOM_BITS
    want = home[task % len(home)]
    return tag + (want - tag) % n, n, ROOT_RANDOM_BITS - (n - 1).bit_length()


def draw_root(layout: tuple[int, int, int]) -> int:
    """A fresh root id of ``root_layout``'s shape."""
    base, stride, bits = layout
    return base + _rand(bits) * stride


# The compiled build draws ids from splitmix64 (a 64-bit counter through a mixing
# function; Storm's ids come from java.util.Random), seeded from os.urandom in every
# process: a few C operations instead of random.getrandbits' generic path, which costs
# more than the rest of an emit there. Plain Python calls getrandbits, cheaper than this
# function would be in the interpreter.
_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB
_state = 0


def _seed() -> None:
    global _state
    _state = int.from_bytes(os.urandom(8), "little")


_seed()
os.register_at_fork(after_in_child=_seed)  # a forked child must not repeat its parent's ids


def next_id() -> int:
    """A random 64-bit id (splitmix64)."""
    global _state
    _state = (_state + _GOLDEN) & _MASK64
    z = _state
    z = ((z ^ (z >> 30)) * _MIX1) & _MASK64
    z = ((z ^ (z >> 27)) * _MIX2) & _MASK64
    return z ^ (z >> 31)


# The ledger's bound when nothing tighter is known (no ``topology.max.spout.pending``): 4 Mi
# trees in flight, 128 MiB of table at most. A tree that would not fit fails at once
# (``refused``): its spout replays it, and the acker reports how many.
DEFAULT_LEDGER_LIMIT = 1 << 22
_TASK_SHIFT = ROOT_RANDOM_BITS


def ledger_limit(max_pending: int | None, spout_tasks: int) -> int:
    """The trees an acker may track: twice what the topology's spouts may have pending (an
    ack that overtakes its init holds an entry too), or DEFAULT_LEDGER_LIMIT without a cap."""
    if not max_pending or max_pending <= 0:
        return DEFAULT_LEDGER_LIMIT
    return max(1024, min(MAX_LIMIT, 2 * max_pending * max(1, spout_tasks)))


class AckerLedger:
    """root id -> XOR of the edge ids seen so far, from the spout's init and the bolts'
    acks alike (order does not matter), in a RootTable of C integers where compiled. An
    entry returns to zero exactly when every edge is acked: the tree is complete and its
    spout task, named by the root, is told. Completed and failed roots collect in ``done``
    and ``failed`` (spout task -> roots) until ``take`` hands them on; ``reasons`` holds
    why, for the failed roots that came with one (a tuple of the tree could not be
    delivered). At most ``limit`` trees are tracked: a new one beyond that fails at once
    and counts in ``refused``."""

    __slots__ = ("table", "done", "failed", "reasons", "refused", "_seen", "_older", "_task", "_roots")

    def __init__(self, limit: int = DEFAULT_LEDGER_LIMIT) -> None:
        self.table = RootTable(limit)
        self.done: dict[int, list[int]] = {}
        self.failed: dict[int, list[int]] = {}
        self.reasons: dict[int, str] = {}
        self.refused = 0
        self._seen: set[int] = set()
        self._older: set[int] = set()
        self._task = -1      # the spout task of the last completed root, and its list in done:
        self._roots: list[int] = []  # one spout's trees complete in runs, so no dict lookup

    def __len__(self) -> int:
        return len(self.table)

    def xor(self, root: int, x: int) -> bool:
        """Apply an init or ack (``root`` and ``x`` 64-bit unsigned); True if it completed the tree."""
        r = self.table.fold(root, x)
        if r == 1:
            return False
        if r == 0:
            self.complete(root)
            return True
        self.refuse(root)
        return False

    def complete(self, root: int) -> None:
        """The entry of ``root`` reached zero (and left the table)."""
        r = root
        task = r >> _TASK_SHIFT
        if task == self._task:
            self._roots.append(root)
            return
        d = self.done.get(task)
        if d is None:
            d = self.done[task] = []
        d.append(root)
        self._task, self._roots = task, d

    def refuse(self, root: int) -> None:
        """A new tree that does not fit under the limit: it fails at once (its spout replays it)."""
        self.refused += 1
        self.failed.setdefault(root >> ROOT_RANDOM_BITS, []).append(root)

    def apply(self, vals: dict[int, int]) -> None:
        """Batch form of ``xor``: {root: XOR of edge ids} folded by one emitter."""
        table = self.table
        for root, x in vals.items():
            if not x:
                continue  # a fold that cancelled out inside one executor: no news
            r = table.fold(root, x)
            if r == 0:
                self.complete(root)
            elif r != 1:
                self.refuse(root)

    def apply_pairs(self, pairs: bytes) -> None:
        """``apply`` for an ack message from another worker: (root, XOR) as packed pairs
        (PAIR_BYTES each; the wire decoder checked the length). Compiled, C integers from
        the buffer to the table: an int object only for a tree that completes."""
        table = self.table
        if cython.compiled:
            p = cython.cast(cython.p_uchar, PyBytes_AS_STRING(pairs))
            w = PAIR_BYTES  # a C integer from here on
            for k in range(len(pairs) // w):
                i = k * w
                x = load_u64le(p + i + 8)
                if not x:
                    continue
                root = load_u64le(p + i)
                r = table.fold(root, x)
                if r == 0:
                    self.complete(root)
                elif r != 1:
                    self.refuse(root)
            return
        flat = unpack_pairs(pairs)
        for i in range(0, len(flat), 2):
            x = flat[i + 1]
            if x:
                r = table.fold(flat[i], x)
                if r == 0:
                    self.complete(flat[i])
                elif r != 1:
                    self.refuse(flat[i])

    def fail(self, root: int, reason: str | None = None) -> None:
        """Forget the tree and tell its spout task (why, when ``reason`` says)."""
        self.table.discard(root)
        self.failed.setdefault(root >> ROOT_RANDOM_BITS, []).append(root)
        if reason is not None:
            self.reasons[root] = reason

    def take_reasons(self, roots: list[int]) -> dict[int, str]:
        """The reasons of those of ``roots`` that failed with one (and forget them)."""
        reasons = self.reasons
        if not reasons:
            return {}
        return {r: reasons.pop(r) for r in roots if r in reasons}

    def take(self) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
        """(completed, failed) roots by spout task since the last take."""
        done, failed = self.done, self.failed
        self.done, self.failed = {}, {}
        self._task = -1
        return done, failed

    def expire(self) -> list[int]:
        """Call once per message timeout: drops entries that were already there two calls
        ago (their spouts have timed them out). Returns the dropped roots."""
        table = self.table
        dead = [root for root in self._older if root in table]
        for root in dead:
            table.discard(root)
        self._older, self._seen = self._seen, set(table.roots())
        return dead


class SpoutBook:
    """One spout task's reliability bookkeeping: its pending tuples, how many were acked
    and failed, and where complete latencies are sampled (shared by the executor's tasks).
    The executor keeps it; a wrapping spout (squall.runtime.wrapping) takes it over."""

    __slots__ = ("pending", "acked", "failed", "latencies")

    def __init__(self, latencies: Any, limit: int = DEFAULT_LIMIT) -> None:
        self.pending = PendingTuples(limit)
        self.acked = 0
        self.failed = 0
        self.latencies = latencies  # a bounded deque of seconds

    def count_acked(self, n: int, latencies: Any = ()) -> None:
        self.acked += n
        self.latencies.extend(latencies)

    def count_failed(self, n: int) -> None:
        self.failed += n
