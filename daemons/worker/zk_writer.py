"""Error reports, written to ZooKeeper off the worker's hot threads."""
from __future__ import annotations

import threading
from collections import deque
from collections.abc import Mapping
from typing import Any

import structlog

from squall.daemons.state import ClusterState, ClusterStateError, ErrorInfo
from squall.daemons.timers import SYSTEM_CLOCK, Clock
from squall.daemons.worker.decisions import OutageLog
from squall.runtime.executor import ErrorThrottle

log = structlog.get_logger("squall.worker")

ERROR_QUEUE_MAX = 100  # error reports waiting for ZooKeeper; beyond it they are counted, dropped


class ZkWriter:
    """Error reports, written to ZooKeeper by one thread.

    The runtime calls in from its receive and executor threads, which must never wait on
    ZooKeeper: errors queue up to ERROR_QUEUE_MAX, also while ZooKeeper is away; a failed
    write is counted, and an outage logged once when it starts and once when it ends.
    (Backpressure goes between workers over the transport: squall.runtime.flow.)
    """

    def __init__(self, state: ClusterState, topology_id: str, port: int, host: str,
                 conf: Mapping[str, Any], clock: Clock = SYSTEM_CLOCK) -> None:
        self._clock = clock
        self._state, self._topology_id = state, topology_id
        self._port, self._host = port, host
        self._limit = int(conf["topology.max.error.report.per.interval"])
        self._interval = float(conf["topology.error.throttle.interval.secs"])
        self._throttles: dict[str, ErrorThrottle] = {}
        self._errors: deque[ErrorInfo] = deque()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self.errors_dropped = 0
        self.errors_written = 0
        self._outage = OutageLog()
        self._dropped_logged = 0  # errors_dropped when the last outage's end was logged
        self._thread = threading.Thread(target=self._run, name="zk-writer", daemon=True)

    def start(self) -> None:
        self._thread.start()

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
        """Write the queued reports. While ZooKeeper is away they stay queued (up to
        ERROR_QUEUE_MAX, the rest counted as dropped); a report whose write fails is dropped
        and counted. One warning per outage, and one line with the count when it ends."""
        with self._lock:
            waiting = bool(self._errors)
            errors = list(self._errors) if waiting and self._state.connected else []
            if errors:
                self._errors.clear()
        if not errors:
            if waiting:  # they stay queued until ZooKeeper is back
                self._outage_started("not connected to ZooKeeper")
            return
        for i, error in enumerate(errors):
            try:
                self._state.report_error(self._topology_id, error)
                self.errors_written += 1
            except ClusterStateError as exc:
                self.errors_dropped += 1
                self._outage_started(str(exc))
                self._requeue(errors[i + 1:])  # each would wait out the request deadline too
                return
            except ValueError as exc:  # a component name that cannot be a node
                self.errors_dropped += 1
                log.warning("error report cannot be written to ZooKeeper", component=error.component,
                            task=error.task, error=str(exc))
                continue
            lasted = self._outage.recovered(self._clock.monotonic())
            if lasted is not None:  # dropped: failed writes and reports past the full queue
                log.info("error reports reach ZooKeeper again", outage_secs=round(lasted, 1),
                         reports_dropped=self.errors_dropped - self._dropped_logged)
                self._dropped_logged = self.errors_dropped

    def _requeue(self, errors: list[ErrorInfo]) -> None:
        with self._lock:
            kept = errors[:max(0, ERROR_QUEUE_MAX - len(self._errors))]
            self.errors_dropped += len(errors) - len(kept)
            self._errors.extendleft(reversed(kept))

    def _outage_started(self, error: str) -> None:
        if self._outage.failed(self._clock.monotonic()):
            log.warning("ZooKeeper unavailable; error reports wait for it (at most "
                        f"{ERROR_QUEUE_MAX}, the rest are dropped and counted)", error=error)
