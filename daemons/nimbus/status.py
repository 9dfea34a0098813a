"""What nimbus reports (``squall list``, ``squall status``, ``/cluster``), as plain functions
of records read from ZooKeeper and the code store, and of the worker beats the supervisors
report to the leader."""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from squall.daemons.nimbus.rates import sum_rates
from squall.daemons.nimbus.scheduler import ExecutorId, Slot, slots_in_use
from squall.daemons.nimbus.status_records import (
    ComponentStatus,
    ExecutorStatus,
    MetricRow,
    TopologyStatus,
    WorkerStatus,
)
from squall.daemons.state import Assignment, ErrorInfo, SupervisorInfo, TopologyInfo, WorkerBeat
from squall.daemons.state.records import WORKER_COMPONENT
from squall.model import ACKER
from squall.runtime.stats import ExecutorStats
from squall.state.stores import NAMESPACE_KEY as NAMESPACE


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _inputs(spec: Any) -> list[dict[str, str]]:
    """A component's subscriptions from structure.json: source component, stream, grouping."""
    rows = spec.get("inputs") if isinstance(spec, dict) else None
    return [{"component": r[0], "stream": r[1], "grouping": r[2]} for r in rows or []
            if isinstance(r, list) and len(r) == 3 and all(isinstance(x, str) for x in r)]


MAX_METRIC_ROWS = 500  # registered-metric rows one executor shows in a status


def _metrics(entry: ExecutorStats) -> list[MetricRow]:
    """Metrics the executor's tasks registered (squall.metrics), flattened to rows of task,
    name, key (None for a plain metric) and value; at most MAX_METRIC_ROWS."""
    rows: list[MetricRow] = []
    for task, metrics in sorted(entry.metrics.items()):
        for name, m in sorted(metrics.items()):
            value = m["value"]
            values = value if isinstance(value, dict) else {None: value}
            for key, v in sorted(values.items(), key=lambda kv: str(kv[0])):
                if len(rows) < MAX_METRIC_ROWS:
                    rows.append(MetricRow(task, name, key, v))
    return rows


def _latencies(entry: ExecutorStats) -> tuple[float | None, float | None]:
    """(mean execute latency, median complete latency) in ms from one executor's stats."""
    busy, executed = entry.busy_secs, entry.executed
    execute = round(busy * 1000 / executed, 4) if busy is not None and executed > 0 else None
    complete = entry.complete_latency
    return execute, (round(complete.p50, 3) if complete is not None else None)


# Where a worker runs the topology's code: <local dir>/topologies/<id>/code/ (local_state).
_CODE_DIR = re.compile(r'File "[^"\n]*/topologies/[^/"\n]+/code/')


def group_errors(errors: Iterable[Mapping[str, Any]], kept: int | None = None) -> list[dict[str, Any]]:
    """Identical errors (one component, one text) as one entry each, newest first: the text
    (the newest one's), how many times, first and last time, and the tasks and workers that
    raised it. Tracebacks count as identical whichever supervisor's copy of the code they
    name (each host has its own local dir). Only the last ``kept`` errors of a component are
    kept (``topology.errors.kept``): where a component has that many, older ones were let go
    and its groups' counts are ``at_least`` (lower bounds)."""
    errors = list(errors)
    per_component = Counter(e["component"] for e in errors)
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for e in errors:
        key = (e["component"], _CODE_DIR.sub('File "', e["error"]))
        g = groups.get(key)
        if g is None:
            g = groups[key] = {"component": e["component"], "error": e["error"], "count": 0,
                               "first": e["time"], "last": e["time"], "tasks": set(), "workers": set()}
        g["count"] += 1
        if e["time"] > g["last"]:
            g["error"] = e["error"]
        g["first"], g["last"] = min(g["first"], e["time"]), max(g["last"], e["time"])
        g["tasks"].add(e["task"])
        g["workers"].add(f"{e['host']}:{e['port']}")
    out = sorted(groups.values(), key=lambda g: g["last"], reverse=True)
    for g in out:
        g["tasks"], g["workers"] = sorted(g["tasks"]), sorted(g["workers"])
        g["at_least"] = kept is not None and per_component[g["component"]] >= kept
    return out


UNREADABLE = "unreadable"  # the status shown for a topology whose ZooKeeper node is malformed
_ID = re.compile(r"^(.+)-\d+-\d+$")  # <name>-<n>-<time>, as nimbus makes ids


def name_of_id(topology_id: str) -> str:
    """The name a topology id was made from (the id itself when it is not of nimbus's form)."""
    match = _ID.match(topology_id)
    return match.group(1) if match else topology_id


def with_unreadable(entries: Mapping[str, TopologyInfo | None]) -> dict[str, TopologyInfo]:
    """Topologies by id, one whose node is malformed (None) stood in for by what its id
    says: its name (taken while it exists), status ``unreadable``, no owner (admins only)."""
    return {tid: info if info is not None else TopologyInfo(
        id=tid, name=name_of_id(tid), status=UNREADABLE, num_workers=0, component_parallelism={},
        code_digest="", submitted_at=float("nan"), conf={}, owner="") for tid, info in entries.items()}


def topology_rows(infos: Mapping[str, TopologyInfo], assignments: Mapping[str, Assignment],
                  now: float) -> list[dict[str, Any]]:
    """One row per topology for ``squall list`` (an unreadable one has no uptime)."""
    out = []
    for info in sorted(infos.values(), key=lambda i: (i.name, i.id)):
        a = assignments.get(info.id)
        unreadable = info.status == UNREADABLE
        out.append({
            "name": info.name, "id": info.id, "owner": info.owner, "status": info.status,
            "workers": len(a.slots()) if a else 0, "requested_workers": None if unreadable else info.num_workers,
            "executors": len(a.executors) if a else 0,
            "uptime": None if unreadable else round(now - info.submitted_at, 1),
            "submitted_at": None if unreadable else info.submitted_at,
        })
    return out


def assigned_stats(assignment: Assignment | None,
                   beats: Mapping[Slot, WorkerBeat]) -> dict[ExecutorId, tuple[ExecutorStats, WorkerBeat]]:
    """Each executor's stats and beat; stats count only from the beat of the slot the
    executor is assigned to."""
    placed = dict(assignment.executors) if assignment else {}
    stats: dict[ExecutorId, tuple[ExecutorStats, WorkerBeat]] = {}
    for slot, beat in beats.items():
        for entry in beat.stats.executors:
            if placed.get(entry.executor) == slot:
                stats[entry.executor] = (entry, beat)
    return stats


def _executor_status(ex: ExecutorId, entry: ExecutorStats | None, beat: WorkerBeat | None,
                     where: tuple[str, int] | None, hosts: Mapping[str, str], now: float,
                     rates: dict[str, float] | None) -> ExecutorStatus:
    node, port = where if where is not None else (None, None)
    row = ExecutorStatus(ex, node=node, host=hosts.get(node) if node else None, port=port,
                         uptime=round(beat.uptime, 1) if beat else None,
                         beat_age=round(now - beat.time, 1) if beat else None, rates=_rounded(rates))
    if entry is not None:
        row.emitted, row.executed = entry.user_emitted, entry.executed
        row.acked, row.failed = entry.acked or 0, entry.failed or 0
        row.capacity = entry.capacity
        row.execute_latency_ms, row.complete_latency_ms = _latencies(entry)
        row.streams = {s: n for s, n in entry.emitted.items() if not s.startswith("__")}
        row.dropped_by_cause = {k: v for k, v in entry.dropped.items() if v}
        row.metrics = _metrics(entry)
    return row


def topology_status(info: TopologyInfo, assignment: Assignment | None, beats: Mapping[Slot, WorkerBeat],
                    components: Mapping[ExecutorId, str], structure: Mapping[str, Any],
                    errors: Iterable[ErrorInfo], now: float,
                    rates: Mapping[ExecutorId, dict[str, float] | None] | None = None,
                    rate_window: float | None = None,
                    windows: Mapping[str, Any] | None = None) -> TopologyStatus:
    """Components with their executors (host, port, counters, per-second rates over the last
    ``rate_window`` seconds where ``rates`` has them), workers, last errors (a component's,
    and ``worker_error``: the last a supervisor reported about a whole worker)."""
    placed = dict(assignment.executors) if assignment else {}
    hosts = dict(assignment.node_host) if assignment else {}
    stats = assigned_stats(assignment, beats)
    rates = rates or {}
    specs = {c: e for c, e in (structure.get("components") or {}).items() if isinstance(e, dict)}
    kinds = {c: e.get("kind") for c, e in specs.items()}
    kinds.setdefault(ACKER, "acker")
    last_errors: dict[str, dict[str, Any]] = {}
    for err in errors:  # oldest first: the last one wins
        last_errors[err.component] = err.to_dict()
    by_component: dict[str, ComponentStatus] = {}
    for ex in sorted(set(placed) | set(components)):
        entry, beat = stats.get(ex, (None, None))
        component = components.get(ex) or (entry.component if entry is not None else "?")
        comp = by_component.get(component)
        if comp is None:
            comp = by_component[component] = ComponentStatus(
                component, kinds.get(component) or (entry.kind if entry is not None else None),
                info.component_parallelism.get(component), _inputs(specs.get(component)))
        comp.executors.append(_executor_status(ex, entry, beat, placed.get(ex), hosts, now, rates.get(ex)))
    for comp in by_component.values():
        comp.rates = _rounded(sum_rates(e.rates for e in comp.executors))
        comp.last_error = last_errors.get(comp.id)
        # Storm's windows (10m, 3h, 1d, all): rates and latencies the leader keeps over time.
        comp.windows = (windows or {}).get(comp.id)
    workers = [] if assignment is None else [
        _worker_status(node, port, hosts.get(node), len(assignment.executors_on(node, port)), beats.get((node, port)))
        for node, port in sorted(assignment.slots())]
    return TopologyStatus(
        id=info.id, name=info.name, owner=info.owner, status=info.status, uptime=round(now - info.submitted_at, 1),
        submitted_at=info.submitted_at, requested_workers=info.num_workers, executors=len(placed),
        code_digest=info.code_digest, rate_window_secs=rate_window, workers=workers,
        # User components first, then system ones (``__acker``).
        components=[by_component[c] for c in sorted(by_component, key=lambda c: (c.startswith("__"), c))],
        worker_error=last_errors.get(WORKER_COMPONENT),
        # Where its checkpointed state lives (nimbus chose it at submit): what spark-run's
        # topology.state.snapshot names, and what --carry-state carries over.
        state_namespace=_state_namespace(info.conf))


def _state_namespace(conf: Any) -> str | None:
    namespace = conf.get(NAMESPACE) if isinstance(conf, dict) else None
    return namespace if isinstance(namespace, str) else None



def _worker_status(node: str, port: int, host: str | None, executors: int, beat: WorkerBeat | None) -> WorkerStatus:
    if beat is None:
        return WorkerStatus(node, host, port, executors, None)
    transport = beat.stats.transport
    return WorkerStatus(node, host, port, executors, round(beat.uptime, 1), transport.counters(),
                        {k: v for k, v in transport.dropped.items() if v})


def _rounded(rates: Mapping[str, float] | None) -> dict[str, float] | None:
    return None if rates is None else {k: round(v, 2) for k, v in rates.items()}


def unusable_slots(sups: Mapping[str, SupervisorInfo]) -> list[dict[str, Any]]:
    """The cluster's slots whose port another process holds (the supervisor says why):
    nothing is assigned there until they are free."""
    return [{"node": sid, "host": s.host, "port": port, "reason": why}
            for sid, s in sorted(sups.items()) for port, why in sorted(s.unusable.items())]


def supervisor_rows(sups: Mapping[str, SupervisorInfo], assignments: Mapping[str, Assignment],
                    now: float, heartbeat_ages: Mapping[str, float] | None = None) -> list[dict[str, Any]]:
    """One row per supervisor for ``/cluster``: slots, used and free, uptime, and the age of
    its last report where ``heartbeat_ages`` knows it (the leader), else of its node (a
    supervisor of an earlier squall refreshes its node instead); None without
    ``heartbeat_ages`` (a standby hears no reports)."""
    used: dict[str, set[int]] = {}
    for node, port in slots_in_use({k: a.executors for k, a in assignments.items()}):
        used.setdefault(node, set()).add(port)
    rows = []
    for sid, s in sorted(sups.items()):
        used_ports = sorted(used.get(sid, ()))
        rows.append({"id": sid, "host": s.host, "ports": sorted(s.ports), "used_ports": used_ports,
                     "slots": len(s.ports), "used": len(used_ports),
                     "free": len(set(s.usable_ports) - set(used_ports)),
                     "unusable": {str(p): why for p, why in sorted(s.unusable.items())},
                     "uptime": round(now - s.started_at, 1), "heartbeat_age": None if heartbeat_ages is None
                     else round(heartbeat_ages.get(sid, now - s.time), 1),
                     "logviewer_port": s.logviewer_port, "away": s.away})
    return rows
