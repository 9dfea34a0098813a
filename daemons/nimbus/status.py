"""What nimbus reports (``squall list``, ``squall status``, ``/cluster``), as plain functions
of records read from ZooKeeper and the code store; any nimbus, leader or standby, serves them."""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from squall.daemons.state import Assignment, ErrorInfo, SupervisorInfo, TopologyInfo, WorkerBeat
from squall.daemons.nimbus.scheduler import ExecutorId, Slot, slots_in_use
from squall.model import ACKER


def _executor_of(entry: Any) -> ExecutorId | None:
    if not isinstance(entry, dict):
        return None
    ex = entry.get("executor")
    if (isinstance(ex, (list, tuple)) and len(ex) == 2 and all(isinstance(t, int) for t in ex)):
        return (ex[0], ex[1])
    return None


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _emitted(entry: Mapping[str, Any]) -> int:
    """Tuples emitted on user streams (system streams such as acker traffic left out)."""
    emitted = entry.get("emitted")
    if isinstance(emitted, dict):
        return sum(_int(v) for k, v in emitted.items() if not str(k).startswith("__"))
    return _int(emitted)


def topology_rows(infos: Mapping[str, TopologyInfo], assignments: Mapping[str, Assignment],
                  now: float) -> list[dict[str, Any]]:
    """One row per topology for ``squall list``."""
    out = []
    for info in sorted(infos.values(), key=lambda i: (i.name, i.id)):
        a = assignments.get(info.id)
        out.append({
            "name": info.name, "id": info.id, "status": info.status,
            "workers": len(a.slots()) if a else 0, "requested_workers": info.num_workers,
            "executors": len(a.executors) if a else 0,
            "uptime": round(now - info.submitted_at, 1), "submitted_at": info.submitted_at,
        })
    return out


def topology_status(info: TopologyInfo, assignment: Assignment | None, beats: Mapping[Slot, WorkerBeat],
                    components: Mapping[ExecutorId, str], structure: Mapping[str, Any],
                    errors: Iterable[ErrorInfo], now: float) -> dict[str, Any]:
    """Components with their executors (host, port, counters), workers, last errors."""
    placed = dict(assignment.executors) if assignment else {}
    hosts = dict(assignment.node_host) if assignment else {}
    # Stats of an executor count only from the beat of the slot it is assigned to.
    stats: dict[ExecutorId, tuple[dict[str, Any], Any]] = {}
    for slot, beat in beats.items():
        for entry in beat.stats.get("executors", []) if isinstance(beat.stats, dict) else []:
            ex = _executor_of(entry)
            if ex is not None and placed.get(ex) == slot:
                stats[ex] = (entry, beat)
    kinds = {c: e.get("kind") for c, e in (structure.get("components") or {}).items()
             if isinstance(e, dict)}
    kinds.setdefault(ACKER, "acker")
    last_errors: dict[str, dict[str, Any]] = {}
    for err in errors:  # oldest first: the last one wins
        last_errors[err.component] = err.to_dict()
    by_component: dict[str, dict[str, Any]] = {}
    for ex in sorted(set(placed) | set(components)):
        entry, beat = stats.get(ex, ({}, None))
        component = components.get(ex) or entry.get("component") or "?"
        node, port = placed.get(ex, (None, None))
        row = {
            "executor": list(ex), "node": node, "host": hosts.get(node) if node else None,
            "port": port, "uptime": round(beat.uptime, 1) if beat else None,
            "beat_age": round(now - beat.time, 1) if beat else None,
            "emitted": _emitted(entry), "acked": _int(entry.get("acked")),
            "failed": _int(entry.get("failed")), "executed": _int(entry.get("executed")),
        }
        comp = by_component.setdefault(component, {
            "id": component, "kind": kinds.get(component) or entry.get("kind"),
            "parallelism": info.component_parallelism.get(component), "executors": []})
        comp["executors"].append(row)
    for comp in by_component.values():
        for key in ("emitted", "acked", "failed", "executed"):
            comp[key] = sum(r[key] for r in comp["executors"])
        comp["last_error"] = last_errors.get(comp["id"])
    workers = []
    for node, port in sorted(assignment.slots()) if assignment else []:
        beat = beats.get((node, port))
        workers.append({"node": node, "host": hosts.get(node), "port": port,
                        "executors": len(assignment.executors_on(node, port)),
                        "uptime": round(beat.uptime, 1) if beat else None})
    return {
        "id": info.id, "name": info.name, "status": info.status,
        "uptime": round(now - info.submitted_at, 1), "submitted_at": info.submitted_at,
        "requested_workers": info.num_workers, "workers": workers,
        "executors": len(placed), "code_digest": info.code_digest,
        # User components first, then system ones (``__acker``).
        "components": [by_component[c] for c in sorted(by_component, key=lambda c: (c.startswith("__"), c))],
    }


def supervisor_rows(sups: Mapping[str, SupervisorInfo], assignments: Mapping[str, Assignment],
                    now: float) -> list[dict[str, Any]]:
    """One row per supervisor for ``/cluster``: slots, used and free, uptime, beat age."""
    used = slots_in_use({k: a.executors for k, a in assignments.items()})
    rows = []
    for sid, s in sorted(sups.items()):
        used_ports = sorted(p for node, p in used if node == sid)
        rows.append({"id": sid, "host": s.host, "ports": sorted(s.ports), "used_ports": used_ports,
                     "slots": len(s.ports), "used": len(used_ports),
                     "free": len(set(s.ports) - set(used_ports)),
                     "uptime": round(now - s.started_at, 1), "heartbeat_age": round(now - s.time, 1),
                     "away": s.away})
    return rows
