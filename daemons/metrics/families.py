"""Metric families built from plain snapshots, at scrape time (no metric objects per tuple).

``Series`` collects samples by metric name; ``families()`` turns them into
prometheus_client metric families. ``add_worker_snapshot`` reads a worker's metrics
snapshot (JSON a worker writes next to its heartbeat, see :mod:`squall.daemons.worker.metrics`):
it comes from outside the supervisor's process, so every value is checked and a bad
snapshot is refused whole (ValueError naming the problem) rather than half exported.
The labels that say whose series they are (topology, port) come from the supervisor's own
records, never from the file.
"""
from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from squall.daemons.fields import as_dict

COUNTER, GAUGE, HISTOGRAM = "counter", "gauge", "histogram"

EXECUTOR = ("topology", "component", "executor")
TASK = ("topology", "component", "task")
WORKER = ("topology", "port")

# name -> (type, help, label names). Counters are named without ``_total`` (the client adds it).
SPECS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    # tasks and executors (from worker snapshots)
    "squall_task_emitted": (COUNTER, "Tuples emitted by a task, per stream.", (*TASK, "stream")),
    "squall_task_executed": (COUNTER, "Tuples executed by a task (an acker counts finished trees).", TASK),
    "squall_task_acked": (COUNTER, "Tuples acked: input tuples of a bolt, tuple trees of a spout.", TASK),
    "squall_task_failed": (COUNTER, "Tuples failed (a spout counts timed-out trees too).", TASK),
    "squall_executor_transferred": (COUNTER, "Tuples an executor handed on to target tasks.", EXECUTOR),
    "squall_executor_errors": (COUNTER, "Errors raised by user code in an executor.", EXECUTOR),
    "squall_executor_execute_latency_seconds": (
        HISTOGRAM, "Time of one bolt execute call (each batch counted at its mean).", EXECUTOR),
    "squall_executor_complete_latency_seconds": (
        HISTOGRAM, "Spout tuple emit to tree complete (up to 16 trees per ack batch sampled).", EXECUTOR),
    "squall_executor_receive_queue_depth": (GAUGE, "Tuples waiting in an executor's receive queue.", EXECUTOR),
    "squall_executor_receive_queue_capacity": (GAUGE, "Bound of an executor's receive queue.", EXECUTOR),
    "squall_executor_backpressure": (GAUGE, "1 while the executor's queue has raised backpressure.", EXECUTOR),
    # workers (from worker snapshots)
    "squall_worker_frames_received": (COUNTER, "Frames the worker's receive socket took in.", WORKER),
    "squall_worker_bytes_received": (COUNTER, "Bytes of those frames.", WORKER),
    "squall_worker_frames_sent": (COUNTER, "Frames the worker sent to other workers.", WORKER),
    "squall_worker_bytes_sent": (COUNTER, "Bytes of those frames.", WORKER),
    "squall_worker_dropped": (COUNTER, "Messages dropped on receipt or send, by cause.", (*WORKER, "cause")),
    "squall_worker_reconnects": (COUNTER, "Connections to a peer worker made again after a loss.", WORKER),
    "squall_worker_blocked_sends": (COUNTER, "Sends that waited for a peer at the high-water mark.", WORKER),
    "squall_worker_refused_connections": (COUNTER, "Handshakes refused (no CURVE, a foreign key, garbage).",
                                          WORKER),
    "squall_worker_refused_keys": (COUNTER, "CURVE keys the worker's ZAP handler refused.", WORKER),
    "squall_worker_transfer_queue_depth": (GAUGE, "Tuples waiting in the worker transfer queue.", WORKER),
    "squall_worker_transfer_queue_capacity": (GAUGE, "Bound of the worker transfer queue.", WORKER),
    "squall_worker_resident_memory_bytes": (GAUGE, "Resident set size of the worker process.", WORKER),
    "squall_worker_cpu_seconds": (COUNTER, "CPU time of the worker process.", (*WORKER, "mode")),
    "squall_worker_gc_collections": (COUNTER, "Cyclic GC runs in the worker, per generation.",
                                     (*WORKER, "generation")),
    "squall_worker_uptime_seconds": (GAUGE, "Seconds since the worker process started.", WORKER),
    "squall_worker_snapshot_age_seconds": (GAUGE, "Age of the worker's metrics snapshot at scrape time.",
                                           WORKER),
    # supervisor
    "squall_supervisor_slots_used": (GAUGE, "Slots (ports) of this supervisor in use.", ()),
    "squall_supervisor_slots_free": (GAUGE, "Slots (ports) of this supervisor free.", ()),
    "squall_supervisor_workers": (GAUGE, "Worker processes this supervisor owns.", ()),
    "squall_supervisor_worker_launches": (COUNTER, "Worker processes launched.", ()),
    "squall_supervisor_worker_restarts": (COUNTER, "Launches that relaunched a worker of the same assignment.", ()),
    "squall_supervisor_worker_kills": (COUNTER, "Signals sent to stop workers.", ("signal",)),
    "squall_supervisor_bad_worker_snapshots": (COUNTER, "Worker metrics snapshots refused as malformed.", ()),
    "squall_supervisor_malformed_heartbeats": (COUNTER, "Worker heartbeat files ignored as malformed.", ()),
    # any daemon serving HTTP(S) (daemons/http/server.py)
    "squall_http_refused": (COUNTER, "Requests and connections the daemon's HTTP servers refused, by reason "
                                     "(docs/operations/security.md lists them).", ("reason",)),
    "squall_tls_reloads": (COUNTER, "Changed TLS certificate/key files put in force (loaded) or refused "
                                    "(the old ones kept).", ("result",)),
    # nimbus
    "squall_nimbus_leader": (GAUGE, "1 while this nimbus is the leader.", ()),
    "squall_nimbus_topologies": (GAUGE, "Topologies on the cluster, by status.", ("status",)),
    "squall_nimbus_supervisors": (GAUGE, "Registered supervisors.", ()),
    "squall_nimbus_slots": (GAUGE, "Worker slots of registered supervisors, by state.", ("state",)),
    "squall_nimbus_scheduling_rounds": (COUNTER, "Leader rounds that checked beats and reassigned.", ()),
    "squall_nimbus_assignments_written": (COUNTER, "Assignments written (new, moved or rebalanced).", ()),
    "squall_nimbus_executors_moved": (COUNTER, "Executors moved from one slot to another.", ()),
    "squall_nimbus_round_seconds": (GAUGE, "How long the leader's last round took.", ()),
    "squall_nimbus_round_cpu_seconds": (GAUGE, "CPU the leader's last round used (its thread).", ()),
    "squall_nimbus_supervisor_reports": (COUNTER, "Supervisor reports taken or refused, by result.",
                                         ("result",)),
}

MAX_LABEL = 200  # longest label value taken from a snapshot
# Metrics components register themselves (squall.metrics): squall_metric_<name>, labelled by
# task and by the metric's own key label. Their names are checked like the registry does.
USER_PREFIX = "squall_metric_"
USER_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]{0,63}$")


class Series:
    """Samples by metric name, turned into metric families at the end of a scrape."""

    def __init__(self) -> None:
        self.samples: dict[str, list[tuple[tuple[str, ...], Any]]] = {}
        self.specs: dict[str, tuple[str, str, tuple[str, ...]]] = {}  # registered metrics' families
        self.conflicts = 0  # registered metrics' samples left out: a name with another kind or label

    def add(self, name: str, labels: Sequence[str], value: Any) -> None:
        if len(labels) != len(SPECS[name][2]):
            raise ValueError(f"{name} takes labels {SPECS[name][2]}, got {tuple(labels)}")
        self.samples.setdefault(name, []).append((tuple(labels), value))

    def add_registered(self, name: str, kind: str, label_names: tuple[str, ...], labels: Sequence[str],
                       value: float) -> None:
        """A sample of a metric a component registered; the first kind and labels seen for a
        name win (Prometheus allows one type per family), later mismatches are counted."""
        spec = (kind, f"Metric {name[len(USER_PREFIX):]!r} registered by components.", label_names)
        have = self.specs.setdefault(name, spec)
        if have[0] != kind or have[2] != label_names:
            self.conflicts += 1
            return
        self.samples.setdefault(name, []).append((tuple(labels), value))

    def extend(self, other: Series) -> None:
        for name, rows in other.samples.items():
            spec = other.specs.get(name)
            if spec is not None:
                have = self.specs.setdefault(name, spec)
                if have != spec:
                    self.conflicts += len(rows)
                    continue
            self.samples.setdefault(name, []).extend(rows)
        self.conflicts += other.conflicts

    def families(self) -> list[Metric]:
        out: list[Metric] = []
        for name, rows in self.samples.items():
            kind, doc, labels = self.specs.get(name) or SPECS[name]
            if kind == COUNTER:
                counter = CounterMetricFamily(name, doc, labels=labels)
                for lv, value in rows:
                    counter.add_metric(lv, value)
                out.append(counter)
            elif kind == GAUGE:
                gauge = GaugeMetricFamily(name, doc, labels=labels)
                for lv, value in rows:
                    gauge.add_metric(lv, value)
                out.append(gauge)
            else:
                histogram = HistogramMetricFamily(name, doc, labels=labels)
                for lv, (buckets, total) in rows:
                    histogram.add_metric(lv, buckets, total)
                out.append(histogram)
        return out


# --- checked reads of untrusted values ------------------------------------------------

def number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{what} is {value!r}, not a finite number")
    return float(value)


def count(value: Any, what: str) -> float:
    n = number(value, what)
    if n < 0:
        raise ValueError(f"{what} is negative ({value!r})")
    return n


def _task_id(value: Any, what: str) -> int:
    """A task id: from 1, or -1 (every worker's __system task, as in Storm)."""
    n = number(value, what)
    if n != int(n) or n < -1 or n == 0:
        raise ValueError(f"{what} is not a task id ({value!r})")
    return int(n)


def label(value: Any, what: str) -> str:
    text = str(value)
    if not isinstance(value, (str, int)) or isinstance(value, bool) or not text.isprintable() \
            or not 0 < len(text) <= MAX_LABEL:
        raise ValueError(f"{what} {value!r} is not a usable label value")
    return text


def histogram(value: Any, what: str) -> tuple[list[tuple[str, float]], float]:
    """A snapshot histogram (bounds, per-bucket counts, sum) as Prometheus's cumulative buckets."""
    h = as_dict(value, what)
    bounds, counts = h.get("bounds"), h.get("counts")
    if not isinstance(bounds, list) or not isinstance(counts, list) or len(counts) != len(bounds) + 1 \
            or len(bounds) > 64:
        raise ValueError(f"{what} needs bounds and one more count than bounds")
    edges = [number(b, f"{what} bound") for b in bounds]
    if any(b >= c for b, c in zip(edges, edges[1:])):
        raise ValueError(f"{what} bounds are not increasing")
    buckets, total = [], 0.0
    for edge, n in zip([*edges, math.inf], counts):
        total += count(n, f"{what} count")
        buckets.append((floatToGoString(edge), total))
    return buckets, count(h.get("sum"), f"{what} sum")


# --- a worker's snapshot -----------------------------------------------------------------

def add_worker_snapshot(series: Series, snapshot: Any, topology: str, port: int, now: float) -> None:
    """Add one worker's series; ValueError (nothing added) when the snapshot is malformed."""
    snap = as_dict(snapshot, "snapshot")
    if snap.get("version") != 1:
        raise ValueError(f"snapshot version {snap.get('version')!r} is not 1")
    mine = Series()
    worker = (topology, str(port))
    execs = snap.get("executors")
    if not isinstance(execs, list):
        raise ValueError("snapshot executors is not a list")
    for i, raw in enumerate(execs):
        _add_executor(mine, as_dict(raw, f"executor {i}"), topology)
    transport = as_dict(snap.get("transport"), "transport")
    for key, name in (("frames_in", "squall_worker_frames_received"), ("bytes_in", "squall_worker_bytes_received"),
                      ("frames_out", "squall_worker_frames_sent"), ("bytes_out", "squall_worker_bytes_sent"),
                      ("reconnects", "squall_worker_reconnects"), ("blocked_sends", "squall_worker_blocked_sends"),
                      ("refused_connections", "squall_worker_refused_connections"),
                      ("refused_keys", "squall_worker_refused_keys")):
        mine.add(name, worker, count(transport.get(key), f"transport {key}"))
    for cause, n in as_dict(snap.get("dropped"), "dropped").items():
        mine.add("squall_worker_dropped", (*worker, label(cause, "drop cause")), count(n, f"dropped {cause}"))
    mine.add("squall_worker_transfer_queue_depth", worker, count(snap.get("transfer_queue"), "transfer_queue"))
    mine.add("squall_worker_transfer_queue_capacity", worker,
             count(snap.get("transfer_queue_capacity"), "transfer_queue_capacity"))
    proc = as_dict(snap.get("process"), "process")
    mine.add("squall_worker_resident_memory_bytes", worker, count(proc.get("rss"), "process rss"))
    for mode in ("user", "system"):
        mine.add("squall_worker_cpu_seconds", (*worker, mode), count(proc.get(f"cpu_{mode}"), f"cpu_{mode}"))
    gcs = proc.get("gc_collections")
    if not isinstance(gcs, list) or len(gcs) > 8:
        raise ValueError("process gc_collections is not a short list")
    for gen, n in enumerate(gcs):
        mine.add("squall_worker_gc_collections", (*worker, str(gen)), count(n, f"gc generation {gen}"))
    mine.add("squall_worker_uptime_seconds", worker, count(snap.get("uptime"), "uptime"))
    mine.add("squall_worker_snapshot_age_seconds", worker, max(0.0, now - number(snap.get("time"), "time")))
    series.extend(mine)


def _add_executor(series: Series, ex: Mapping[str, Any], topology: str) -> None:
    component = label(ex.get("component"), "component")
    span = ex.get("executor")
    if not isinstance(span, list) or len(span) != 2:
        raise ValueError(f"executor of {component} is {span!r}, not [start, end]")
    executor = f"{_task_id(span[0], 'executor start')}-{_task_id(span[1], 'executor end')}"
    labels = (topology, component, executor)
    for task, counts in as_dict(ex.get("tasks"), f"tasks of {component}").items():
        t = (topology, component, label(task, "task"))
        counts = as_dict(counts, f"task {task}")
        for stream, n in as_dict(counts.get("emitted", {}), f"emitted of task {task}").items():
            series.add("squall_task_emitted", (*t, label(stream, "stream")), count(n, f"emitted {stream}"))
        for key in ("executed", "acked", "failed"):
            if key in counts:
                series.add(f"squall_task_{key}", t, count(counts[key], f"{key} of task {task}"))
    series.add("squall_executor_transferred", labels, count(ex.get("transferred"), "transferred"))
    series.add("squall_executor_errors", labels, count(ex.get("errors"), "errors"))
    series.add("squall_executor_receive_queue_depth", labels, count(ex.get("queue"), "queue"))
    series.add("squall_executor_receive_queue_capacity", labels, count(ex.get("queue_capacity"), "queue_capacity"))
    series.add("squall_executor_backpressure", labels, 1.0 if ex.get("backpressure") is True else 0.0)
    for key in ("execute_latency", "complete_latency"):
        if key in ex:
            series.add(f"squall_executor_{key}_seconds", labels, histogram(ex[key], f"{key} of {component}"))
    for task, metrics in as_dict(ex.get("metrics", {}), f"metrics of {component}").items():
        t = (topology, component, label(task, "task"))
        for name, entry in as_dict(metrics, f"metrics of task {task}").items():
            _add_registered(series, t, name, as_dict(entry, f"metric {name!r} of task {task}"))


def _add_registered(series: Series, task: tuple[str, str, str], name: Any, entry: Mapping[str, Any]) -> None:
    """One registered metric of one task (see squall.metrics.MetricRegistry.snapshot)."""
    if not isinstance(name, str) or not USER_NAME.match(name):
        raise ValueError(f"metric name {name!r} is not usable")
    kind = entry.get("kind")
    if kind not in (COUNTER, GAUGE):
        raise ValueError(f"metric {name!r} has kind {kind!r}")
    check = count if kind == COUNTER else number
    full = USER_PREFIX + name
    key_label = entry.get("label")
    if key_label is None:
        series.add_registered(full, kind, TASK, task, check(entry.get("value"), f"metric {name!r}"))
        return
    if not isinstance(key_label, str) or not USER_NAME.match(key_label) or key_label in TASK:
        raise ValueError(f"metric {name!r} has label {key_label!r}")
    values = as_dict(entry.get("value"), f"metric {name!r} values")
    if len(values) > 1000:
        raise ValueError(f"metric {name!r} has {len(values)} keys")
    for key, value in values.items():
        series.add_registered(full, kind, (*TASK, key_label), (*task, label(key, f"metric {name!r} key")),
                              check(value, f"metric {name!r} {key}"))
