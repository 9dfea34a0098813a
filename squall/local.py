"""Local mode: whole topologies inside this process, no services (Storm's LocalCluster).

``topology.workers`` in-process workers are made and wired over the in-process transport,
so tuples between them are serialized exactly as between worker processes; with one worker
(the default) nothing is serialized. Cluster state (status, errors) is kept in memory.
"""
from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Mapping
from typing import Any

import structlog

from squall import config as _config
from squall.checks import check_runnable
from squall.clock import SYSTEM_CLOCK, Clock
from squall.logs import configure_from
from squall.messaging.local import LocalContext
from squall.model import executor_tasks, schedule_even, system_topology, task_ids
from squall.model import executors as executors_of
from squall.runtime.worker_runtime import WorkerRuntime
from squall.topology import Topology

log = structlog.get_logger("squall.local")
_ids = itertools.count(1)


class LocalTopology:
    """A running local topology: its workers, status and errors."""

    def __init__(self, name: str, topology_id: str, conf: dict, workers: list[WorkerRuntime]) -> None:
        self.name, self.topology_id, self.conf, self.workers = name, topology_id, conf, workers
        self.errors: dict[str, deque] = {}
        self.status = "active"
        self.started = time.time()


class LocalCluster:
    """Run topologies in this process. Use as a context manager so everything stops.

    ``clock``: what topologies read time from (timeouts, ticks, windows, checkpoint
    intervals); a ``squall.clock.FakeClock`` lets a test move time on without sleeping."""

    def __init__(self, conf: Mapping[str, Any] | None = None, clock: Clock = SYSTEM_CLOCK) -> None:
        self.clock = clock
        self.conf = _config.build_config(conf, {"squall.messaging.transport": "local"})
        if not structlog.is_configured():  # the host program did not set logging up: use ours
            configure_from(self.conf)
        self._context = LocalContext()
        self._context.prepare(self.conf)
        self._topologies: dict[str, LocalTopology] = {}
        self._lock = threading.Lock()

    def __enter__(self) -> "LocalCluster":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    def submit(self, name: str, conf: Mapping[str, Any] | None, topology: Topology) -> str:
        """Start ``topology`` under ``name``; returns its topology id."""
        if not isinstance(topology, Topology):
            raise TypeError(f"submit takes a built Topology, got {type(topology).__name__}")
        with self._lock:
            if name in self._topologies:
                raise ValueError(f"a topology named {name!r} is already running")
        full = {**self.conf, **_config.validate(dict(conf or {})), "topology.name": name}
        for warning in check_runnable(topology, full):
            log.warning(warning, topology=name)
        topology_id = f"{name}-{next(_ids)}-{int(time.time())}"
        system = system_topology(topology, full)
        execs = sorted(executors_of(system, task_ids(system)))
        n_workers = int(full["topology.workers"])
        ports = list(range(1, n_workers + 1))
        placement = schedule_even(execs, [("local", p) for p in ports])
        by_port: dict[int, list] = {p: [] for p in ports}
        for ex, (_, port) in placement.items():
            by_port[port].append(ex)
        endpoints = {t: ("local", port) for ex, (_, port) in placement.items() for t in executor_tasks(ex)}
        running = LocalTopology(name, topology_id, full, [])
        kept = int(full["topology.errors.kept"])

        def error_sink(component: str, task: int, text: str) -> None:
            running.errors.setdefault(component, deque(maxlen=kept)).append(
                {"time": time.time(), "task": task, "error": text})

        workers = [WorkerRuntime(topology_id, topology, full, by_port[p], p, self._context, host="local",
                                 error_sink=error_sink, clock=self.clock) for p in ports if by_port[p]]
        running.workers = workers
        for w in workers:
            w.bind()
        for w in workers:
            w.refresh_connections(endpoints)
            w.active = True
        for w in workers:
            w.start_executors()
            w.start_transfer()
        with self._lock:
            self._topologies[name] = running
        log.info("topology submitted", topology=topology_id, workers=len(workers), executors=len(execs))
        return topology_id

    def _get(self, name: str) -> LocalTopology:
        with self._lock:
            try:
                return self._topologies[name]
            except KeyError:
                raise KeyError(f"no topology named {name!r} is running") from None

    def activate(self, name: str) -> None:
        t = self._get(name)
        t.status = "active"
        for w in t.workers:
            w.set_active(True)

    def deactivate(self, name: str) -> None:
        t = self._get(name)
        t.status = "inactive"
        for w in t.workers:
            w.set_active(False)

    def kill(self, name: str, wait_secs: float = 0.0) -> None:
        """Deactivate, wait ``wait_secs`` for tuples in flight, then stop the topology."""
        t = self._get(name)
        self.deactivate(name)
        if wait_secs:
            time.sleep(wait_secs)
        for w in t.workers:
            w.shutdown()
        with self._lock:
            self._topologies.pop(name, None)
        log.info("topology killed", topology=t.topology_id)

    def topologies(self) -> list[str]:
        with self._lock:
            return sorted(self._topologies)

    def errors(self, name: str) -> dict[str, list[dict]]:
        # Executor threads add a component's first error as it happens: copy the items first
        # (one C call under the GIL) rather than iterate a dict that may grow meanwhile.
        return {c: list(d) for c, d in list(self._get(name).errors.items())}

    def stats(self, name: str) -> list[dict[str, Any]]:
        """Per-executor statistics (emitted, executed, acked, failed, latency...), each in its
        wire form (``squall.runtime.stats.ExecutorStats.to_dict``)."""
        return [s.to_dict() for w in self._get(name).workers for s in w.stats()]

    def metrics(self, name: str) -> list[dict[str, Any]]:
        """Per-worker metrics: executors' per-task counters, latency histograms and queues,
        and the worker's transfer counters (what a supervisor's /metrics exports)."""
        return [w.metrics() for w in self._get(name).workers]

    def shutdown(self) -> None:
        for name in self.topologies():
            try:
                self.kill(name)
            except KeyError:
                pass
        self._context.term()
