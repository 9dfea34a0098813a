"""Sampling of the tuples components emit (Storm's event logger, behind the UI's Debug button).

While a component is sampled, its executors' outboxes deliver through a ``SampledDeliver``:
each tuple handed on to a target task is kept with probability ``percent / 100``, with its
component, source task, stream, target task, anchors (``{root id: edge id}``, as hex) and
values (shown as text, cut to a bound). Nothing changes on the hot path while nothing is
sampled: the outbox keeps the plain deliver function.

Bounded everywhere: at most ``max_per_sec`` samples a second per worker (the rest are
counted as skipped), at most ``MAX_VALUES`` values of at most ``MAX_VALUE_CHARS`` characters
each, and a ring of the last ``ring`` samples until the worker drains them (to its events log).
"""
from __future__ import annotations

import random
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

MAX_VALUES = 32
MAX_VALUE_CHARS = 200
MAX_PER_SEC = 200
RING = 5000

Deliver = Callable[[int, list], None]


def shown(value: Any) -> Any:
    """A value as a sample shows it: JSON scalars as they are (strings cut), anything else
    as its repr, cut."""
    if value is None or isinstance(value, (bool, int, float)):
        return value if not isinstance(value, int) or abs(value) < 2**53 else str(value)
    text = value if isinstance(value, str) else _repr(value)
    return text if len(text) <= MAX_VALUE_CHARS else text[:MAX_VALUE_CHARS] + "..."


def _repr(value: Any) -> str:
    try:
        return repr(value)
    except Exception as exc:  # noqa: BLE001 - a user type's __repr__ may raise
        return f"<{type(value).__name__}: repr failed: {exc!r}>"


class TupleSampler:
    """One worker's samples: the ring the sampled outboxes add to, the rate bound, counts."""

    def __init__(self, max_per_sec: int = MAX_PER_SEC, ring: int = RING,
                 wall: Callable[[], float] = time.time) -> None:
        self.max_per_sec = max_per_sec
        self._ring: deque[dict[str, Any]] = deque(maxlen=ring)
        self._lock = threading.Lock()
        self._wall = wall
        self._second = 0
        self._in_second = 0
        self.taken = 0
        self.skipped = 0  # chosen but over the rate bound

    def add(self, component: str, target: int, tup: Any) -> None:
        now = self._wall()
        with self._lock:
            second = int(now)
            if second != self._second:
                self._second, self._in_second = second, 0
            if self._in_second >= self.max_per_sec:
                self.skipped += 1
                return
            self._in_second += 1
            self.taken += 1
        source = tup.source
        values = list(tup.values)
        ids = tup.ids or {}
        sample = {"time": round(now, 3), "component": component, "task": source.task, "stream": source.stream,
                  "target": target, "anchors": {format(r, "x"): format(e, "x") for r, e in ids.items()},
                  "values": [shown(v) for v in values[:MAX_VALUES]]}
        if len(values) > MAX_VALUES:
            sample["values_left_out"] = len(values) - MAX_VALUES
        self._ring.append(sample)

    def drain(self) -> list[dict[str, Any]]:
        """The samples taken since the last drain, oldest first."""
        out = []
        while True:
            try:
                out.append(self._ring.popleft())
            except IndexError:
                return out


class SampledDeliver:
    """An outbox's deliver that samples what it hands on (user streams only)."""

    __slots__ = ("inner", "fraction", "component", "sampler", "_random")

    def __init__(self, inner: Deliver, percent: float, component: str, sampler: TupleSampler) -> None:
        self.inner = inner
        self.fraction = percent / 100.0
        self.component = component
        self.sampler = sampler
        self._random = random.random

    def __call__(self, task: int, tuples: list) -> None:
        fraction, rnd = self.fraction, self._random
        for tup in tuples:
            if rnd() < fraction and not tup.source.stream.startswith("__"):
                self.sampler.add(self.component, task, tup)
        self.inner(task, tuples)


def set_sampling(executors: Iterable[Any], percents: Callable[[str], float], sampler: TupleSampler) -> None:
    """Make each executor's outbox sample its component's emits at ``percents(component)``
    percent (0: deliver plainly again). Safe while executors run: one attribute store."""
    for ex in executors:
        outbox = ex.outbox
        current = outbox.deliver
        plain = current.inner if isinstance(current, SampledDeliver) else current
        percent = percents(ex.component) if not ex.component.startswith("__") else 0.0
        if percent > 0:
            if not isinstance(current, SampledDeliver) or current.fraction != percent / 100.0:
                outbox.deliver = SampledDeliver(plain, percent, ex.component, sampler)
        elif current is not plain:
            outbox.deliver = plain
