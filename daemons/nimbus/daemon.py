"""Nimbus: accepts topologies and their code, schedules executors onto supervisor slots,
watches worker beats and reassigns; ``squall nimbus`` runs it in the foreground.

Several nimbus processes may run; they contend through ``ClusterState.elect_nimbus`` and
the leader alone writes (submit, kill, (de)activate, rebalance, the rounds). A standby
serves the read-only GETs from ZooKeeper and answers writes with 503 and the leader's
``host:port`` (``NimbusClient`` retries there). A standby also copies every live
topology's bundle from the leader, so that it can take over and still serve the code
(Storm's nimbus code sync).

``Nimbus`` is the shell: it starts and stops the process (the API's server and TLS
material, the ZooKeeper session, the election, code sync) and composes the parts that do the
work: ``leadership`` (whether this nimbus leads), ``heard`` (what the supervisors reported:
beats, heartbeats), ``placement`` (one topology's assignment), ``rounds`` (the leader's
loop), ``operations`` (submit, kill, (de)activate, rebalance) and ``queries`` (every read).

Verbs, as in every daemon: ``start()`` binds the API and joins the cluster, ``run()`` blocks
until stopped and shuts down (returning the exit code), ``stop()`` asks it to stop.
"""
from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import structlog

from squall.daemons.http.limits import HttpLimits
from squall.daemons.http.refusals import Refusals
from squall.daemons.http.server import HttpServer
from squall.daemons.http.tls_material import TlsMaterial, TlsMaterialError, server_context
from squall.daemons.insecure import warn_insecure
from squall.daemons.local_state import private_dir
from squall.daemons.metrics.exposition import metrics_app
from squall.daemons.metrics.families import Series
from squall.daemons.nimbus.access import AccessError, ApiAccess, server_tls_files
from squall.daemons.nimbus.api import MAX_JSON_BODY, make_app
from squall.daemons.nimbus.auth import TokenFile, TokenFileError
from squall.daemons.nimbus.code_store import CodeStore, Upload
from squall.daemons.nimbus.code_sync import CodeSync
from squall.daemons.nimbus.deadlines import LeaderDeadlines
from squall.daemons.nimbus.guard import Guard
from squall.daemons.nimbus.heard import Hearing
from squall.daemons.nimbus.leadership import Leadership
from squall.daemons.nimbus.operations import Operations
from squall.daemons.nimbus.operator import OperatorActions
from squall.daemons.nimbus.placement import Placement
from squall.daemons.nimbus.queries import Queries
from squall.daemons.nimbus.rounds import LeaderRounds
from squall.daemons.nimbus.status_records import TopologyStatus
from squall.daemons.state import ClusterState, ClusterStateError, Watch
from squall.daemons.timers import SYSTEM_CLOCK, Clock
from squall.daemons.warn_once import WarnOnce
from squall.errors import SquallError

log = structlog.get_logger("squall.nimbus")

THREAD_JOIN_SECS = 3.0  # how long shutdown waits for the election and code-sync threads


class Nimbus:
    """One nimbus process: cluster state, code store, election, the leader's rounds, the
    HTTP API and its operations and queries (called by ``api.make_app`` on the server's
    threads)."""

    def __init__(self, conf: Mapping[str, Any], clock: Clock = SYSTEM_CLOCK) -> None:
        self.conf = dict(conf)
        self.clock = clock
        self.host = str(conf["nimbus.host"])
        self.bind_host = str(conf.get("nimbus.bind.host") or self.host)
        self.port = int(conf["nimbus.port"])
        self.max_upload = int(conf["nimbus.code.max.upload.bytes"])
        self.monitor_freq = float(conf["nimbus.monitor.freq.secs"])
        self.store = CodeStore(Path(conf["squall.local.dir"]) / "nimbus" / "topologies")
        self.state = ClusterState(conf)
        self._lock = threading.RLock()  # every write to the cluster, and the leader's round
        self._stopping = threading.Event()
        self.counts: Counter[str] = Counter()  # rounds, assignments, moved, reports refused (/metrics)
        self.leadership = Leadership(self.state, f"{self.host}:{self.port}")
        self.deadlines = LeaderDeadlines(clock)
        self.hearing = Hearing(conf, self.state, clock, self.counts, self.deadlines.wake.set)
        warn_once = WarnOnce(log)  # said once per (topology id, kind)
        self.placement = Placement(conf, self.state, self.store, self.hearing, warn_once, self.counts)
        self.operations = Operations(conf, self.state, self.store, clock, self._lock, self.leadership,
                                     self.hearing, self.placement, self.deadlines)
        self.rounds = LeaderRounds(conf, self.state, self.store, clock, self._lock, self._stopping,
                                   self.leadership, self.hearing, self.placement, self.operations,
                                   self.deadlines, warn_once, self.counts,
                                   lambda: self.guard.tokens if self.guard is not None else None)
        self.operator = OperatorActions(self.state, clock, self._lock, self.leadership, self.placement)
        self.queries = Queries(self.state, self.store, clock, self.leadership, self.hearing, self.placement,
                               self.counts)
        self._watch: Watch | None = None
        self._sync: CodeSync | None = None
        self._server: HttpServer | None = None
        self._tls: TlsMaterial | None = None  # the API's certificate and key, read again when changed
        self.refusals = Refusals(clock)
        self.guard: Guard | None = None
        self.access = ApiAccess()
        self.exit_code = 0

    @property
    def identifier(self) -> str:
        return self.leadership.identifier

    # -- lifecycle ------------------------------------------------------------------
    def start(self) -> Nimbus:
        """Bind the API (port 0 picks a free one), connect to ZooKeeper, contend for
        leadership and serve; NimbusStartError when any of it fails."""
        warn_insecure(self.conf, log)
        self.guard = Guard(self._load_tokens(), self.refusals)
        try:
            private_dir(Path(self.conf["squall.local.dir"]))  # code and conf of every topology
        except OSError as exc:
            raise NimbusStartError(f"cannot use local dir {self.conf['squall.local.dir']}: {exc}") from None
        try:
            tls = server_tls_files(self.conf)
            # code sync's way to the leader, and the token nimbus shows supervisors' logviewers
            self.access = access = ApiAccess.from_conf(self.conf, self.clock)
        except AccessError as exc:
            raise NimbusStartError(str(exc)) from None
        try:
            self._tls = None if tls is None else TlsMaterial(
                tls, lambda: server_context(*tls), "TLS certificate and key", self.clock)
        except TlsMaterialError as exc:
            raise NimbusStartError(str(exc)) from None
        try:
            self._server = HttpServer(make_app(self, self.guard, metrics_app(self.metrics_series)),
                                      self.bind_host, self.port, max_body=self.max_upload + MAX_JSON_BODY,
                                      refusals=self.refusals, limits=HttpLimits.from_conf(self.conf),
                                      tls=self._tls, name="nimbus", threads=int(self.conf["nimbus.http.threads"]))
        except OSError as exc:
            raise NimbusStartError(f"nimbus cannot listen on {self.bind_host}:{self.port}: {exc}") from None
        if tls is None:
            log.warning("SECURITY OFF: the nimbus API serves plain HTTP: tokens and code travel in clear; "
                        "set nimbus.tls.cert.file and nimbus.tls.key.file")
        self.port = self._server.port
        self.leadership.identifier = f"{self.host}:{self.port}"
        self.store.clean_temporary()
        try:
            self.state.start()
        except ClusterStateError as exc:
            self._server.stop()
            raise NimbusStartError(str(exc)) from None
        self._watch = self.state.watch_supervisors(self.hearing.on_supervisors)
        self.leadership.election = self.state.elect_nimbus(self.identifier, self.rounds.lead)
        self._sync = CodeSync(self.state, self.store, self.identifier, self.max_upload, self.monitor_freq,
                              lambda: self.is_leader, self._stopping, access)
        self._sync.start()
        self._server.start()
        log.info("nimbus started", nimbus=self.identifier, listen=f"{self.bind_host}:{self.port}",
                 tls=tls is not None, auth=self.guard.tokens is not None, zk=self.state.hosts,
                 root=self.state.root, code_dir=str(self.store.root))
        return self

    def _load_tokens(self) -> TokenFile | None:
        """The API's token table; None (with a loud warning) when API security is off."""
        path = self.conf.get("nimbus.auth.tokens.file")
        if not self.conf.get("nimbus.auth.enabled", True):
            log.warning("SECURITY OFF: nimbus.auth.enabled is false: anyone who reaches the API "
                        "controls the cluster and runs code on every supervisor")
            return None
        if not path:
            log.warning("SECURITY OFF: no nimbus.auth.tokens.file: anyone who reaches the API "
                        "controls the cluster and runs code on every supervisor "
                        "(`squall dev-cluster` and `squall token add` make one)")
            return None
        try:
            tokens = TokenFile(path, self.clock)
        except TokenFileError as exc:
            raise NimbusStartError(str(exc)) from None
        log.info("API tokens loaded", file=str(path), tokens=len(tokens.table()))
        return tokens

    def stop(self, code: int = 0) -> None:
        """Ask ``run`` to return (safe from signal handlers and other threads)."""
        if code:
            self.exit_code = code
        self._stopping.set()

    def run(self) -> int:
        """Block until ``stop()`` (or the HTTP server dies), then shut down; the exit code."""
        while not self._stopping.wait(0.5):
            if self._server is not None and not self._server.alive:
                log.error("nimbus HTTP server stopped unexpectedly")
                self.stop(1)
        self._shutdown()
        return self.exit_code

    def _shutdown(self) -> None:
        """Stop serving, step down, stop the loops and close the ZooKeeper session."""
        log.info("nimbus shutting down", nimbus=self.identifier)
        self._stopping.set()
        self.deadlines.wake.set()
        if self._server is not None:
            self._server.stop()
        if self._watch is not None:
            self._watch.cancel()
        if self.leadership.election is not None:
            self.leadership.election.cancel(THREAD_JOIN_SECS)
        if self._sync is not None:
            self._sync.join(THREAD_JOIN_SECS)
        self.state.close()
        log.info("nimbus stopped", nimbus=self.identifier)

    def release_zookeeper(self) -> None:
        """On a stop request (another thread): a session cut off from ZooKeeper is closed now,
        so that calls waiting in it fail instead of holding up the shutdown."""
        if not self.state.connected:
            self.state.close()

    @property
    def is_leader(self) -> bool:
        return self.leadership.is_leader

    # -- operations (the leader's) --------------------------------------------------
    def submit(self, name: str, receive: Callable[[Upload], None], owner: str) -> dict[str, Any]:
        return self.operations.submit(name, receive, owner)

    def kill(self, name: str, wait_secs: Any = None) -> dict[str, Any]:
        return self.operations.kill(name, wait_secs)

    def activate(self, name: str) -> dict[str, Any]:
        return self.operations.activate(name)

    def deactivate(self, name: str) -> dict[str, Any]:
        return self.operations.deactivate(name)

    def rebalance(self, name: str, num_workers: Any = None, executors: Any = None,
                  wait_secs: Any = None) -> dict[str, Any]:
        return self.operations.rebalance(name, num_workers, executors, wait_secs)

    def operate(self, name: str, action: str, body: dict[str, Any], user: str) -> dict[str, Any]:
        """An operator's request of the topology's workers (``api._OPERATE_POST``)."""
        op = self.operator
        if action == "log-levels":
            return op.set_log_levels(name, body.get("levels"), body.get("timeout_secs"), user)
        if action == "debug":
            return op.debug(name, body.get("component"), body.get("percent"), body.get("timeout_secs"), user)
        if action == "profiles":
            return op.profile(name, body.get("worker"), body.get("kind"), body.get("secs"), user)
        return op.kill_workers(name, user)

    def operator_read(self, name: str, what: str, params: dict[str, Any]) -> dict[str, Any]:
        """What operators read of a topology: requests, samples, a profile, its history."""
        if what == "operations":
            return self.operator.requests(name)
        if what == "profile":
            return self.operator.profile_result(self.access, name, params["id"])
        if what == "debug":
            return self.operator.samples(self.access, name, params["component"], params["limit"])
        return self.queries.history(name, params.get("window"))

    def take_report(self, supervisor_id: str, data: bytes) -> dict[str, Any]:
        """A supervisor's report, kept by the leader; 503 naming the leader on a standby."""
        self.leadership.require()
        return self.hearing.take_report(supervisor_id, data)

    # -- queries (any nimbus) -------------------------------------------------------
    def owner_of(self, name: str) -> str | None:
        return self.queries.owner_of(name)

    def list_topologies(self) -> list[dict[str, Any]]:
        return self.queries.list_topologies()

    def topology_status(self, name: str) -> TopologyStatus:
        return self.queries.topology_status(name)

    def topology_conf(self, name: str) -> dict[str, Any]:
        return self.queries.topology_conf(name)

    def topology_errors(self, name: str) -> dict[str, Any]:
        return self.queries.topology_errors(name)

    def worker_log(self, name: str, node: str, port: int, lines: int | None = None,
                   offset: int | None = None, inode: int | None = None) -> dict[str, Any]:
        return self.queries.worker_log(self.access, name, node, port, lines=lines, offset=offset, inode=inode)

    def cluster_info(self) -> dict[str, Any]:
        return self.queries.cluster_info({"auth": self.guard is not None and self.guard.tokens is not None,
                                          "tls": self._server is not None and self._server.tls})

    def metrics_series(self) -> Series:
        """Series for /metrics (on the server's threads): nimbus's own and its HTTP server's."""
        out = self.queries.metrics_series(self.rounds.round_secs)
        out.extend(self.refusals.series())
        if self._tls is not None:
            out.extend(self._tls.series())
        return out

    def bundle(self, topology_id: str) -> tuple[bytes, str]:
        return self.queries.bundle(topology_id)


class NimbusStartError(SquallError, RuntimeError):
    """Nimbus cannot start (cannot listen, no ZooKeeper); the message says why."""
