"""Giving freed memory back to the system.

glibc's allocator keeps what a process freed for its next allocations, and raises its mmap
threshold after large blocks are freed, so a burst of connections (TLS buffers, request
heads) leaves a daemon at its peak resident size long after they closed. And a closed
connection is not freed at once: asyncio's transports and protocols refer to each other, so
its buffers wait for a full collection of the cyclic garbage collector, which a quiet daemon
may not run for hours. ``give_back`` collects, then ``malloc_trim(0)`` returns the free pages
of every arena (glibc; elsewhere only the collection is done).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import gc
import sys
from typing import Any


def _glibc() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
        libc.malloc_trim.restype = ctypes.c_int
        return libc
    except (OSError, AttributeError):  # not glibc
        return None


_LIBC = _glibc()


def give_back() -> bool:
    """Collect cyclic garbage and return the free heap to the system; whether the heap
    shrank."""
    gc.collect()
    return bool(_LIBC.malloc_trim(0)) if _LIBC is not None else False
