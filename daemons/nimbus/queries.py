"""What nimbus answers without changing anything: topologies, their status, conf, errors and
workers' logs, the cluster, ``/metrics`` and the code bundles. Any nimbus answers, except
where only the leader knows (``topology_status``: the numbers come in the supervisors'
reports, which only it hears)."""
from __future__ import annotations

import os
from collections import Counter
from typing import Any

from squall.daemons.metrics.families import Series
from squall.daemons.nimbus import history, status, worker_logs
from squall.daemons.nimbus.access import ApiAccess
from squall.daemons.nimbus.api import no_such_topology
from squall.daemons.nimbus.code_store import CodeStore, digest
from squall.daemons.nimbus.guard import ApiError
from squall.daemons.nimbus.heard import Hearing
from squall.daemons.nimbus.leadership import Leadership
from squall.daemons.nimbus.metrics import nimbus_series
from squall.daemons.nimbus.placement import Placement
from squall.daemons.nimbus.status_records import TopologyStatus
from squall.daemons.state import ClusterState, ClusterStateError, TopologyInfo
from squall.daemons.timers import Clock


def lookup(state: ClusterState, name: str, unreadable: bool = False) -> TopologyInfo:
    """The live topology with this name (or id); 404 when there is none. A topology whose
    node is malformed is found by id (its stand-in, ``status.with_unreadable``) only with
    ``unreadable`` (owner checks and kill); otherwise it is a 409 that says what to do."""
    infos = status.with_unreadable(state.topology_entries())
    found = infos.get(name) or next((i for i in infos.values() if i.name == name), None)
    if found is None:
        raise ApiError(404, no_such_topology(name))
    if found.status == status.UNREADABLE and not (unreadable and found.id == name):
        raise ApiError(409, f"the ZooKeeper node of topology {found.id} is unreadable (see nimbus's "
                            f"log); an admin can kill it by id: squall kill {found.id}", id=found.id)
    return found


class Queries:
    """The read side of nimbus's API (called on the HTTP server's threads)."""

    def __init__(self, state: ClusterState, store: CodeStore, clock: Clock, leadership: Leadership,
                 hearing: Hearing, placement: Placement, counts: Counter[str]) -> None:
        self.state = state
        self.store = store
        self.clock = clock
        self.leadership = leadership
        self.hearing = hearing
        self.placement = placement
        self.counts = counts
        self.started_at = clock.time()

    def owner_of(self, name: str) -> str | None:
        """The user who submitted the topology with this name or id; None when there is none
        ("" for one whose node is unreadable: admins only)."""
        try:
            return lookup(self.state, name, unreadable=True).owner
        except ApiError as exc:  # 409: named by its name, its node unreadable: admins may hear why
            return "" if exc.status == 409 else None

    def list_topologies(self) -> list[dict[str, Any]]:
        """Every topology, one whose node is unreadable too (status ``unreadable``)."""
        return status.topology_rows(status.with_unreadable(self.state.topology_entries()),
                                    self.state.assignments(), self.clock.time())

    def topology_status(self, name: str) -> TopologyStatus:
        """Components with their executors (host, port, counters), workers, last errors.
        The leader answers: the numbers come in the supervisors' reports, which only it hears."""
        self.leadership.require()
        info = lookup(self.state, name)
        beats = self.hearing.beats.beats(info.id)
        assignment, now = self.state.assignment(info.id), self.clock.time()
        rates = self.hearing.rates
        out = status.topology_status(
            info, assignment, beats, self.placement.executor_components(info) or {},
            self.store.structure(info.id) or {}, self.state.errors(info.id), now,
            rates=rates.rates(info.id, now), rate_window=rates.window,
            windows=self.hearing.history.windows(info.id, now))
        out.unusable_slots = status.unusable_slots(self.hearing.supervisors())
        return out

    def history(self, name: str, window: int | None) -> dict[str, Any]:
        """The topology's components over the last ``window`` seconds (default ten minutes):
        rates and latencies between the points the leader kept, per component and for the
        topology (its spouts: what entered it, what was acked and failed, the complete latency)."""
        self.leadership.require()
        info = lookup(self.state, name)
        now = self.clock.time()
        secs = min(float(window or 600), float(history.WINDOWS[-1][0]))
        points = self.hearing.history.points(info.id, now - secs)
        structure = self.store.structure(info.id) or {}
        kinds = {c: e.get("kind") for c, e in (structure.get("components") or {}).items() if isinstance(e, dict)}
        spouts = [c for c, kind in kinds.items() if kind == "spout"]
        return {"id": info.id, "name": info.name, "window_secs": secs, "now": now,
                "topology": history.rate_points(history.summed(points, spouts)),
                "components": {c: history.rate_points(p) for c, p in sorted(points.items())}}

    def topology_conf(self, name: str) -> dict[str, Any]:
        info = lookup(self.state, name)
        return {"id": info.id, "name": info.name, "conf": info.conf}

    def topology_errors(self, name: str) -> dict[str, Any]:
        """Every kept error of the topology, newest first, and the same grouped: identical
        errors as one entry with a count."""
        info = lookup(self.state, name)
        errors = [e.to_dict() for e in sorted(self.state.errors(info.id), key=lambda e: e.time, reverse=True)]
        kept = info.conf.get("topology.errors.kept")  # checked at submit; as the workers keep them
        kept = max(1, kept if isinstance(kept, int) and not isinstance(kept, bool) else self.state.errors_kept)
        return {"id": info.id, "name": info.name, "errors": errors, "groups": status.group_errors(errors, kept)}

    def worker_log(self, access: ApiAccess, name: str, node: str, port: int, lines: int | None = None,
                   offset: int | None = None, inode: int | None = None) -> dict[str, Any]:
        info = lookup(self.state, name)
        return worker_logs.worker_log(access, info, self.state.assignment(info.id),
                                      self.state.supervisors(), node, port,
                                      lines=lines, offset=offset, inode=inode)

    def _heartbeat_ages(self, now: float) -> dict[str, float] | None:
        """Supervisor id -> seconds since its last report; None on a standby (it hears none)."""
        if not self.leadership.is_leader:
            return None
        return {sid: now - t for sid, t in self.hearing.beats.reported_at().items()}

    def cluster_info(self, security: dict[str, bool]) -> dict[str, Any]:
        now = self.clock.time()
        rows = status.supervisor_rows(self.hearing.supervisors(), self.state.assignments(), now,
                                      self._heartbeat_ages(now))
        return {
            "nimbus": {"this": self.leadership.identifier, "pid": os.getpid(),
                       "is_leader": self.leadership.is_leader, "leader": self.state.nimbus_leader(),
                       "contenders": self.state.nimbus_contenders(), "uptime": round(now - self.started_at, 1)},
            "supervisors": rows,
            "slots": {"total": sum(r["slots"] for r in rows), "used": sum(r["used"] for r in rows),
                      "free": sum(r["free"] for r in rows)},
            "topologies": len(self.state.topology_ids()),
            "security": security,
        }

    def metrics_series(self, round_secs: tuple[float, float] | None) -> Series:
        """Nimbus's own series for /metrics (on the server's threads); ZooKeeper's part left
        out while it cannot be read."""
        now = self.clock.time()
        try:
            statuses = [i.status for i in status.with_unreadable(self.state.topology_entries()).values()]
            rows = status.supervisor_rows(self.hearing.supervisors(), self.state.assignments(), now,
                                          self._heartbeat_ages(now))
        except ClusterStateError:
            statuses, rows = None, None
        beats = self.hearing.beats
        counts = {**self.counts, "reports:taken": beats.counts["reports"],
                  "reports:stats_dropped": beats.counts["stats_dropped"],
                  "reports:unsigned": self.counts["reports_unsigned"],
                  "reports:refused": self.counts["reports_refused"] + sum(
                      n for k, n in beats.counts.items() if k.startswith("refused:"))}
        return nimbus_series(self.leadership.is_leader, counts, statuses, rows, round_secs)

    def bundle(self, topology_id: str) -> tuple[bytes, str]:
        data = self.store.read(topology_id)
        if data is not None:
            return data, digest(data)
        if self.state.topology(topology_id) is None:
            raise ApiError(404, f"no topology with id {topology_id!r}")
        if not self.leadership.is_leader:
            leader = self.leadership.address()
            raise ApiError(503, f"this nimbus ({self.leadership.identifier}) has no copy of the code of "
                                f"{topology_id} yet; the leader is {leader}", leader=leader)
        raise ApiError(404, f"the code of {topology_id} is missing on this nimbus")
