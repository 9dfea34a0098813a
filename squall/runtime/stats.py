"""What executors and their worker count, as typed records.

The runtime makes them (``Executor.stats``, ``WorkerRuntime.stats``); a worker process writes
them to its stats file, its supervisor sends them on in its report, and nimbus decodes them
for a status (``squall status``, the API, the web UI). Each record has a wire form, the JSON
object of ``to_dict`` (local mode's ``LocalCluster.stats`` returns it too), and reads one back
with ``from_dict``.

``from_dict`` reads what came from another process (a worker runs user code, and may be of
another squall version), so it trusts nothing and refuses nothing: a field of the wrong type
reads as absent, an entry that names no executor is left out (``ExecutorStats.from_dict``
returns None), and free-form parts (registered metrics, the figures of wrapping components)
keep only what has their documented shape. A status shows what it can.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

ExecutorId = tuple[int, int]
# What rates and windows are made of: emitted (user streams), executed, acked, failed, then
# what latencies over a window are made of: execute time in microseconds, complete latency in
# microseconds summed over the trees it was measured on, and how many trees that was.
Counters = tuple[int, int, int, int, int, int, int]
COUNTER_NAMES = ("emitted", "executed", "acked", "failed", "busy_us", "complete_us", "completed")
Scalar = int | float | str | bool | None
# The metrics one executor's tasks registered (squall.metrics.task_snapshots): task id as
# text -> metric name -> {"kind": str, "value": number or {key: number}, "label": str}.
TaskMetrics = dict[str, dict[str, dict[str, Any]]]

MAX_SECTION_ITEMS = 64  # figures one wrapping component's section may hold
MAX_SECTIONS = 16


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _micros(value: float | None) -> int:
    return int(value * 1e6) if value is not None and value >= 0 else 0


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _int_map(value: Any) -> dict[str, int]:
    """``{name: count}``, keeping the entries whose count is an integer."""
    if not isinstance(value, dict):
        return {}
    return {str(k): v for k, v in value.items() if _int(v) is not None}


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, (int, float, str, bool))


def _metric(value: Any) -> dict[str, Any] | None:
    """One registered metric's snapshot, if it has the documented shape."""
    if not isinstance(value, dict) or not isinstance(value.get("kind", ""), str):
        return None
    v = value.get("value")
    if isinstance(v, dict):
        if not all(_num(x) is not None for x in v.values()):
            return None
        v = {str(k): x for k, x in v.items()}
    elif _num(v) is None:
        return None
    out = {"kind": str(value.get("kind", "")), "value": v}
    if isinstance(value.get("label"), str):
        out["label"] = value["label"]
    return out


def _task_metrics(value: Any) -> TaskMetrics:
    out: TaskMetrics = {}
    for task, metrics in value.items() if isinstance(value, dict) else ():
        if isinstance(metrics, dict):
            kept = {str(name): m for name, m in ((name, _metric(m)) for name, m in metrics.items()) if m is not None}
            if kept:
                out[str(task)] = kept
    return out


@dataclass(frozen=True)
class Latency:
    """Complete latency of a spout's tuple trees, in milliseconds."""

    p50: float
    p99: float

    def to_dict(self) -> dict[str, float]:
        return {"p50": self.p50, "p99": self.p99}

    @classmethod
    def from_dict(cls, value: Any) -> Latency | None:
        if not isinstance(value, dict):
            return None
        p50, p99 = _num(value.get("p50")), _num(value.get("p99"))
        return None if p50 is None or p99 is None else cls(p50, p99)


# Wire keys of ExecutorStats; any other key whose value is an object is a section.
_EXECUTOR_KEYS = frozenset({
    "component", "executor", "kind", "emitted", "executed", "errors", "queue", "queue_peak", "metrics",
    "acked", "failed", "busy_secs", "pending", "waits", "complete_latency_ms", "complete_latency_sum_secs",
    "complete_latency_count", "pending_trees", "dropped", "capacity"})


@dataclass
class ExecutorStats:
    """One executor's counters since its worker started. Fields a kind does not count are
    None and left out of the wire form: ``acked``/``failed`` (spouts and bolts),
    ``busy_secs`` (bolts: seconds in user code), ``pending`` (spouts: trees in flight),
    ``waits`` (spouts: times a task's ``next_tuple`` emitted nothing and the task was then
    held for its wait strategy's time),
    ``complete_latency`` (spouts: median and 99th percentile) with its sum and count since
    the start (``complete_latency_sum_secs``, ``complete_latency_count``: nimbus takes
    latencies over any window from them), ``pending_trees`` (the acker). ``dropped`` is the input
    its worker refused for it, by cause; ``capacity`` the share of the last stats period it
    spent executing (set by a worker process, Storm's capacity); ``sections`` the figures
    of wrapping components (``{"checkpoint": {...}}``, ``squall.runtime.wrapping``)."""

    component: str
    executor: ExecutorId
    kind: str
    emitted: dict[str, int] = field(default_factory=dict)  # per stream, system streams included
    executed: int = 0
    errors: int = 0
    queue: int = 0
    queue_peak: int = 0
    metrics: TaskMetrics = field(default_factory=dict)
    acked: int | None = None
    failed: int | None = None
    busy_secs: float | None = None
    pending: int | None = None
    waits: int | None = None
    complete_latency: Latency | None = None
    complete_latency_sum_secs: float | None = None
    complete_latency_count: int | None = None
    pending_trees: int | None = None
    dropped: dict[str, int] = field(default_factory=dict)
    capacity: float | None = None
    sections: dict[str, dict[str, Scalar]] = field(default_factory=dict)

    @property
    def user_emitted(self) -> int:
        """Tuples emitted on user streams (system streams such as acker traffic left out)."""
        return sum(n for stream, n in self.emitted.items() if not stream.startswith("__"))

    def counters(self) -> Counters:
        """What rates and windows are made of (COUNTER_NAMES)."""
        return (self.user_emitted, self.executed, self.acked or 0, self.failed or 0, _micros(self.busy_secs),
                _micros(self.complete_latency_sum_secs), self.complete_latency_count or 0)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "component": self.component, "executor": list(self.executor), "kind": self.kind,
            "emitted": dict(self.emitted), "executed": self.executed, "errors": self.errors,
            "queue": self.queue, "queue_peak": self.queue_peak, "metrics": self.metrics}
        out.update((name, dict(figures)) for name, figures in self.sections.items())
        for key, value in (("acked", self.acked), ("failed", self.failed), ("busy_secs", self.busy_secs),
                           ("pending", self.pending), ("waits", self.waits), ("pending_trees", self.pending_trees),
                           ("complete_latency_sum_secs", self.complete_latency_sum_secs),
                           ("complete_latency_count", self.complete_latency_count)):
            if value is not None:
                out[key] = value
        if self.complete_latency is not None:
            out["complete_latency_ms"] = self.complete_latency.to_dict()
        out["dropped"] = dict(self.dropped)
        if self.capacity is not None:
            out["capacity"] = self.capacity
        return out

    @classmethod
    def from_dict(cls, d: Any) -> ExecutorStats | None:
        """The record of a wire form; None when it names no executor (see the module doc)."""
        ex = d.get("executor") if isinstance(d, dict) else None
        if not (isinstance(ex, (list, tuple)) and len(ex) == 2 and all(_int(t) is not None for t in ex)):
            return None
        emitted = d.get("emitted")
        sections: dict[str, dict[str, Scalar]] = {}
        for key, value in d.items():
            if key not in _EXECUTOR_KEYS and isinstance(value, dict) and len(sections) < MAX_SECTIONS:
                sections[str(key)] = {str(k): v for k, v in list(value.items())[:MAX_SECTION_ITEMS] if _scalar(v)}
        return cls(
            component=_str(d.get("component")) or "?", executor=(ex[0], ex[1]), kind=_str(d.get("kind")) or "?",
            # a count without streams (an early worker's form) is the default stream's
            emitted=_int_map(emitted) if _int(emitted) is None else {"default": emitted},
            executed=_int(d.get("executed")) or 0, errors=_int(d.get("errors")) or 0,
            queue=_int(d.get("queue")) or 0, queue_peak=_int(d.get("queue_peak")) or 0,
            metrics=_task_metrics(d.get("metrics")), acked=_int(d.get("acked")), failed=_int(d.get("failed")),
            busy_secs=_num(d.get("busy_secs")), pending=_int(d.get("pending")), waits=_int(d.get("waits")),
            complete_latency=Latency.from_dict(d.get("complete_latency_ms")),
            complete_latency_sum_secs=_num(d.get("complete_latency_sum_secs")),
            complete_latency_count=_int(d.get("complete_latency_count")),
            pending_trees=_int(d.get("pending_trees")), dropped=_int_map(d.get("dropped")),
            capacity=_num(d.get("capacity")), sections=sections)


@dataclass
class TransportStats:
    """What a worker counts that belongs to no executor: frames refused (``bad_frames``;
    input dropped by cause in ``dropped``), handshakes refused (a peer without the
    topology's CURVE key), keys refused by the ZAP handler, payload bytes held for slow or
    unreachable peers, tuples that could not be serialized."""

    bad_frames: int = 0
    refused_connections: int = 0
    refused_keys: int = 0
    dropped_unknown_task: int = 0
    dropped_bad_payload: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    held_bytes: int = 0
    unserializable: int = 0

    COUNTERS = ("refused_connections", "refused_keys", "bad_frames", "dropped_unknown_task", "dropped_bad_payload")

    def counters(self) -> dict[str, int]:
        """The receive side's refusals, by name (what a status shows of a worker)."""
        return {name: getattr(self, name) for name in self.COUNTERS}

    def to_dict(self) -> dict[str, Any]:
        return {**self.counters(), "dropped": dict(self.dropped), "held_bytes": self.held_bytes,
                "unserializable": self.unserializable}

    @classmethod
    def from_dict(cls, d: Any) -> TransportStats:
        if not isinstance(d, dict):
            return cls()
        counts = {name: _int(d.get(name)) or 0 for name in (*cls.COUNTERS, "held_bytes", "unserializable")}
        return cls(**counts, dropped=_int_map(d.get("dropped")))


@dataclass
class WorkerStats:
    """A worker's stats at ``time`` (its clock): every executor's (at most a budget's worth;
    ``executors_left_out`` counts the rest) and its transport's. ``time`` is None, and
    ``executors`` empty, before its executors start."""

    time: float | None = None
    executors: list[ExecutorStats] = field(default_factory=list)
    transport: TransportStats = field(default_factory=TransportStats)
    executors_left_out: int = 0

    def counters(self, executors: Iterable[ExecutorId]) -> dict[ExecutorId, Counters]:
        """Counters by executor, for the ``executors`` a worker runs (others are left out)."""
        named = set(executors)
        return {e.executor: e.counters() for e in self.executors if e.executor in named}

    def to_dict(self) -> dict[str, Any]:
        if self.time is None and not self.executors:
            return {}
        out: dict[str, Any] = {"executors": [e.to_dict() for e in self.executors],
                               "transport": self.transport.to_dict(), "time": self.time}
        if self.executors_left_out:
            out["executors_left_out"] = self.executors_left_out
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | Any) -> WorkerStats:
        if not isinstance(d, dict):
            return cls()
        rows = d.get("executors")
        entries = [ExecutorStats.from_dict(row) for row in rows] if isinstance(rows, list) else []
        return cls(time=_num(d.get("time")), executors=[e for e in entries if e is not None],
                   transport=TransportStats.from_dict(d.get("transport")),
                   executors_left_out=_int(d.get("executors_left_out")) or 0)
