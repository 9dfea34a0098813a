"""The worker's metrics snapshot: what its supervisor's ``/metrics`` shows of it.

Every ``worker.metrics.frequency.secs`` the worker writes one JSON file next to its local
heartbeat (``workers/<id>/metrics.json``); the supervisor reads the files of the workers
it owns when Prometheus scrapes it. A file rather than an endpoint per worker: no port
to allocate, secure or scrape per worker, one bounded file per worker overwritten in
place, and the supervisor already reads that directory. The runtime's counters are read
as they are (plain integers the executors bump per batch), so the hot path pays nothing.
"""
from __future__ import annotations

import gc
import json
from typing import Any

import psutil

VERSION = 1


def process_stats(proc: psutil.Process) -> dict[str, Any]:
    """Resident memory, CPU seconds and GC runs of this process."""
    cpu = proc.cpu_times()
    return {"rss": proc.memory_info().rss, "cpu_user": cpu.user, "cpu_system": cpu.system,
            "gc_collections": [gen["collections"] for gen in gc.get_stats()]}


def snapshot(runtime_metrics: dict[str, Any], process: dict[str, Any], now: float, uptime: float,
             topology_id: str, port: int, worker_id: str) -> bytes:
    """The snapshot file's content."""
    return json.dumps({"version": VERSION, "time": now, "uptime": uptime, "topology_id": topology_id,
                       "port": port, "worker_id": worker_id, "process": process, **runtime_metrics},
                      separators=(",", ":")).encode()
