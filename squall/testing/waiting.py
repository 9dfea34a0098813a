"""Bounded waiting for tests and harnesses: poll, never sleep-and-hope."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_for(predicate: Callable[[], Any], timeout: float = 30.0, what: str = "condition",
             detail: Callable[[], str] | None = None, *, interval: float = 0.02) -> Any:
    """Poll ``predicate`` until it returns something truthy and return that; after
    ``timeout`` seconds raise AssertionError naming ``what`` (plus ``detail()`` if given)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            extra = f"\n{detail()}" if detail else ""
            raise AssertionError(f"timed out after {timeout}s waiting for {what}{extra}")
        time.sleep(interval)
