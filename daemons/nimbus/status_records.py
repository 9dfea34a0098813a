"""A topology's status as nimbus answers it (``GET /api/v1/topologies/<name>``, read by
``squall status`` and the web UI): typed records, made by ``status.topology_status`` from the
worker stats the supervisors report, with ``to_dict`` giving the API's JSON."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ExecutorId = tuple[int, int]
Rates = dict[str, float]  # per second over the rate window: emitted, executed, acked, failed


@dataclass(frozen=True)
class MetricRow:
    """One value of a metric a task registered (``key`` None for a plain metric)."""

    task: str
    name: str
    key: str | None
    value: float

    def to_dict(self) -> dict[str, Any]:
        return {"task": self.task, "name": self.name, "key": self.key, "value": self.value}


@dataclass
class ExecutorStatus:
    """One executor: where it runs (None while unassigned), its counters since its worker
    started, latencies in ms, rates (None without two beats in the window), input dropped by
    cause, and its tasks' registered metrics."""

    executor: ExecutorId
    node: str | None = None
    host: str | None = None
    port: int | None = None
    uptime: float | None = None
    beat_age: float | None = None
    emitted: int = 0  # user streams
    acked: int = 0
    failed: int = 0
    executed: int = 0
    capacity: float | None = None
    execute_latency_ms: float | None = None
    complete_latency_ms: float | None = None
    streams: dict[str, int] = field(default_factory=dict)  # emitted per user stream
    rates: Rates | None = None
    dropped_by_cause: dict[str, int] = field(default_factory=dict)
    metrics: list[MetricRow] = field(default_factory=list)

    @property
    def tasks(self) -> int:
        return self.executor[1] - self.executor[0] + 1

    @property
    def dropped(self) -> int:
        return sum(self.dropped_by_cause.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "executor": list(self.executor), "tasks": self.tasks, "node": self.node, "host": self.host,
            "port": self.port, "uptime": self.uptime, "beat_age": self.beat_age, "emitted": self.emitted,
            "acked": self.acked, "failed": self.failed, "executed": self.executed, "capacity": self.capacity,
            "execute_latency_ms": self.execute_latency_ms, "complete_latency_ms": self.complete_latency_ms,
            "streams": dict(self.streams), "rates": self.rates, "dropped_by_cause": dict(self.dropped_by_cause),
            "metrics": [m.to_dict() for m in self.metrics], "dropped": self.dropped}


def _weighted(rows: list[tuple[float | None, int]]) -> float | None:
    """Mean of the values that are known, weighted (plain mean when no weight is positive)."""
    pairs = [(v, w) for v, w in rows if v is not None]
    total = sum(w for _, w in pairs)
    if not pairs:
        return None
    if total <= 0:
        return round(sum(v for v, _ in pairs) / len(pairs), 4)
    return round(sum(v * w for v, w in pairs) / total, 4)


@dataclass
class ComponentStatus:
    """A component: its kind, parallelism, inputs (source component, stream, grouping), its
    executors, totals over them, rates (None when no executor has one), its last error and
    its windows (``history.py``: rates and latencies over 10m, 3h, 1d and all time)."""

    id: str
    kind: str | None
    parallelism: int | None
    inputs: list[dict[str, str]]
    executors: list[ExecutorStatus] = field(default_factory=list)
    rates: Rates | None = None
    last_error: dict[str, Any] | None = None
    windows: dict[str, Any] | None = None

    def total(self, counter: str) -> int:
        return sum(getattr(e, counter) for e in self.executors)

    @property
    def capacity(self) -> float | None:
        """Storm's component capacity: its busiest executor's."""
        known = [e.capacity for e in self.executors if e.capacity is not None]
        return max(known) if known else None

    def streams(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for e in self.executors:
            for stream, n in e.streams.items():
                out[stream] = out.get(stream, 0) + n
        return out

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "kind": self.kind, "parallelism": self.parallelism,
                               "inputs": self.inputs, "executors": [e.to_dict() for e in self.executors]}
        for counter in ("tasks", "emitted", "acked", "failed", "executed", "dropped"):
            out[counter] = self.total(counter)
        out.update(streams=self.streams(), capacity=self.capacity,
                   execute_latency_ms=_weighted([(e.execute_latency_ms, e.executed) for e in self.executors]),
                   complete_latency_ms=_weighted([(e.complete_latency_ms, e.acked) for e in self.executors]),
                   rates=self.rates, last_error=self.last_error, windows=self.windows)
        return out


@dataclass
class WorkerStatus:
    """One assigned worker: where, how many executors, its uptime (None before its first
    beat), its receive side's refusals and the input it dropped for no executor, by cause."""

    node: str
    host: str | None
    port: int
    executors: int
    uptime: float | None
    transport: dict[str, int] = field(default_factory=dict)
    dropped_by_cause: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "host": self.host, "port": self.port, "executors": self.executors,
                "uptime": self.uptime, "transport": dict(self.transport),
                "dropped_by_cause": dict(self.dropped_by_cause)}


@dataclass
class TopologyStatus:
    """A topology: who owns it, its status, workers, components (user ones first, then
    system ones such as ``__acker``), the rate window, and ``worker_error``: the last error
    a supervisor reported about a whole worker."""

    id: str
    name: str
    owner: str
    status: str
    uptime: float
    submitted_at: float
    requested_workers: int
    executors: int
    code_digest: str
    rate_window_secs: float | None
    workers: list[WorkerStatus] = field(default_factory=list)
    components: list[ComponentStatus] = field(default_factory=list)
    worker_error: dict[str, Any] | None = None
    state_namespace: str | None = None  # where its checkpointed state lives (nimbus chose it)
    unusable_slots: list[dict[str, Any]] = field(default_factory=list)  # the cluster's, whose port is held

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "name": self.name, "owner": self.owner, "status": self.status, "uptime": self.uptime,
            "submitted_at": self.submitted_at, "requested_workers": self.requested_workers,
            "workers": [w.to_dict() for w in self.workers], "executors": self.executors,
            "code_digest": self.code_digest, "rate_window_secs": self.rate_window_secs,
            "components": [c.to_dict() for c in self.components], "worker_error": self.worker_error,
            "state_namespace": self.state_namespace, "unusable_slots": list(self.unusable_slots)}
