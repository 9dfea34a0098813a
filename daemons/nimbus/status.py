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
from squall.daemons.reports import emitted_of, executor_of
from squall.daemons.state import Assignment, ErrorInfo, SupervisorInfo, TopologyInfo, WorkerBeat
from squall.daemons.state.records import WORKER_COMPONENT
from squall.model import ACKER


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _stream_counts(entry: Mapping[str, Any]) -> dict[str, int]:
    """Emitted per user stream (what the UI's graph shows on its edges)."""
    emitted = entry.get("emitted")
    if not isinstance(emitted, dict):
        return {}
    return {str(k): _int(v) for k, v in emitted.items() if not str(k).startswith("__")}


def _inputs(spec: Any) -> list[dict[str, str]]:
    """A component's subscriptions from structure.json: source component, stream, grouping."""
    rows = spec.get("inputs") if isinstance(spec, dict) else None
    return [{"component": r[0], "stream": r[1], "grouping": r[2]} for r in rows or []
            if isinstance(r, list) and len(r) == 3 and all(isinstance(x, str) for x in r)]


def _dropped(entry: Any) -> dict[str, int]:
    """Input a worker refused, by cause ({cause: count}), from a beat's stats."""
    dropped = entry.get("dropped") if isinstance(entry, dict) else None
    if not isinstance(dropped, dict):
        return {}
    return {str(k): _int(v) for k, v in dropped.items() if _int(v)}
MAX_METRIC_ROWS = 500  # registered-metric rows one executor shows in a status


def _metrics(entry: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Metrics the executor's tasks registered (squall.metrics), flattened to rows of task,
    name, key (None for a plain metric) and value; only well-formed ones, at most
    MAX_METRIC_ROWS."""
    raw = entry.get("metrics")
    rows: list[dict[str, Any]] = []
    if not isinstance(raw, dict):
        return rows
    for task, metrics in sorted(raw.items(), key=lambda kv: str(kv[0])):
        if not isinstance(metrics, dict):
            continue
        for name, m in sorted(metrics.items(), key=lambda kv: str(kv[0])):
            value = m.get("value") if isinstance(m, dict) else None
            values = value if isinstance(value, dict) else {None: value}
            for key, v in sorted(values.items(), key=lambda kv: str(kv[0])):
                if _number(v) is not None and len(rows) < MAX_METRIC_ROWS:
                    rows.append({"task": str(task), "name": str(name), "key": None if key is None else str(key),
                                 "value": v})
    return rows


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _latencies(entry: Mapping[str, Any], executed: int) -> tuple[float | None, float | None]:
    """(mean execute latency, median complete latency) in ms from one executor's stats."""
    busy = _number(entry.get("busy_secs"))
    execute = round(busy * 1000 / executed, 4) if busy is not None and executed > 0 else None
    complete = entry.get("complete_latency_ms")
    p50 = _number(complete.get("p50")) if isinstance(complete, dict) else None
    return execute, (round(p50, 3) if p50 is not None else None)


def _weighted(rows: list[dict[str, Any]], key: str, weight: str) -> float | None:
    """Mean of ``key`` over the rows that have it, weighted by ``weight``."""
    pairs = [(r[key], r[weight]) for r in rows if r[key] is not None]
    total = sum(w for _, w in pairs)
    if not pairs:
        return None
    if total <= 0:
        return round(sum(v for v, _ in pairs) / len(pairs), 4)
    return round(sum(v * w for v, w in pairs) / total, 4)


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
                   beats: Mapping[Slot, WorkerBeat]) -> dict[ExecutorId, tuple[dict[str, Any], WorkerBeat]]:
    """Each executor's stats entry and beat; stats count only from the beat of the slot the
    executor is assigned to."""
    placed = dict(assignment.executors) if assignment else {}
    stats: dict[ExecutorId, tuple[dict[str, Any], WorkerBeat]] = {}
    for slot, beat in beats.items():
        for entry in beat.stats.get("executors", []) if isinstance(beat.stats, dict) else []:
            ex = executor_of(entry)
            if ex is not None and placed.get(ex) == slot:
                stats[ex] = (entry, beat)
    return stats


def topology_status(info: TopologyInfo, assignment: Assignment | None, beats: Mapping[Slot, WorkerBeat],
                    components: Mapping[ExecutorId, str], structure: Mapping[str, Any],
                    errors: Iterable[ErrorInfo], now: float,
                    rates: Mapping[ExecutorId, dict[str, float] | None] | None = None,
                    rate_window: float | None = None,
                    windows: Mapping[str, Any] | None = None) -> dict[str, Any]:
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
    by_component: dict[str, dict[str, Any]] = {}
    for ex in sorted(set(placed) | set(components)):
        entry, beat = stats.get(ex, ({}, None))
        component = components.get(ex) or entry.get("component") or "?"
        node, port = placed.get(ex, (None, None))
        executed = _int(entry.get("executed"))
        execute_ms, complete_ms = _latencies(entry, executed)
        row = {
            "executor": list(ex), "tasks": ex[1] - ex[0] + 1, "node": node,
            "host": hosts.get(node) if node else None,
            "port": port, "uptime": round(beat.uptime, 1) if beat else None,
            "beat_age": round(now - beat.time, 1) if beat else None,
            "emitted": emitted_of(entry), "acked": _int(entry.get("acked")),
            "failed": _int(entry.get("failed")), "executed": executed,
            "capacity": _number(entry.get("capacity")), "execute_latency_ms": execute_ms,
            "complete_latency_ms": complete_ms, "streams": _stream_counts(entry),
            "rates": _rounded(rates.get(ex)),
            "dropped_by_cause": _dropped(entry),
            "metrics": _metrics(entry),
        }
        row["dropped"] = sum(row["dropped_by_cause"].values())
        comp = by_component.setdefault(component, {
            "id": component, "kind": kinds.get(component) or entry.get("kind"),
            "parallelism": info.component_parallelism.get(component),
            "inputs": _inputs(specs.get(component)), "executors": []})
        comp["executors"].append(row)
    for comp in by_component.values():
        rows = comp["executors"]
        for key in ("tasks", "emitted", "acked", "failed", "executed", "dropped"):
            comp[key] = sum(r[key] for r in rows)
        streams: dict[str, int] = {}
        for r in rows:
            for stream, n in r["streams"].items():
                streams[stream] = streams.get(stream, 0) + n
        comp["streams"] = streams
        # Storm's component capacity is its busiest executor's.
        capacities = [r["capacity"] for r in rows if r["capacity"] is not None]
        comp["capacity"] = max(capacities) if capacities else None
        comp["execute_latency_ms"] = _weighted(rows, "execute_latency_ms", "executed")
        comp["complete_latency_ms"] = _weighted(rows, "complete_latency_ms", "acked")
        comp["rates"] = _rounded(sum_rates(r["rates"] for r in rows))
        comp["last_error"] = last_errors.get(comp["id"])
        # Storm's windows (10m, 3h, 1d, all): rates and latencies the leader keeps over time.
        comp["windows"] = (windows or {}).get(comp["id"])
    workers = []
    for node, port in sorted(assignment.slots()) if assignment else []:
        beat = beats.get((node, port))
        workers.append({"node": node, "host": hosts.get(node), "port": port,
                        "executors": len(assignment.executors_on(node, port)),
                        "uptime": round(beat.uptime, 1) if beat else None,
                        "transport": _transport(beat), "dropped_by_cause": _dropped(_transport_raw(beat))})
    return {
        "id": info.id, "name": info.name, "owner": info.owner, "status": info.status,
        "uptime": round(now - info.submitted_at, 1), "submitted_at": info.submitted_at,
        "requested_workers": info.num_workers, "workers": workers,
        "executors": len(placed), "code_digest": info.code_digest, "rate_window_secs": rate_window,
        # User components first, then system ones (``__acker``).
        "components": [by_component[c] for c in sorted(by_component, key=lambda c: (c.startswith("__"), c))],
        "worker_error": last_errors.get(WORKER_COMPONENT),
    }


def _rounded(rates: Mapping[str, float] | None) -> dict[str, float] | None:
    return None if rates is None else {k: round(v, 2) for k, v in rates.items()}
TRANSPORT_COUNTERS = ("refused_connections", "refused_keys", "bad_frames", "dropped_unknown_task",
                      "dropped_bad_payload")


def _transport_raw(beat: Any) -> dict[str, Any]:
    raw = beat.stats.get("transport") if beat is not None and isinstance(beat.stats, dict) else None
    return raw if isinstance(raw, dict) else {}


def _transport(beat: Any) -> dict[str, int]:
    """A worker's receive-side counters from its beat (known keys, integers only)."""
    raw = _transport_raw(beat)
    return {k: _int(raw.get(k)) for k in TRANSPORT_COUNTERS if k in raw}


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
                     "free": len(set(s.ports) - set(used_ports)),
                     "uptime": round(now - s.started_at, 1), "heartbeat_age": None if heartbeat_ages is None
                     else round(heartbeat_ages.get(sid, now - s.time), 1),
                     "logviewer_port": s.logviewer_port, "away": s.away})
    return rows
