"""A supervisor's ``/metrics``: its slots and worker lifecycle, plus every owned worker's
series read from the snapshot file the worker keeps next to its heartbeat.

Served by ``endpoints`` on ``supervisor.metrics.port`` (bound to ``supervisor.host``, behind
the API tokens), so Prometheus needs one target per host. Files are read at scrape time:
nothing is kept between scrapes.
A ``user`` token is shown only its own topologies' worker series (``auth.topology_filter``).
"""
from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping

import structlog

from squall.daemons import local_state
from squall.daemons.metrics.families import Series, add_worker_snapshot
from squall.daemons.supervisor.processes import WorkerProc

log = structlog.get_logger("squall.supervisor")


class SupervisorMetrics:
    """Lifecycle counters the supervisor bumps, and the scrape-time series builder."""

    def __init__(self, layout: local_state.LocalLayout, clock_time: Callable[[], float]) -> None:
        self.layout = layout
        self.time = clock_time
        self.counts: Counter[str] = Counter()  # launches, restarts, kill:<SIGNAL>
        self.bad_snapshots = 0
        self._lock = threading.Lock()  # scrapes may overlap (server threads)
        self._warned: set[str] = set()

    def series(self, ports: Iterable[int], used: Iterable[int], workers: Mapping[str, WorkerProc],
               malformed_heartbeats: int, visible: Callable[[str], bool] | None = None) -> Series:
        """``visible`` says, by topology id, whose workers' series the caller is shown (None: all)."""
        ports, used = set(ports), set(used) & set(ports)
        out = Series()
        out.add("squall_supervisor_slots_used", (), len(used))
        out.add("squall_supervisor_slots_free", (), len(ports - used))
        out.add("squall_supervisor_workers", (), len(workers))
        out.add("squall_supervisor_worker_launches", (), self.counts["launches"])
        out.add("squall_supervisor_worker_restarts", (), self.counts["restarts"])
        for sig in ("SIGTERM", "SIGKILL"):
            out.add("squall_supervisor_worker_kills", (sig,), self.counts[f"kill:{sig}"])
        out.add("squall_supervisor_malformed_heartbeats", (), malformed_heartbeats)
        with self._lock:
            now = self.time()
            for rec in sorted(workers.values(), key=lambda r: r.port):
                if visible is None or visible(rec.topology_id):
                    self._add_worker(out, rec, now)
            out.add("squall_supervisor_bad_worker_snapshots", (), self.bad_snapshots)
        return out

    def _add_worker(self, out: Series, rec: WorkerProc, now: float) -> None:
        try:
            snap = local_state.read_metrics(self.layout, rec.worker_id)
            if snap is None:
                return  # not written yet
            add_worker_snapshot(out, snap, rec.topology_id, rec.port, now)
        except (OSError, ValueError, RecursionError) as exc:
            self.bad_snapshots += 1
            if rec.worker_id not in self._warned:
                self._warned.add(rec.worker_id)
                log.warning("worker metrics snapshot refused", worker=rec.worker_id, port=rec.port,
                            topology=rec.topology_id, error=str(exc)[:300])
