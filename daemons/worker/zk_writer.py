"""Backpressure changes and error reports, written to ZooKeeper off the worker's hot threads."""
from __future__ import annotations

import threading
from collections import deque
from collections.abc import Mapping
from typing import Any

import structlog

from squall.daemons.state import ClusterState, ClusterStateError, ErrorInfo
from squall.daemons.timers import SYSTEM_CLOCK, Clock
from squall.runtime.executor import ErrorThrottle

log = structlog.get_logger("squall.worker")

ERROR_QUEUE_MAX = 100  # error reports waiting for ZooKeeper; beyond it they are counted, dropped


class ZkWriter:
    """Backpressure changes and error reports, written to ZooKeeper by one thread.

    The runtime calls in from its receive and executor threads, which must never wait on
    ZooKeeper: the latest backpressure set is kept (older ones are superseded) and errors
    queue up to ERROR_QUEUE_MAX; a failed write is logged, backpressure is retried later.
    """

    def __init__(self, state: ClusterState, topology_id: str, node: str, port: int, host: str,
                 conf: Mapping[str, Any], clock: Clock = SYSTEM_CLOCK) -> None:
        self._clock = clock
        self._state, self._topology_id = state, topology_id
        self._node, self._port, self._host = node, port, host
        self._limit = int(conf["topology.max.error.report.per.interval"])
        self._interval = float(conf["topology.error.throttle.interval.secs"])
        self._throttles: dict[str, ErrorThrottle] = {}
        self._errors: deque[ErrorInfo] = deque()
        self._bp_wanted: frozenset[int] | None = None
        self._bp_written: frozenset[int] = frozenset()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self.errors_dropped = 0
        self.errors_written = 0
        self._thread = threading.Thread(target=self._run, name="zk-writer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def publish_backpressure(self, tasks: set[int]) -> None:
        with self._lock:
            self._bp_wanted = frozenset(tasks)
        self._wake.set()

    def report_error(self, component: str, task: int, text: str) -> None:
        now = self._clock.time()
        with self._lock:
            throttle = self._throttles.get(component)
            if throttle is None:
                throttle = self._throttles[component] = ErrorThrottle(self._limit, self._interval)
            if not throttle.allow(self._clock.monotonic()):
                return
            if len(self._errors) >= ERROR_QUEUE_MAX:
                self.errors_dropped += 1
                return
            self._errors.append(ErrorInfo(now, component, task, self._host, self._port, text))
        self._wake.set()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(1.0)
            self._wake.clear()
            if self._stop.is_set():
                return
            self._flush()

    def _flush(self) -> None:
        with self._lock:
            wanted = self._bp_wanted
            errors = list(self._errors)
            self._errors.clear()
        if wanted is not None and wanted != self._bp_written:
            try:
                self._state.set_backpressure(self._topology_id, self._node, self._port, wanted)
                self._bp_written = wanted
                log.info("backpressure published", tasks=sorted(wanted))
            except (ClusterStateError, ValueError) as exc:
                log.warning("publishing backpressure failed; will retry", error=str(exc))
                self._stop.wait(0.5)
                self._wake.set()
        for error in errors:
            try:
                self._state.report_error(self._topology_id, error)
                self.errors_written += 1
            except (ClusterStateError, ValueError) as exc:
                self.errors_dropped += 1
                log.warning("error report to ZooKeeper failed", component=error.component,
                            task=error.task, error=str(exc))

