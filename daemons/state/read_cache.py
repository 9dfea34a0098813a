"""ReadCache: decoded nodes and children lists kept until ZooKeeper says they changed.

Nimbus reads every topology and every assignment each round. Asking ZooKeeper whether each
of them changed costs a round trip per node, and under load each answer waits for the
interpreter's lock on kazoo's thread: at 100 topologies that was most of a round's time.
Instead every read leaves a watch, and an entry is *clean* (served without asking) from the
moment its read is sent until a watch event, a write of this process or a change of the
connection marks it dirty again. An entry is marked clean before its request goes out and
only if nothing invalidated it meanwhile (a generation per key), so an event that arrives
while the read is in flight is never lost. Plain bookkeeping, no I/O; one lock, since
rounds, API threads and kazoo's event thread use it together.
"""
from __future__ import annotations

import threading
from typing import Any

Key = tuple[str, str]  # ("data", path) or ("children", parent path)
MAX_KEYS = 200_000  # generations kept; past it every key starts over (all dirty once)


class ReadCache:
    """What the cached reads of one session know (see the module doc)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, dict[str, tuple[int, Any]]] = {}  # parent -> path -> (mzxid, value)
        self._names: dict[str, list[str]] = {}  # parent -> children, as last listed
        self._clean: set[Key] = set()
        self._generation: dict[Key, int] = {}  # bumped by every invalidation of the key
        self._epoch = 0  # bumped by forget_watches: every key is dirty again

    # -- before a read ------------------------------------------------------------------
    def ticket(self, key: Key) -> tuple[int, int]:
        """Taken just before the read of ``key`` is sent (its watch armed)."""
        with self._lock:
            return self._epoch, self._generation.get(key, 0)

    def names(self, parent: str) -> list[str] | None:
        """``parent``'s children when its list is clean, else None (list them again)."""
        with self._lock:
            return list(self._names[parent]) if ("children", parent) in self._clean else None

    def values(self, parent: str) -> dict[str, tuple[int, Any]]:
        """path -> (mzxid, decoded value) of the children decoded so far."""
        with self._lock:
            return dict(self._values.get(parent, {}))

    def dirty(self, paths: list[str]) -> list[str]:
        """Those of ``paths`` whose data must be read again."""
        with self._lock:
            return [p for p in paths if ("data", p) not in self._clean]

    # -- after a read -------------------------------------------------------------------
    def put_names(self, parent: str, names: list[str], ticket: tuple[int, int]) -> None:
        with self._lock:
            self._names[parent] = list(names)
            self._settle(("children", parent), ticket)

    def put_value(self, parent: str, path: str, entry: tuple[int, Any] | None, ticket: tuple[int, int]) -> None:
        """The data read at ``path`` (None: the node is gone)."""
        with self._lock:
            values = self._values.setdefault(parent, {})
            if entry is None:
                values.pop(path, None)
                self._clean.discard(("data", path))
                return
            values[path] = entry
            self._settle(("data", path), ticket)

    def keep_only(self, parent: str, paths: list[str]) -> None:
        """Forget the decoded children of ``parent`` that are no longer listed."""
        with self._lock:
            values = self._values.get(parent, {})
            for path in values.keys() - set(paths):
                del values[path]
                self._clean.discard(("data", path))

    def _settle(self, key: Key, ticket: tuple[int, int]) -> None:
        # Caller holds the lock: clean unless invalidated since the ticket was taken.
        if ticket == (self._epoch, self._generation.get(key, 0)):
            self._clean.add(key)

    # -- invalidation -------------------------------------------------------------------
    def invalidate(self, key: Key) -> None:
        """A watch fired or this process wrote: read ``key`` again next time."""
        with self._lock:
            if len(self._generation) >= MAX_KEYS:
                self._forget()
            self._clean.discard(key)
            self._generation[key] = self._generation.get(key, 0) + 1

    def wrote(self, path: str, created_or_deleted: bool) -> None:
        """``path`` changed (and, when it was created or deleted, the lists above it: a
        create may have made its parents too)."""
        self.invalidate(("data", path))
        while created_or_deleted and path not in ("", "/"):
            path = path.rsplit("/", 1)[0] or "/"
            self.invalidate(("children", path))

    def forget_watches(self) -> None:
        """The connection changed: events may have been missed, everything is read again
        (decoded values stay, reused when a node's mzxid did not move)."""
        with self._lock:
            self._forget()

    def _forget(self) -> None:
        # Caller holds the lock.
        self._clean.clear()
        self._generation.clear()
        self._epoch += 1
