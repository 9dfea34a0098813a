"""A warning given once per key: a condition that lasts (a malformed node, no free slot, a
bad heartbeat file) is said when it starts, not every round while it lasts."""
from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any


class WarnOnce:
    """``warn(key, event, **fields)`` logs ``event`` the first time ``key`` is seen, until the
    key is discarded or forgotten."""

    def __init__(self, log: Any) -> None:
        self.log = log
        self._keys: set[Hashable] = set()

    def __call__(self, key: Hashable, event: str, **fields: Any) -> None:
        if key not in self._keys:
            self._keys.add(key)
            self.log.warning(event, **fields)

    def discard(self, key: Hashable) -> None:
        self._keys.discard(key)

    def forget(self, gone: Callable[[Any], bool]) -> None:
        """Drop every key for which ``gone`` is true (their conditions may be said again)."""
        self._keys = {k for k in self._keys if not gone(k)}
