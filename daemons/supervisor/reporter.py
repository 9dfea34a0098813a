"""The supervisor's reporter: one report per ``supervisor.heartbeat.frequency.secs`` to the
leading nimbus, on a thread of its own.

Each report carries this supervisor's heartbeat and every owned worker's beat and stats,
read from the files the workers leave (``reporting.worker_beat``), bounded by
``reports.build_report``. It goes over nimbus's API with the supervisor token, over TLS
when ``nimbus.tls.ca.file`` is set, on one kept-alive connection. The configured nimbus is
tried first; a standby answers 503 naming the leader, and when nimbus cannot be reached the
leader is looked up in ZooKeeper. Failures are retried sooner than the interval
(``reporting.RetrySchedule``), always with a report built at that moment: while nimbus is
away nothing queues up. An outage is logged when it starts and when it ends.
"""
from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
import urllib.parse
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from squall.daemons import local_state
from squall.daemons.nimbus.access import ApiAccess
from squall.daemons.reports import SupervisorReport, build_report
from squall.daemons.supervisor.processes import WorkerProc
from squall.daemons.supervisor.reporting import RetrySchedule, worker_beat
from squall.daemons.timers import SYSTEM_CLOCK, Clock
from squall.errors import SquallError

log = structlog.get_logger("squall.supervisor")

API = "/api/v1"


class ReportRefused(SquallError):
    """Nimbus answered, but not with 200; the message says what it said."""

    def __init__(self, status: int, message: str, leader: str = "") -> None:
        super().__init__(message)
        self.status, self.leader = status, leader


class NimbusLink:
    """One kept-alive HTTP(S) connection to a nimbus; reconnects after any failure."""

    def __init__(self, access: ApiAccess, timeout: float) -> None:
        self.access, self.timeout = access, timeout
        self.address = ""
        self._conn: http.client.HTTPConnection | None = None

    def post(self, address: str, path: str, body: bytes) -> dict[str, Any]:
        """POST ``body`` (JSON) to ``address`` (host:port); the JSON reply. ReportRefused for
        an answer other than 200, OSError (or ssl.SSLError) when nimbus cannot be reached."""
        if address != self.address:
            self.close()
            self.address = address
        conn = self._conn or self._connect()
        headers = {"Content-Type": "application/json", **self.access.headers()}
        try:
            conn.request("POST", API + path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        except (OSError, http.client.HTTPException) as exc:
            self.close()
            raise OSError(f"{type(exc).__name__}: {exc}") from None
        if resp.will_close:
            self.close()
        try:
            reply = json.loads(data) if data else {}
        except ValueError:
            reply = {}
        reply = reply if isinstance(reply, dict) else {}
        if resp.status != 200:
            leader = reply.get("leader")
            raise ReportRefused(resp.status, str(reply.get("error") or f"HTTP {resp.status}")[:300],
                                leader if isinstance(leader, str) else "")
        return reply

    def _connect(self) -> http.client.HTTPConnection:
        host, _, port = self.address.rpartition(":")
        context = self.access.ssl_context
        if context is not None:
            self._conn = http.client.HTTPSConnection(host, int(port), timeout=self.timeout, context=context)
        else:
            self._conn = http.client.HTTPConnection(host, int(port), timeout=self.timeout)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class Reporter:
    """Reports this supervisor's workers to the leading nimbus (see the module doc)."""

    def __init__(self, conf: Mapping[str, Any], supervisor_id: str, layout: local_state.LocalLayout,
                 workers: Callable[[], list[WorkerProc]], leader: Callable[[], str | None],
                 clock: Clock = SYSTEM_CLOCK, access: ApiAccess | None = None,
                 signing: tuple[int, str] = (0, "")) -> None:
        """``signing``: (this run's epoch, its report key), what tells nimbus a report is this
        supervisor's (the key's sha256 is in its ZooKeeper node); each report counts on."""
        self.supervisor_id, self.layout, self.clock = supervisor_id, layout, clock
        self.epoch, self._key = signing
        self.seq = 0
        self._workers, self._leader = workers, leader
        self.interval = float(conf["supervisor.heartbeat.frequency.secs"])
        self.configured = f"{conf['nimbus.host']}:{int(conf['nimbus.port'])}"
        self.address = self.configured
        self.link = NimbusLink(access or ApiAccess.from_conf(conf), timeout=max(2.0, 2 * self.interval))
        self.schedule = RetrySchedule(self.interval)
        self.counts: Counter[str] = Counter()  # sent, failed, bad_files, stats_left_out
        self._path = f"/supervisors/{urllib.parse.quote(supervisor_id, safe='')}/report"
        self._stop = threading.Event()
        self._down_since: float | None = None
        self._warned: set[str] = set()
        self._thread = threading.Thread(target=self._run, name="reporter", daemon=True)

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> Reporter:
        self._thread.start()
        return self

    def stop(self, timeout: float = 3.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        self.link.close()

    def _run(self) -> None:
        while not self._stop.wait(self.schedule.wait(self.clock.monotonic())):
            if not self.schedule.due(self.clock.monotonic()):
                continue
            try:
                self.report_once()
            except Exception:  # noqa: BLE001 - the reporter must outlive any one report
                log.exception("building or sending the report failed", supervisor=self.supervisor_id)
                self.schedule.failed(self.clock.monotonic())

    # -- one report -------------------------------------------------------------------------
    def build(self) -> SupervisorReport:
        """A report of every owned worker from the files they left."""
        beats = []
        for rec in self._workers():
            try:
                heartbeat = local_state.read_heartbeat(self.layout, rec.worker_id)
                stats = local_state.read_stats(self.layout, rec.worker_id)
            except (OSError, ValueError) as exc:
                self.counts["bad_files"] += 1
                self._warn_once(f"file:{rec.worker_id}", "worker's heartbeat or stats file unusable",
                                worker=rec.worker_id, port=rec.port, error=str(exc)[:300])
                continue
            beat = worker_beat(self.supervisor_id, rec.topology_id, rec.port,
                               ((s, e) for s, e in rec.executors), heartbeat, stats, rec.launch_time)
            if beat is not None:
                beats.append(beat)
        self.seq += 1
        report = build_report(self.supervisor_id, self.clock.time(), beats, epoch=self.epoch, seq=self.seq,
                              key=self._key)
        self.counts["stats_left_out"] += report.stats_left_out
        return report

    def report_once(self) -> bool:
        """Build and send one report (following a standby's pointer to the leader once);
        whether nimbus took it."""
        body = self.build().to_json()
        now = self.clock.monotonic()
        try:
            try:
                self.link.post(self.address, self._path, body)
            except ReportRefused as exc:
                if exc.status != 503 or not exc.leader or exc.leader == self.address:
                    raise
                self.address = exc.leader  # a standby named the leader: go there
                self.link.post(self.address, self._path, body)
        except (OSError, ssl.SSLError, socket.timeout, ReportRefused) as exc:
            self.counts["failed"] += 1
            delay = self.schedule.failed(now)
            self._failed(exc, delay)
            return False
        self.counts["sent"] += 1
        self.schedule.sent(now)
        if self._down_since is not None:
            log.info("nimbus takes reports again", supervisor=self.supervisor_id, nimbus=self.address,
                     outage_secs=round(now - self._down_since, 1), attempts_failed=self.schedule.failures)
            self._down_since = None
        return True

    def _failed(self, exc: Exception, delay: float) -> None:
        """Log an outage once; find the leader again for the next attempt."""
        if self._down_since is None:
            self._down_since = self.clock.monotonic()
            status = getattr(exc, "status", None)
            (log.error if status in (400, 401, 403, 404) else log.warning)(
                "nimbus did not take this supervisor's report; trying again", supervisor=self.supervisor_id,
                nimbus=self.address, status=status, error=str(exc)[:300], retry_secs=round(delay, 2))
        if not isinstance(exc, ReportRefused) or exc.status == 503:
            try:
                leader = self._leader()
            except Exception:  # noqa: BLE001 - ZooKeeper away too: keep trying the configured one
                leader = None
            self.address = leader or self.configured

    def _warn_once(self, key: str, event: str, **fields: Any) -> None:
        if len(self._warned) > 1000:  # keys name workers: bounded, repeats after a reset are fine
            self._warned.clear()
        if key not in self._warned:
            self._warned.add(key)
            log.warning(event, supervisor=self.supervisor_id, **fields)
