"""``squall supervisor``: one per host; runs, watches, restarts and kills this node's workers.

The supervisor registers its slots (ports) in ZooKeeper (an ephemeral node, written when it
changes, not on a timer), follows its own parts of the assignments (``/node-assignments/<id>``,
:mod:`squall.daemons.supervisor.feed`; what each port runs is decided by
:mod:`squall.daemons.supervisor.assigned`), and reports its workers' beats and stats to the
leading nimbus every ``supervisor.heartbeat.frequency.secs``
(:mod:`squall.daemons.supervisor.reporter`; the report is this supervisor's heartbeat too).
Its loop ticks the slot state machine of every port (:mod:`squall.daemons.supervisor.ports`),
whose actions :mod:`squall.daemons.supervisor.actions` carries out: download code, launch,
kill and clean up workers, report the verdicts that ended one.

Each launched worker is recorded in ``supervisor-state.json`` (pid and process start time) so
that a restarted supervisor adopts workers that are alive and still assigned
(``adoption.recover``) and kills the others. Stopping the supervisor leaves workers running
(Storm's behaviour) unless ``--kill-workers-on-exit`` is given.

``Supervisor`` is the shell: start-up (:mod:`squall.daemons.supervisor.startup`), the loop,
registration, the HTTP endpoints' callbacks and shutdown. Verbs, as in every daemon:
``start()`` brings it up, ``run()`` blocks until stopped and shuts down, ``stop()`` asks it to
stop (safe from signal handlers).
"""
from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import structlog
import yaml

from squall.daemons import local_state
from squall.daemons.credentials import without_daemon_secrets
from squall.daemons.insecure import warn_insecure
from squall.daemons.metrics.families import Series
from squall.daemons.nimbus.access import AccessError
from squall.daemons.reports import report_epoch
from squall.daemons.state import ClusterState, ClusterStateError, SupervisorInfo
from squall.daemons.supervisor import slot as _slot
from squall.daemons.supervisor import worker_files
from squall.daemons.supervisor.actions import WorkerActions
from squall.daemons.supervisor.containment import Containment, become_subreaper, describe, zookeeper_endpoints
from squall.daemons.supervisor.downloads import CodeDownloads
from squall.daemons.supervisor.endpoints import EndpointError, Endpoints
from squall.daemons.supervisor.environments import EnvBuildError, TopologyEnvironments
from squall.daemons.supervisor.feed import AssignmentFeed
from squall.daemons.supervisor.metrics import SupervisorMetrics
from squall.daemons.supervisor.ports import PortSlots
from squall.daemons.supervisor.processes import WorkerProc
from squall.daemons.supervisor.reporter import Reporter
from squall.daemons.supervisor.startup import (
    LocalDirLock,
    SupervisorError,
    load_supervisor_id,
    worker_accounts,
    worker_groups,
)
from squall.daemons.supervisor.worker_user import OWN, WorkerAccounts
from squall.daemons.supervisor.workers import LocalWorkers
from squall.daemons.timers import SYSTEM_CLOCK, Clock, Every, Waker
from squall.daemons.warn_once import WarnOnce
from squall.state.stores import state_dir

__all__ = ["Supervisor", "SupervisorError", "load_supervisor_id"]

log = structlog.get_logger("squall.supervisor")

FAST_TICK = 0.5  # seconds between ticks while a slot is starting, downloading, killing or held
MEMORY_TICK = 1.0  # seconds between memory checks when the kernel does not enforce the limit


class Supervisor:
    """One host's supervisor: ``start()``, then ``run()`` until ``stop()``.

    ``kill_workers_on_exit``: stop this node's workers when the supervisor stops (by
    default they keep running and the next supervisor on this local dir adopts them)."""

    def __init__(self, conf: Mapping[str, Any], kill_workers_on_exit: bool = False,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.conf: dict[str, Any] = dict(conf)
        self.clock = clock
        self.kill_workers_on_exit = kill_workers_on_exit
        self.layout = local_state.LocalLayout.from_conf(conf)
        self.local_dir = self.layout.root
        self.conf["squall.local.dir"] = str(self.local_dir)
        log_dir = conf.get("squall.log.dir")
        self.log_dir = Path(str(log_dir)).expanduser().absolute() if log_dir else self.local_dir / "logs"
        self.ports: list[int] = list(conf["supervisor.slots.ports"])
        self.host = str(conf["supervisor.host"])
        self.timeouts = _slot.Timeouts.from_conf(conf)
        self.monitor_secs = float(conf["supervisor.monitor.frequency.secs"])
        self.id = ""
        self.log: Any = log
        self.state: ClusterState | None = None
        self.code: CodeDownloads | None = None
        self.feed: AssignmentFeed | None = None
        self.port_slots: PortSlots | None = None  # the slot machines, once started
        self.accounts = WorkerAccounts(OWN)
        self.containment = Containment()
        mb = conf.get("worker.memory.max.mb")
        self.memory_max = int(mb) << 20 if mb else None
        most = conf.get("worker.zookeeper.max.connections")
        self.zk_max = int(most) if most else None  # a worker's connections to ZooKeeper, past which it is killed
        self.state_dir = state_dir(self.conf)
        self.started_at = 0.0
        # This run's secret for its reports to nimbus: only its sha256 goes into the node.
        self.report_key = secrets.token_hex(32)
        self._stopping = False  # a plain flag: set from signal handlers
        self._waker = Waker()
        self._registered: SupervisorInfo | None = None  # the node's content as last written (time 0)
        self.reporter: Reporter | None = None
        self._watch: Any = None
        self._dir_lock = LocalDirLock(self.layout.supervisor_lock_file, self.local_dir)
        self.metrics = SupervisorMetrics(self.layout, clock.time)
        self.local = LocalWorkers(self.layout, self.log_dir, self.layout.supervisor_state_file, clock,
                                  self.containment, self.metrics.counts, log,
                                  zookeeper_endpoints(conf) if self.zk_max is not None else frozenset())
        self.endpoints: Endpoints | None = None
        self._tokens_watch: Any = None

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> Supervisor:
        """Lock the local dir, settle the id, write the workers' config, connect, recover the
        slots from the local state file, register and watch assignments."""
        self.started_at = self.clock.time()
        self.accounts = worker_accounts(self.conf, self.local_dir)
        try:
            local_state.private_dir(self.local_dir)
            self.layout.workers_dir.mkdir(exist_ok=True)
            if self.accounts.switches:  # a way through for workers to what is theirs, nothing to list
                for path in (self.local_dir, self.layout.workers_dir, self.layout.topologies_dir, self.state_dir):
                    worker_files.pass_through(path)
            self._dir_lock.take()
            self.id = load_supervisor_id(self.conf, self.layout)
            self.conf["supervisor.id"] = self.id
            # The effective config without the daemons' secrets, once: each worker gets a
            # copy; their own topology's credentials come per launch.
            worker_conf = yaml.safe_dump(without_daemon_secrets(self.conf), sort_keys=True).encode()
            local_state.write_atomic(self.layout.supervisor_conf_file, worker_conf)
        except OSError as exc:
            self._release_lock()
            raise SupervisorError(f"cannot use local dir {self.local_dir}: {exc}") from None
        self.log = self.local.log = log.bind(supervisor=self.id)
        self._contain()
        try:
            self.endpoints = Endpoints(self.conf, self.host, self.clock, self.log)
            self.endpoints.serve_metrics(self.metrics_series, self._owner_of)
        except EndpointError as exc:
            self._release_lock()
            raise SupervisorError(str(exc)) from None
        try:
            self.code = CodeDownloads(self.layout.topologies_dir, self.conf, self.log, self._waker.wake, self.clock,
                                      root_mode=worker_files.PASS_THROUGH if self.accounts.switches else 0o700)
        except AccessError as exc:
            self._release_lock()
            raise SupervisorError(str(exc)) from None
        warn_insecure(self.conf, self.log)
        for sentence in self.accounts.warnings():
            self.log.warning(sentence)
        if self.code.access.token is None:
            self.log.warning("SECURITY OFF: no squall.token (or SQUALL_TOKEN): a secured nimbus refuses this "
                             "supervisor's code downloads; an open one serves anyone")
        if self.code.access.ssl_context is None:
            self.log.warning("SECURITY OFF: no nimbus.tls.ca.file: code is downloaded over plain HTTP, "
                             "unverified except for its sha256")
        self.log.info("supervisor starting", host=self.host, ports=self.ports, local_dir=str(self.local_dir),
                      workers_as=self.accounts.mode, worker_python=self.conf["supervisor.worker.command"][0],
                      memory_max_mb=self.memory_max >> 20 if self.memory_max else None,
                      **describe(self.containment))
        self.state = ClusterState(self.conf)
        self.feed = feed = AssignmentFeed(self.state, self.id, self._waker, self.log)
        try:
            self.state.start()
            feed.wait_for_layout(lambda: self._stopping)
            snapshot = feed.read()
        except ClusterStateError as exc:
            self.state.close()
            self._stop_endpoints()
            self._release_lock()
            raise SupervisorError(str(exc)) from None
        warn_once = WarnOnce(self.log)  # one-off warnings, said again once their worker is cleaned up
        try:
            self.envs = TopologyEnvironments(self.layout.venvs_dir, self.layout.topologies_dir, self.conf, self.log,
                                             self._waker.wake, self.clock,
                                             root_mode=worker_files.PASS_THROUGH if self.accounts.switches else 0o700)
        except EnvBuildError as exc:
            self.state.close()
            self._stop_endpoints()
            self._release_lock()
            raise SupervisorError(str(exc)) from None
        actions = WorkerActions(self.conf, self.id, self.host, self.local, self.code, self.envs, feed, self.accounts,
                                self.containment, self.memory_max, worker_conf, self.state_dir, self.metrics,
                                self.clock, self.log, warn_once)
        self.port_slots = PortSlots(self.id, self.ports, self.timeouts, self.memory_max, self.local, self.code,
                                    self.envs, feed, actions, self.metrics, self.clock, self.log, warn_once,
                                    bind_host=str(self.conf.get("zmq.bind.host") or self.host), zk_max=self.zk_max)
        self.port_slots.recover(snapshot)
        try:
            self._tokens_watch = self.state.watch_api_tokens(self.endpoints.tokens_published)
            self.endpoints.serve_logs(self._worker_log, self._owner_of)
            self._register()
            self._watch = self.state.watch_node_assignments(self.id, feed.on_assignments)
        except (ClusterStateError, EndpointError) as exc:
            self.state.close()
            self._stop_endpoints()
            self._release_lock()
            if isinstance(exc, EndpointError):
                raise SupervisorError(str(exc)) from None
            raise SupervisorError(f"cannot watch assignments: {exc}") from None
        self.reporter = Reporter(self.conf, self.id, self.layout, lambda: list(self.workers.values()),
                                 feed.nimbus_leader, self.clock, self.code.access,
                                 signing=(report_epoch(self.started_at), self.report_key)).start()
        self.log.info("supervisor started", ports=self.ports)
        return self

    def _contain(self) -> None:
        """The cgroups of this supervisor's workers where the host allows, and the child
        subreaper role either way (see containment)."""
        become_subreaper()
        try:
            groups = worker_groups(self.conf, self.id, self.log)
        except SupervisorError:
            self._release_lock()
            raise
        self.containment = self.local.containment = Containment(groups)

    @property
    def slots(self) -> dict[int, _slot.SlotState]:
        """Port -> its slot machine's state (none before ``start``)."""
        return self.port_slots.slots if self.port_slots is not None else {}

    @property
    def workers(self) -> dict[str, WorkerProc]:
        """Every worker this supervisor owns, by worker id."""
        return self.local.records

    def stop(self) -> None:
        """Ask ``run`` to return (safe from signal handlers and other threads)."""
        self._stopping = True
        self._waker.wake()

    def run(self) -> None:
        """The loop, until ``stop()``: tick on every assignment change, every monitor period,
        and often while a slot is in motion; write the supervisor node when it changed. Then
        shut down."""
        assert self.feed is not None and self.port_slots is not None
        poll = Every(self.monitor_secs, self.clock)
        try:
            while not self._stopping:
                if poll.due():
                    self.feed.poll()
                try:
                    self.port_slots.tick()
                except Exception:  # noqa: BLE001 - one bad tick must not end the node
                    self.log.exception("supervisor tick failed")
                self._register()
                wait = poll.left()
                if any(s.name not in (_slot.State.EMPTY, _slot.State.RUNNING, _slot.State.UNUSABLE)
                       or s.hold_until is not None for s in self.slots.values()):
                    wait = min(wait, FAST_TICK, self.monitor_secs)
                if self.workers and (self.memory_max is not None and not self.containment.kernel_memory
                                     or self.zk_max is not None):
                    wait = min(wait, MEMORY_TICK)  # the kernel bounds neither: a look every second
                self._waker.wait(wait)
        finally:
            self._shutdown()

    def _shutdown(self) -> None:
        """Close ZooKeeper; workers keep running unless ``kill_workers_on_exit``. The node is
        left marked away (nimbus keeps its slots for ``supervisor.restart.grace.secs``, so a
        restart adopts the workers), or removed when the workers were stopped too."""
        for watch in (self._watch, self._tokens_watch):
            if watch is not None:
                watch.cancel()
        if self.reporter is not None:
            self.reporter.stop()
        if self.kill_workers_on_exit and self.port_slots is not None:
            self.port_slots.kill_all_workers()
        else:
            running = sorted(w.worker_id for w in self.workers.values())
            self.log.info("supervisor stopping; workers left running", workers=running)
        if self.state is not None and not self.state.closed:
            if self.id and self.state.connected:
                try:
                    if self.kill_workers_on_exit:
                        self.state.unregister_supervisor(self.id)
                    else:
                        # Coming back: nimbus keeps our slots for supervisor.restart.grace.secs.
                        self.state.supervisor_away(self._info())
                except ClusterStateError as exc:
                    self.log.warning("unregistering failed", error=str(exc))
            self.state.close()
        self._stop_endpoints()
        self._release_lock()
        self.log.info("supervisor stopped")

    # -- HTTP endpoints ----------------------------------------------------------------------
    def _stop_endpoints(self) -> None:
        if self.endpoints is not None:
            self.endpoints.stop()

    def metrics_series(self, visible: Callable[[str], bool] | None = None) -> Series:
        """This supervisor's series and those of its workers whose topology ``visible`` allows
        (called on the metrics server's threads)."""
        used = [p for p, s in list(self.slots.items()) if s.name is not _slot.State.EMPTY]
        malformed = self.port_slots.malformed_beats if self.port_slots is not None else 0
        out = self.metrics.series(self.ports, used, dict(self.workers), malformed, visible)
        if self.endpoints is not None:
            out.extend(self.endpoints.series())
        return out

    def _owner_of(self, topology_id: str) -> str | None:
        """Who submitted a topology (the logviewer's threads); None when unknown."""
        if self.state is None:
            return None
        try:
            info = self.state.topology(topology_id)
        except (ClusterStateError, ValueError):  # ValueError: not a node name
            return None
        return info.owner if info is not None else None

    def _worker_log(self, topology_id: str, port: int) -> tuple[str, Path] | None:
        """The log of our worker for (topology, port); called on the logviewer's threads."""
        for rec in list(self.workers.values()):  # a copy: the loop thread replaces entries
            if rec.port == port and rec.topology_id == topology_id:
                return rec.worker_id, self.layout.worker_log(rec.worker_id)
        return None

    def _release_lock(self) -> None:
        """Give up the local dir (on a failed start as on a stop), and the cgroups made for it."""
        self._dir_lock.release()
        if self.containment.groups is not None:  # only groups no process is left in
            self.containment.groups.close()

    # -- ZooKeeper ---------------------------------------------------------------------------
    def _info(self) -> SupervisorInfo:
        """This supervisor's node; ``time`` is when it was written. Written when its content
        changes (a port starts or stops being used), never on a timer: liveness is in the
        reports."""
        idle = (_slot.State.EMPTY, _slot.State.UNUSABLE)
        used = sorted(p for p, s in self.slots.items() if s.name not in idle and p in self.ports)
        unusable = {p: s.unusable or "unusable" for p, s in self.slots.items()
                    if s.name is _slot.State.UNUSABLE and p in self.ports}
        return SupervisorInfo(id=self.id, host=self.host, ports=self.ports, started_at=self.started_at,
                              used_ports=used, time=self.clock.time(),
                              logviewer_port=self.endpoints.logviewer_port if self.endpoints else None,
                              unusable=unusable,
                              report_key=hashlib.sha256(self.report_key.encode()).hexdigest())

    def release_zookeeper(self) -> None:
        """On a stop request (another thread): a session cut off from ZooKeeper is closed now,
        so that calls waiting in it fail instead of holding up the shutdown."""
        state = self.state
        if state is not None and not state.connected:
            state.close()

    def _register(self) -> None:
        """Write this supervisor's node when its content changed since the last write (the
        session re-creates it after an expiry); while ZooKeeper is away, once it is back."""
        assert self.state is not None
        info = self._info()
        content = replace(info, time=0.0)
        if content == self._registered or not self.state.connected:
            return
        try:
            self.state.register_supervisor(info)
            self._registered = content
        except ClusterStateError as exc:
            self.log.warning("supervisor registration failed", error=str(exc))
