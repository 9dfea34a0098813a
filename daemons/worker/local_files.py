"""What a worker leaves on local disk for its supervisor, each on its own timer: the
heartbeat the supervisor watches, the executor stats it reports to nimbus, and the metrics
snapshot its ``/metrics`` exports. Only the heartbeat may halt the worker; a failed stats or
metrics write is logged and counted, and the next period writes again."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psutil

from squall.daemons import local_state
from squall.daemons.timers import Clock
from squall.daemons.worker import metrics as worker_metrics
from squall.daemons.worker.decisions import ExecutorId, fit_stats, with_capacity
from squall.runtime.stats import ExecutorStats, WorkerStats

# Executor stats one worker hands its supervisor; the rest are left out (and counted) so that
# a supervisor's report of all its workers stays bounded (reports.MAX_REPORT_BYTES).
STATS_BUDGET_BYTES = 256_000


class LocalFiles:
    """One worker's heartbeat, stats and metrics files. ``runtime`` gives the worker's
    runtime (None before it is made), ``ready`` whether its executors finished starting."""

    def __init__(self, layout: local_state.LocalLayout, topology_id: str, port: int, worker_id: str, pid: int,
                 started_at: float, clock: Clock, runtime: Callable[[], Any], ready: Callable[[], bool],
                 stopping: Callable[[], bool], logger: Any) -> None:
        self.layout = layout
        self.topology_id, self.port, self.worker_id, self.pid = topology_id, port, worker_id, pid
        self.started_at = started_at
        self.clock = clock
        self._runtime = runtime
        self._ready = ready
        self._stopping = stopping
        self.log = logger
        self.executors: list[ExecutorId] = []  # this worker's, once its assignment is read
        self._stats = WorkerStats()
        self.stats_failures = 0
        self._busy_marks: dict[ExecutorId, tuple[float, float]] = {}  # capacity windows
        self._process: Any = None  # psutil.Process of this worker, made on first use
        self.metrics_failures = 0

    def heartbeat(self) -> None:
        """The heartbeat file the supervisor watches; ``ready`` once every spout's open and
        bolt's prepare has returned (the supervisor relaunches a worker that is not ready
        within supervisor.worker.start.timeout.secs)."""
        local_state.write_heartbeat(self.layout, local_state.heartbeat_of(
            self.clock.time(), self.topology_id, self.port, self.worker_id, self.pid, self.executors,
            ready=self._ready()))

    def write_stats(self) -> None:
        """The executor stats (trimmed to STATS_BUDGET_BYTES) the supervisor puts in its next
        report to nimbus. Never halts the worker: a failed write is logged and counted, and
        the next period writes again; the local heartbeat alone keeps the worker alive."""
        now = self.clock.time()
        rt = self._runtime()
        try:
            if rt is not None and rt.executors:
                entries, dropped = fit_stats(self._executor_stats(rt), STATS_BUDGET_BYTES)
                self._stats = WorkerStats(now, entries, rt.transport_stats(), dropped)
            local_state.write_stats(self.layout, self.worker_id,
                                    local_state.StatsFile(now - self.started_at, self._stats))
        except Exception as exc:  # noqa: BLE001
            self.stats_failures += 1
            if self.stats_failures in (1, 10, 100) or self.stats_failures % 1000 == 0:
                self.log.warning("writing executor stats failed", error=repr(exc), failures=self.stats_failures)

    def write_metrics(self) -> None:
        """The metrics snapshot the supervisor exports. Never halts the worker: a failure
        (a full disk, a counter read mid-change) is logged and counted, and the next period
        tries again."""
        rt = self._runtime()
        if rt is None or self._stopping():
            return
        try:
            if self._process is None:
                self._process = psutil.Process(self.pid)
            now = self.clock.time()
            data = worker_metrics.snapshot(
                rt.metrics(), worker_metrics.process_stats(self._process), now, now - self.started_at,
                self.topology_id, self.port, self.worker_id)
            local_state.write_metrics(self.layout, self.worker_id, data)
        except Exception as exc:  # noqa: BLE001
            self.metrics_failures += 1
            if self.metrics_failures in (1, 10, 100) or self.metrics_failures % 1000 == 0:
                self.log.warning("writing the metrics snapshot failed", error=repr(exc),
                                 failures=self.metrics_failures)

    def _executor_stats(self, rt: Any) -> list[ExecutorStats]:
        # Stats are read while the executors run; a rare concurrent-mutation error must not
        # halt the worker: keep the last good stats instead.
        try:
            stats, self._busy_marks = with_capacity(rt.stats(), self._busy_marks, self.clock.monotonic())
            return stats
        except Exception as exc:  # noqa: BLE001
            self.log.warning("reading executor stats failed", error=repr(exc))
            return self._stats.executors

    def remove(self) -> None:
        """At shutdown: the files go with the worker (OSError when one cannot)."""
        local_state.remove_heartbeat(self.layout, self.worker_id)
        local_state.remove_stats(self.layout, self.worker_id)
        local_state.remove_metrics(self.layout, self.worker_id)
