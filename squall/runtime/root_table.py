"""A bounded map from 64-bit root ids to nonzero 64-bit values: the acker ledger's XORs.

Compiled (root_table.pxd), it is an open-addressing table of C integers: no int objects,
no int hashing, a few C operations per lookup (bench/results/issue31-localack.txt says why:
dict operations keyed by 64-bit ints were a third of an acked tuple's cost). Plain Python
keeps a dict, which is what the interpreter does fastest; both behave the same (tests/unit/
runtime/test_root_table.py holds them side by side). A value of zero is never stored: it
means "absent", which is exactly what the ledger needs (an entry that returns to zero is
complete and leaves). Roots and values must be 64-bit unsigned ints: the wire decoder checks
them (squall.runtime.serialization) before they reach here.

The table holds at most ``limit`` roots; an insert beyond that is refused (``put`` and
``fold`` return ``FULL``) and the caller decides what that means (the ledger fails the tree).
"""
from __future__ import annotations

import struct

try:
    import cython  # Cython's compile-time module; in plain Python its shadow module, if installed
except ImportError:
    from squall import compiled as cython  # cython.compiled is False

if cython.compiled:
    from cython.cimports.cpython.bytes import PyBytes_AS_STRING, PyBytes_FromStringAndSize
    from cython.cimports.cpython.mem import PyMem_Calloc, PyMem_Free
    from cython.cimports.squall.runtime.wire_ints import store_u64le

FULL = -1          # what put and fold return when a new root would exceed the limit
_MIN_BITS = 6      # 64 slots to start with
_GOLDEN = 0x9E3779B97F4A7C15  # Fibonacci hashing: roots of one residue class spread too
MAX_LIMIT = 1 << 30
# Ids between workers travel as packed pairs of little-endian 64-bit unsigned ints (root and
# edge id of an anchored tuple, root and XOR of an ack message): 16 bytes a pair, any bytes a
# valid id, so a check is one length test, and the compiled build reads and writes C integers
# with no int object (nor msgpack map) per id. ``take_pairs`` writes them; squall.runtime.acker
# and the wire codec read them.
PAIR_BYTES = 16
_SHRINK_BITS = 10  # take_pairs shrinks a table past 1,024 slots that is mostly empty


def pack_pairs(flat: list[int]) -> bytes:
    """Plain Python: ``[a0, b0, a1, b1, ...]`` as packed pairs (the compiled callers write them)."""
    return struct.pack(f"<{len(flat)}Q", *flat)


def unpack_pairs(buf: bytes) -> tuple[int, ...]:
    """Plain Python: packed pairs as ``(a0, b0, a1, b1, ...)``; ``len(buf)`` a multiple of PAIR_BYTES."""
    return struct.unpack(f"<{len(buf) // 8}Q", buf)


class RootTableFull(OverflowError):
    """Raised where a caller cannot take FULL for an answer (``__setitem__``)."""


class RootTable:
    """root -> nonzero value, at most ``limit`` roots (see the module's docstring)."""

    __slots__ = ("limit", "_d", "_roots", "_vals", "_n", "_bits", "_mask")

    def __init__(self, limit: int) -> None:
        if not 0 < limit <= MAX_LIMIT:
            raise ValueError(f"root table limit {limit} is not in 1..{MAX_LIMIT}")
        self.limit = limit
        self._n = 0
        self._d: dict[int, int] = {}
        if cython.compiled:
            self._alloc(_MIN_BITS)

    # -- compiled internals (linear probing, backward-shift deletion: no tombstones) --

    def _alloc(self, bits: int) -> None:
        size = 1 << bits
        roots = PyMem_Calloc(size, 8)
        vals = PyMem_Calloc(size, 8)
        if roots == cython.NULL or vals == cython.NULL:
            PyMem_Free(roots)
            PyMem_Free(vals)
            raise MemoryError(f"root table of {size} slots")
        self._roots = cython.cast(cython.p_ulonglong, roots)
        self._vals = cython.cast(cython.p_ulonglong, vals)
        self._bits = bits
        self._mask = size - 1

    def __dealloc__(self) -> None:
        if cython.compiled:
            PyMem_Free(self._roots)
            PyMem_Free(self._vals)

    def _home(self, root: int) -> int:
        """The slot where ``root``'s probe starts (C arithmetic: the product wraps at 64 bits)."""
        return (root * _GOLDEN) >> (64 - self._bits)

    def _slot(self, root: int) -> int:
        """The slot holding ``root``, or the empty slot where it would go."""
        i = self._home(root)
        while self._vals[i] != 0 and self._roots[i] != root:
            i = (i + 1) & self._mask
        return i

    def _grow(self) -> None:
        old_roots, old_vals, size = self._roots, self._vals, self._mask + 1
        self._alloc(self._bits + 1)
        for j in range(size):
            if old_vals[j] != 0:
                i = self._slot(old_roots[j])
                self._roots[i] = old_roots[j]
                self._vals[i] = old_vals[j]
        PyMem_Free(old_roots)
        PyMem_Free(old_vals)

    def _remove_slot(self, i: int) -> None:
        """Empty slot ``i`` and shift the entries after it back over the hole."""
        mask = self._mask
        self._vals[i] = 0
        self._n -= 1
        j = i
        while True:
            j = (j + 1) & mask
            if self._vals[j] == 0:
                return
            home = self._home(self._roots[j])
            # j's entry may move to the hole i unless its home lies cyclically in (i, j].
            if (j > i and (home <= i or home > j)) or (j < i and (home <= i and home > j)):
                self._roots[i] = self._roots[j]
                self._vals[i] = self._vals[j]
                self._vals[j] = 0
                i = j

    def _insert(self, i: int, root: int, v: int) -> int:
        """Put a new root in empty slot ``i`` (the table grows first when half full)."""
        if self._n >= self.limit:
            return FULL
        if 2 * (self._n + 1) > self._mask + 1:
            self._grow()
            i = self._slot(root)
        self._roots[i] = root
        self._vals[i] = v
        self._n += 1
        return 1

    # -- the map --

    def __len__(self) -> int:
        if cython.compiled:
            return self._n
        return len(self._d)

    def __contains__(self, root: int) -> bool:
        if cython.compiled:
            return self._vals[self._slot(root)] != 0
        return root in self._d

    def get(self, root: int) -> int:
        """The value of ``root``; 0 when absent."""
        if cython.compiled:
            return self._vals[self._slot(root)]
        return self._d.get(root, 0)

    def fold(self, root: int, x: int) -> int:
        """XOR ``x`` into the value of ``root`` (absent: 0). Returns 1 when the entry is
        still open, 0 when it became zero (and left), FULL when it is a new root that does
        not fit (the table is unchanged)."""
        if cython.compiled:
            i = self._slot(root)
            return self._store(i, root, self._vals[i] ^ x)
        return self._dstore(root, self._d.get(root, 0) ^ x)

    def put(self, root: int, v: int) -> int:
        """Set the value of ``root`` (0 removes it). Returns 1, 0 or FULL as ``fold``."""
        if cython.compiled:
            return self._store(self._slot(root), root, v)
        return self._dstore(root, v)

    def _store(self, i: int, root: int, v: int) -> int:
        """Compiled: set slot ``i`` (``root``'s, from ``_slot``) to ``v``; as ``put``."""
        if self._vals[i] == 0:
            if v == 0:
                return 0
            return self._insert(i, root, v)
        if v == 0:
            self._remove_slot(i)
            return 0
        self._vals[i] = v
        return 1

    def _dstore(self, root: int, v: int) -> int:
        """Plain Python: ``put`` on the dict."""
        d = self._d
        if v:
            if len(d) >= self.limit and root not in d:
                return FULL
            d[root] = v
            return 1
        d.pop(root, None)
        return 0

    def insert(self, root: int, v: int) -> int:
        """Set ``root`` to ``v`` (nonzero) only if it is absent: 1 when set, 0 when it was
        there (unchanged), FULL when it is new and does not fit."""
        if cython.compiled:
            i = self._slot(root)
            if self._vals[i] != 0:
                return 0
            return self._insert(i, root, v)
        d = self._d
        if root in d:
            return 0
        if len(d) >= self.limit:
            return FULL
        d[root] = v
        return 1

    def pop(self, root: int) -> int:
        """Remove ``root`` and return its value; 0 when absent."""
        if cython.compiled:
            i = self._slot(root)
            v = self._vals[i]
            if v != 0:
                self._remove_slot(i)
            return v
        return self._d.pop(root, 0)

    def discard(self, root: int) -> bool:
        """Remove ``root``; True if it was there."""
        if cython.compiled:
            i = self._slot(root)
            if self._vals[i] == 0:
                return False
            self._remove_slot(i)
            return True
        return self._d.pop(root, 0) != 0

    def roots(self) -> list[int]:
        """Every root held (in no particular order)."""
        if cython.compiled:
            out = []
            for j in range(self._mask + 1):
                if self._vals[j] != 0:
                    out.append(self._roots[j])
            return out
        return list(self._d)

    def items(self) -> list[tuple[int, int]]:
        """Every (root, value) held (in no particular order)."""
        if cython.compiled:
            out = []
            for j in range(self._mask + 1):
                if self._vals[j] != 0:
                    out.append((self._roots[j], self._vals[j]))
            return out
        return list(self._d.items())

    def take_pairs(self) -> bytes:
        """Every (root, value) held as packed pairs (PAIR_BYTES each, in no particular order),
        and the table left empty: an emitter's folded acks for one acker, as they go on the
        wire. Compiled, C integers from the slots to the bytes; a table that grew for a burst
        and is mostly empty shrinks back, since this scans every slot."""
        if cython.compiled:
            n = self._n
            w = PAIR_BYTES  # a C integer from here on
            out = PyBytes_FromStringAndSize(cython.NULL, n * w)
            p = cython.cast(cython.p_uchar, PyBytes_AS_STRING(out))
            k = 0
            for j in range(self._mask + 1):
                if self._vals[j] != 0:
                    store_u64le(p + k, self._roots[j])
                    store_u64le(p + k + 8, self._vals[j])
                    self._vals[j] = 0
                    k += w
            self._n = 0
            if self._bits > _SHRINK_BITS and 8 * n < self._mask + 1:
                PyMem_Free(self._roots)
                PyMem_Free(self._vals)
                self._roots = self._vals = cython.NULL
                self._alloc(_MIN_BITS)
            return out
        flat = [v for pair in self._d.items() for v in pair]
        self._d.clear()
        return pack_pairs(flat)

    def clear(self) -> None:
        if cython.compiled:
            for j in range(self._mask + 1):
                self._vals[j] = 0
            self._n = 0
            return
        self._d.clear()
