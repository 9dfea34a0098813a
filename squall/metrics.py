"""Metrics a component publishes about itself (Storm's IMetric and ``registerMetric``).

A spout or bolt registers a metric object on its context in ``open``/``prepare``::

    self.records = context.register_metric("records", CountMetric(), 10)
    self.lag = context.register_metric("lag", MultiGaugeMetric("partition"), 10)

and updates it from its own thread (``self.records.incr()``, ``self.lag.set("t-0", 12)``).
Every ``time_bucket_secs`` the runtime reads each metric with ``get_value_and_reset`` (a
Storm data point per bucket, which the ``__system`` component hands to the topology's
metrics consumers, see squall.metrics_consumer) and keeps a running view for
Prometheus and ``squall status``: a counter metric's buckets are summed, a gauge shows its
last value. Labels are topology, component and task, plus a multi metric's ``label`` (its
keys, e.g. ``partition``).

Reads and updates may run on different threads without a lock: an update only adds to a
running total (one writer), a read only remembers how much of it was reported (one
reader, the registry, which serializes its readers).
"""
from __future__ import annotations

import re
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from squall.errors import SquallError

COUNTER, GAUGE = "counter", "gauge"
NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]{0,63}$")
MAX_METRICS = 64        # metrics one task may register
MAX_KEYS = 1000         # keys one multi metric shows; more are dropped and counted
MAX_KEY_CHARS = 200     # longest key shown (Prometheus exporters refuse longer label values)
MAX_DATAPOINTS = 10000  # data points kept for consumers between drains
RESERVED_LABELS = frozenset({"topology", "component", "task", "executor", "port", "stream"})


class MetricError(SquallError, ValueError):
    """A metric registered under a bad name, twice, or past the limit."""


@runtime_checkable
class IMetric(Protocol):
    """What the runtime reads of a metric: the value of the bucket that just ended (a
    number, a ``{key: number}`` map for multi metrics, or None for no data), and whether
    buckets add up (``counter``) or replace each other (``gauge``)."""

    kind: str

    def get_value_and_reset(self) -> Any:
        ...


class CountMetric:
    """A count (Storm's CountMetric): each bucket reports what was added in it."""

    kind = COUNTER
    label: str | None = None

    def __init__(self) -> None:
        self._total = 0
        self._reported = 0

    def incr(self, by: int = 1) -> None:
        self._total += by

    def get_value_and_reset(self) -> int:
        total = self._total
        delta, self._reported = total - self._reported, total
        return delta


class MultiCountMetric:
    """Counts by key (Storm's MultiCountMetric); ``label`` names the keys in Prometheus."""

    kind = COUNTER

    def __init__(self, label: str = "key") -> None:
        _check_name(label, "label")
        self.label = label
        self._totals: dict[str, int] = {}
        self._reported: dict[str, int] = {}

    def incr(self, key: str, by: int = 1) -> None:
        totals = self._totals
        totals[key] = totals.get(key, 0) + by

    def get_value_and_reset(self) -> dict[str, int]:
        out = {}
        for key, total in self._totals.copy().items():
            delta = total - self._reported.get(key, 0)
            if delta:
                out[key] = delta
                self._reported[key] = total
        return out


class CountShellMetric(CountMetric):
    """A count a multilang child updates with ``metrics`` commands (Storm's
    CountShellMetric, an IShellMetric): each command adds its integer ``params``."""

    def update_from_rpc(self, params: Any) -> None:
        if not isinstance(params, int) or isinstance(params, bool):
            raise MetricError(f"a count metric's params must be an integer, got {params!r:.40}")
        self.incr(params)


class GaugeMetric:
    """A value set from time to time (Storm's AssignableMetric); None until set."""

    kind = GAUGE
    label: str | None = None

    def __init__(self, value: float | None = None) -> None:
        self.value = value

    def set(self, value: float | None) -> None:
        self.value = value

    def get_value_and_reset(self) -> float | None:
        return self.value


class MultiGaugeMetric:
    """Values by key (e.g. lag per partition); ``remove`` drops a key that no longer applies."""

    kind = GAUGE

    def __init__(self, label: str = "key") -> None:
        _check_name(label, "label")
        self.label = label
        self._values: dict[str, float] = {}

    def set(self, key: str, value: float) -> None:
        self._values[key] = value

    def remove(self, key: str) -> None:
        self._values.pop(key, None)

    def get_value_and_reset(self) -> dict[str, float]:
        return self._values.copy()


def _check_name(name: Any, what: str) -> None:
    if not isinstance(name, str) or not NAME.match(name):
        raise MetricError(f"metric {what} {name!r} must match {NAME.pattern}")


class _Registered:
    __slots__ = ("name", "metric", "bucket", "due", "view", "label")

    def __init__(self, name: str, metric: IMetric, bucket: float, now: float) -> None:
        self.name, self.metric, self.bucket, self.due = name, metric, bucket, now + bucket
        self.label = getattr(metric, "label", None)
        self.view: Any = None  # counter: running sum; gauge: the last value


class MetricRegistry:
    """One task's registered metrics: read per bucket, viewed as running values.

    ``collect`` (called by whoever reads, at any time) reads the metrics whose bucket has
    ended; ``snapshot`` gives the running values for the stats and metrics snapshots;
    ``drain`` hands over the per-bucket data points (for metrics consumers).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._metrics: dict[str, _Registered] = {}
        self._lock = threading.Lock()  # stats and metrics snapshots are read from two threads
        # (bucket secs, name, value) per bucket read, kept only for metrics consumers
        self.datapoints: deque[tuple[float, str, Any]] | None = None
        self.dropped_keys = 0
        self.dropped_datapoints = 0  # read but never drained: over MAX_DATAPOINTS

    def keep_datapoints(self) -> None:
        """Keep each bucket's value for ``drain`` (a metrics consumer is registered)."""
        with self._lock:
            if self.datapoints is None:
                self.datapoints = deque(maxlen=MAX_DATAPOINTS)

    def register(self, name: str, metric: IMetric, time_bucket_secs: float) -> IMetric:
        _check_name(name, "name")
        if not callable(getattr(metric, "get_value_and_reset", None)) or \
                getattr(metric, "kind", None) not in (COUNTER, GAUGE):
            raise MetricError(f"metric {name!r}: {type(metric).__name__} has no get_value_and_reset "
                              f"or no kind ({COUNTER!r} or {GAUGE!r})")
        if isinstance(time_bucket_secs, bool) or not isinstance(time_bucket_secs, (int, float)) \
                or not 0 < time_bucket_secs <= 86400:
            raise MetricError(f"metric {name!r}: time_bucket_secs must be a number in (0, 86400], "
                              f"got {time_bucket_secs!r}")
        label = getattr(metric, "label", None)
        if label is not None:
            _check_name(label, "label")
            if label in RESERVED_LABELS:
                raise MetricError(f"metric {name!r}: label {label!r} is one the runtime sets")
        with self._lock:
            if name in self._metrics:
                raise MetricError(f"metric {name!r} is registered twice")
            if len(self._metrics) >= MAX_METRICS:
                raise MetricError(f"metric {name!r}: a task may register at most {MAX_METRICS} metrics")
            self._metrics[name] = _Registered(name, metric, float(time_bucket_secs), self._clock())
        return metric

    def __len__(self) -> int:
        return len(self._metrics)

    def get(self, name: str) -> IMetric | None:
        reg = self._metrics.get(name)
        return None if reg is None else reg.metric

    def collect(self, force: bool = False) -> None:
        """Read every metric whose bucket has ended (every one with ``force``)."""
        with self._lock:
            now = self._clock()
            for reg in self._metrics.values():
                if force or now >= reg.due:
                    reg.due = now + reg.bucket
                    self._read(reg, now)

    def _read(self, reg: _Registered, now: float) -> None:
        try:
            value = reg.metric.get_value_and_reset()
        except Exception:  # noqa: BLE001 - a user's metric raising must not stop the readers
            return
        points = self.datapoints
        if points is not None:
            if len(points) == MAX_DATAPOINTS:
                self.dropped_datapoints += 1
            points.append((reg.bucket, reg.name, value))
        counter = reg.metric.kind == COUNTER
        if reg.label is None:
            if _is_number(value):
                reg.view = (reg.view or 0) + value if counter else value
            elif not counter:
                reg.view = None
            return
        if not isinstance(value, dict):
            return
        view = reg.view if isinstance(reg.view, dict) else {}
        fresh = {} if not counter else view  # a gauge map shows only its current keys
        for key, v in value.items():
            if not _is_number(v):
                continue
            key = str(key)
            if not 0 < len(key) <= MAX_KEY_CHARS or not key.isprintable():
                self.dropped_keys += 1  # not a usable label value: left out, not the whole snapshot
                continue
            if key not in fresh and len(fresh) >= MAX_KEYS:
                self.dropped_keys += 1
                continue
            fresh[key] = fresh.get(key, 0) + v if counter else v
        reg.view = fresh

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """name -> {"kind", "label" (multi metrics), "value" (a number or {key: number})}
        for the metrics that have a value; ends due buckets first."""
        self.collect()
        with self._lock:
            out = {}
            for name, reg in self._metrics.items():
                if reg.view is None:
                    continue
                entry: dict[str, Any] = {"kind": reg.metric.kind, "value": reg.view}
                if reg.label is not None:
                    entry["label"] = reg.label
                    entry["value"] = dict(reg.view)
                out[name] = entry
            return out

    def drain(self) -> list[tuple[float, str, Any]]:
        """(bucket secs, name, value) of every bucket read since the last drain, oldest
        first (at most MAX_DATAPOINTS; none unless ``keep_datapoints`` was called)."""
        with self._lock:
            if not self.datapoints:
                return []
            out = list(self.datapoints)
            self.datapoints.clear()
            return out


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value \
        and value not in (float("inf"), float("-inf"))


def task_snapshots(registries: dict[int, MetricRegistry]) -> dict[str, dict[str, dict[str, Any]]]:
    """task id (as text) -> its registry's snapshot, for the tasks that have values."""
    out = {}
    for task, registry in registries.items():
        if len(registry):
            snap = registry.snapshot()
            if snap:
                out[str(task)] = snap
    return out
