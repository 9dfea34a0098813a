"""``squall supervisor``: one per host; runs, watches, restarts and kills this node's workers.

The supervisor registers its slots (ports) in ZooKeeper (an ephemeral node, written when it
changes, not on a timer), follows its own parts of the assignments (``/node-assignments/<id>``:
a watch is the fast path, a periodic re-read every ``supervisor.monitor.frequency.secs`` the
safety net; what each port runs is decided by :mod:`squall.daemons.supervisor.assigned`), and
reports its workers' beats and stats to the leading nimbus every
``supervisor.heartbeat.frequency.secs`` (:mod:`squall.daemons.supervisor.reporter`; the
report is this supervisor's heartbeat too). It keeps one
:mod:`squall.daemons.supervisor.slot` state machine per port. Each tick it observes every
port (the assignment for it, whether the code is on disk, the worker process and its local
heartbeat file), calls ``slot.step`` and carries out the returned actions:

* DownloadCode: fetch the bundle from nimbus over HTTP on a background thread, check its
  sha256 against the assignment's digest, extract it atomically (temp dir, then rename).
* LaunchWorker: start the worker's command-line main (``launcher``) in its own session and
  cgroup, as the user ``worker_user`` gives it. Its output goes to ``workers/<id>/worker.out``
  only until the worker opens its own rotating ``worker.log`` (see ``squall.rotating_log``).
* KillWorker: SIGTERM to the worker's process group, or SIGKILL to every process of the
  worker (``containment``) once the slot says so.
* CleanupWorker: keep the worker's log, remove its directory, cgroup and local record.
* ReportProblem: a verdict that ended a worker (memory, start timeout) goes to the
  topology's errors, where ``squall status`` and the web UI show it.

Each launched worker is recorded in ``supervisor-state.json`` (pid and process start time) so
that a restarted supervisor adopts workers that are alive and still assigned
(``slot.recover``) and kills the others. Stopping the supervisor leaves workers running
(Storm's behaviour) unless ``--kill-workers-on-exit`` is given.

Verbs, as in every daemon: ``start()`` brings it up, ``run()`` blocks until stopped and
shuts down, ``stop()`` asks it to stop (safe from signal handlers).
"""
from __future__ import annotations

import fcntl
import os
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import structlog
import yaml

from squall.daemons import local_state
from squall.daemons.credentials import without_daemon_secrets
from squall.daemons.insecure import warn_insecure
from squall.daemons.launch_assignment import LaunchAssignment, write_launch_assignment
from squall.daemons.nimbus.access import AccessError
from squall.daemons.state import (
    Assignment,
    ClusterState,
    ClusterStateError,
    ErrorInfo,
    NodeAssignment,
    SupervisorInfo,
)
from squall.daemons.state.records import WORKER_COMPONENT
from squall.daemons.supervisor import cgroups, launcher, worker_files
from squall.daemons.supervisor import slot as _slot
from squall.daemons.supervisor.assigned import port_assignments
from squall.daemons.supervisor.containment import Containment, become_subreaper, describe
from squall.daemons.supervisor.downloads import CodeDownloads
from squall.daemons.supervisor.endpoints import EndpointError, Endpoints
from squall.daemons.supervisor.handover import Handovers, HandoverUnavailable, NoSecrets, TopologyHandover
from squall.daemons.supervisor.metrics import SupervisorMetrics
from squall.daemons.supervisor.processes import WorkerProc, worker_alive
from squall.daemons.supervisor.reporter import Reporter
from squall.daemons.supervisor.worker_user import OWN, WorkerAccounts, WorkerIdentity, WorkerUserError
from squall.daemons.supervisor.workers import LocalWorkers
from squall.daemons.timers import SYSTEM_CLOCK, Clock, Every, Waker
from squall.state.stores import embedded_path, namespace, state_dir

log = structlog.get_logger("squall.supervisor")

FAST_TICK = 0.5  # seconds between ticks while a slot is starting, downloading, killing or held
LAYOUT_POLL_SECS = 2.0  # how often a supervisor waiting for an upgraded nimbus looks again
MEMORY_TICK = 1.0  # seconds between memory checks when the kernel does not enforce the limit


class SupervisorError(RuntimeError):
    """The supervisor cannot start or go on (exit code 1); the message says why."""


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return ""


def load_supervisor_id(conf: Mapping[str, Any], layout: local_state.LocalLayout) -> str:
    """``supervisor.id`` if set, else the id kept in ``<local dir>/supervisor-id`` (made once)."""
    fixed = conf.get("supervisor.id")
    if fixed:
        return str(fixed)
    path = layout.supervisor_id_file
    try:
        kept = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        kept = ""
    if kept and local_state.valid_id(kept):
        return kept
    if kept:
        log.warning("supervisor id file is malformed; making a new id", path=str(path), content=kept[:80])
    new = uuid.uuid4().hex
    local_state.write_atomic(path, (new + "\n").encode())
    return new


# --- the supervisor ---------------------------------------------------------------------------

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
        self.workers_dir = self.layout.workers_dir
        self.conf_path = self.layout.supervisor_conf_file
        self.state_path = self.layout.supervisor_state_file
        self.id = ""
        self.log: Any = log
        self.state: ClusterState | None = None
        self.code: CodeDownloads | None = None
        self.accounts = WorkerAccounts(OWN)
        self.containment = Containment()
        mb = conf.get("worker.memory.max.mb")
        self.memory_max = int(mb) << 20 if mb else None
        self.state_dir = state_dir(self.conf)
        self.slots: dict[int, _slot.SlotState] = {}
        self.started_at = 0.0
        self.malformed_beats = 0
        self._stopping = False  # a plain flag: set from signal handlers
        self._waker = Waker()
        self._snapshot_lock = threading.Lock()
        self._snapshot: dict[str, NodeAssignment | None] | None = None  # this node's parts by topology
        self._whole: dict[str, Assignment] = {}  # whole assignments read at launches (outage fallback)
        self._registered: SupervisorInfo | None = None  # the node's content as last written (time 0)
        self.reporter: Reporter | None = None
        self._watch_seq = 0  # bumped by every watch delivery
        self._watch: Any = None
        self._lock_fd: int | None = None
        self._warned: set[Any] = set()  # one-off warnings already given
        self._zk_down = False
        self.metrics = SupervisorMetrics(self.layout, clock.time)
        self.local = LocalWorkers(self.layout, self.log_dir, self.state_path, clock, self.containment,
                                  self.metrics.counts, log)
        self.worker_conf = b""
        self.endpoints: Endpoints | None = None
        self._tokens_watch: Any = None
        self.handovers = Handovers()

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> Supervisor:
        """Lock the local dir, settle the id, write the workers' config, connect, recover the
        slots from the local state file, register and watch assignments."""
        self.started_at = self.clock.time()
        self._check_accounts()
        try:
            local_state.private_dir(self.local_dir)
            self.workers_dir.mkdir(exist_ok=True)
            if self.accounts.switches:  # a way through for workers to what is theirs, nothing to list
                for path in (self.local_dir, self.workers_dir, self.layout.topologies_dir, self.state_dir):
                    worker_files.pass_through(path)
            self._take_lock()
            self.id = load_supervisor_id(self.conf, self.layout)
            self.conf["supervisor.id"] = self.id
            # The effective config without the daemons' secrets, once: each worker gets a
            # copy; their own topology's credentials come per launch.
            self.worker_conf = yaml.safe_dump(without_daemon_secrets(self.conf), sort_keys=True).encode()
            local_state.write_atomic(self.conf_path, self.worker_conf)
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
        try:
            self.state.start()
            self._wait_for_layout()
            snapshot = self.state.node_assignments(self.id)
        except ClusterStateError as exc:
            self.state.close()
            self._stop_endpoints()
            self._release_lock()
            raise SupervisorError(str(exc)) from None
        with self._snapshot_lock:
            self._snapshot = snapshot
        self._recover(snapshot)
        try:
            self._tokens_watch = self.state.watch_api_tokens(self.endpoints.tokens_published)
            self.endpoints.serve_logs(self._worker_log, self._owner_of)
            self._register()
            self._watch = self.state.watch_node_assignments(self.id, self._on_assignments)
        except (ClusterStateError, EndpointError) as exc:
            self.state.close()
            self._stop_endpoints()
            self._release_lock()
            if isinstance(exc, EndpointError):
                raise SupervisorError(str(exc)) from None
            raise SupervisorError(f"cannot watch assignments: {exc}") from None
        self.reporter = Reporter(self.conf, self.id, self.layout, lambda: list(self.workers.values()),
                                 self._nimbus_leader, self.clock, self.code.access).start()
        self.log.info("supervisor started", ports=self.ports)
        return self

    def _wait_for_layout(self) -> None:
        """A cluster whose nimbus writes whole assignments only (an earlier squall) has no
        parts for this supervisor to follow: acting on none would stop every worker here.
        Wait, without registering, until a nimbus of this version leads and writes them."""
        assert self.state is not None
        warned = False
        while not self._stopping and not self.state.layout_current():
            if not warned:
                warned = True
                self.log.error("the leading nimbus is of an earlier squall (it writes whole assignments only); "
                               "this supervisor waits for an upgraded nimbus and leaves its workers alone "
                               "meanwhile: upgrade every nimbus first (docs/operations/upgrades.md)")
            self._waker.wait(LAYOUT_POLL_SECS)
        if self._stopping:
            raise ClusterStateError("stopped while waiting for an upgraded nimbus")
        if warned:
            self.log.info("a nimbus of this version leads; going on")

    def _nimbus_leader(self) -> str | None:
        """The leading nimbus's host:port from ZooKeeper (the reporter's thread)."""
        state = self.state
        if state is None or not state.connected:
            return None
        try:
            return state.nimbus_leader()
        except ClusterStateError:
            return None

    def _check_accounts(self) -> None:
        """Settle whom workers run as; SupervisorError when that user could not start one."""
        try:
            self.accounts = WorkerAccounts.from_conf(self.conf)
        except WorkerUserError as exc:
            raise SupervisorError(str(exc)) from None
        # Workers pass through the local dir's parents to their own directories.
        prefix, problem = launcher.resolve_worker_command(self.conf, self.accounts.probe_identity(),
                                                          self.local_dir.parent)
        if problem is not None:
            fix = ("set squall.local.dir to a directory outside any private home (every directory above it "
                   "passable by other users)" if launcher.PASSAGE_PROBLEM in problem else
                   "set supervisor.worker.runtime.dir to a directory root can write and every user can pass through")
            raise SupervisorError(f"workers run as {self.accounts.describe()}, but {problem}: {fix}; or set "
                                  "supervisor.worker.user ('root' runs workers as root: SECURITY OFF)")
        self.conf["supervisor.worker.command"] = prefix  # the runtime laid out for them, if they needed one

    def _contain(self) -> None:
        """The cgroups of this supervisor's workers where the host allows, and the child
        subreaper role either way (see containment)."""
        become_subreaper()
        setting = str(self.conf["supervisor.cgroup.dir"])
        try:
            parent = cgroups.parent_dir(setting, _read_text(cgroups.PROC_MOUNTINFO),
                                        _read_text(cgroups.PROC_CGROUP))
            groups = cgroups.WorkerGroups.open(parent, self.id) if parent is not None else None
            if groups is not None:
                Containment(groups).try_join()
        except cgroups.CgroupError as exc:
            if setting != "auto":
                self._release_lock()
                raise SupervisorError(f"supervisor.cgroup.dir {setting!r}: {exc}") from None
            self.log.info("workers run without cgroups; their process trees are tracked instead", reason=str(exc))
            groups = None
        self.containment = self.local.containment = Containment(groups)

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
        poll = Every(self.monitor_secs, self.clock)
        try:
            while not self._stopping:
                if poll.due():
                    self._poll_assignments()
                try:
                    self.tick()
                except Exception:  # noqa: BLE001 - one bad tick must not end the node
                    self.log.exception("supervisor tick failed")
                self._register()
                wait = poll.left()
                if any(s.name not in (_slot.State.EMPTY, _slot.State.RUNNING) or s.hold_until is not None
                       for s in self.slots.values()):
                    wait = min(wait, FAST_TICK, self.monitor_secs)
                if self.workers and self.memory_max is not None and not self.containment.kernel_memory:
                    wait = min(wait, MEMORY_TICK)
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
        if self.kill_workers_on_exit:
            self.kill_all_workers()
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

    def metrics_series(self, visible: Callable[[str], bool] | None = None) -> Any:
        """This supervisor's series and those of its workers whose topology ``visible`` allows
        (called on the metrics server's threads)."""
        used = [p for p, s in list(self.slots.items()) if s.name is not _slot.State.EMPTY]
        out = self.metrics.series(self.ports, used, dict(self.workers), self.malformed_beats, visible)
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

    def _take_lock(self) -> None:
        # Two supervisors sharing a local dir would fight over the same workers.
        fd = os.open(self.layout.supervisor_lock_file, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise SupervisorError(f"another supervisor is using local dir {self.local_dir}") from None
        self._lock_fd = fd

    def _release_lock(self) -> None:
        """Give up the local dir (on a failed start as on a stop), and the cgroups made for it."""
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        if self.containment.groups is not None:  # only groups no process is left in
            self.containment.groups.close()

    # -- ZooKeeper ---------------------------------------------------------------------------
    def _on_assignments(self, snapshot: dict[str, NodeAssignment | None]) -> None:
        # kazoo's thread: store and wake the loop, nothing more.
        with self._snapshot_lock:
            self._snapshot = snapshot
            self._watch_seq += 1
        self._waker.wake()

    def _poll_assignments(self) -> None:
        """The safety net: re-read this node's parts in case a watch event went missing."""
        assert self.state is not None
        with self._snapshot_lock:
            seq = self._watch_seq
        try:
            if not self.state.connected:  # fail fast: the loop must keep ticking the slots
                raise ClusterStateError("not connected to ZooKeeper")
            snapshot = self.state.node_assignments(self.id)
        except ClusterStateError as exc:
            if not self._zk_down:
                self.log.warning("cannot read assignments; keeping the last ones", error=str(exc))
            self._zk_down = True
            return
        if self._zk_down:
            self.log.info("assignments readable again")
        self._zk_down = False
        with self._snapshot_lock:
            if self._watch_seq == seq:  # a watch delivery during the read is newer: keep it
                self._snapshot = snapshot

    def _info(self) -> SupervisorInfo:
        """This supervisor's node; ``time`` is when it was written. Written when its content
        changes (a port starts or stops being used), never on a timer: liveness is in the
        reports."""
        used = sorted(p for p, s in self.slots.items() if s.name is not _slot.State.EMPTY and p in self.ports)
        return SupervisorInfo(id=self.id, host=self.host, ports=self.ports, started_at=self.started_at,
                              used_ports=used, time=self.clock.time(),
                              logviewer_port=self.endpoints.logviewer_port if self.endpoints else None)

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

    def my_assignments(self, snapshot: Mapping[str, NodeAssignment | None],
                       running: Mapping[int, _slot.SlotAssignment | None] | None = None
                       ) -> dict[int, _slot.SlotAssignment]:
        """Port -> what this node should run there, from its parts of the assignments; a
        malformed part keeps what ``running`` (default: the slots) says runs there."""
        if running is None:
            running = {p: s.assignment for p, s in self.slots.items()}
        out, problems = port_assignments(self.ports, snapshot, running)
        for problem in problems:
            self._warn_once(problem.key, problem.event, **problem.fields)
        return out

    def _warn_once(self, key: Any, event: str, **fields: Any) -> None:
        if key not in self._warned:
            self._warned.add(key)
            self.log.warning(event, **fields)

    # -- recovery after a restart ------------------------------------------------------------
    def _recover(self, snapshot: Mapping[str, NodeAssignment | None]) -> None:
        records = self.local.load()
        self.local.kill_orphans(records, self.timeouts.shutdown_sleep)
        assigned = self.my_assignments(snapshot, {rec.port: _slot.SlotAssignment(
            rec.topology_id, [(s, e) for s, e in rec.executors], rec.code_digest) for rec in records.values()})
        now = self.clock.time()
        by_port: dict[int, WorkerProc] = {}
        for rec in sorted(records.values(), key=lambda r: r.launch_time, reverse=True):
            if rec.port in by_port:  # should not happen: one worker per port
                self.log.warning("two workers recorded for one port; killing the older", port=rec.port,
                                 worker=rec.worker_id)
                self.local.kill_now(rec, self.timeouts.shutdown_sleep)
                continue
            by_port[rec.port] = rec
        self.local.records.update({rec.worker_id: rec for rec in by_port.values()})
        for port in sorted(set(self.ports) | set(by_port)):
            rec = by_port.get(port)
            assignment = assigned.get(port) if port in self.ports else None
            alive = rec is not None and worker_alive(rec.pid, rec.create_time, rec.worker_id)
            state = _slot.recover(port, rec.to_record() if rec else None, assignment, alive, now)
            self.slots[port] = state
            if rec is None:
                continue
            fields = dict(port=port, topology=rec.topology_id, worker=rec.worker_id, pid=rec.pid)
            if state.name is _slot.State.RUNNING:
                self.log.info("worker adopted", **fields)
            elif alive:
                self.log.info("recorded worker no longer assigned; killing it", **fields)
            else:
                self.log.info("recorded worker is gone; cleaning up", **fields)
        self.local.save(self.id)

    def kill_all_workers(self) -> None:
        """Stop every worker of this node (``--kill-workers-on-exit``)."""
        self.local.stop_all(self.timeouts.shutdown_sleep)
        self.local.save(self.id)
        self.slots = {p: _slot.SlotState(port=p) for p in self.ports}

    # -- one tick ----------------------------------------------------------------------------
    def tick(self) -> None:
        """Observe and step every port, carry out the actions, drop unused code."""
        assert self.code is not None
        self.local.reap()
        with self._snapshot_lock:
            snapshot = self._snapshot
        assigned = self.my_assignments(snapshot or {})
        for port in sorted(self.slots):
            try:
                self._step_port(port, assigned.get(port) if port in self.ports else None)
            except Exception:  # noqa: BLE001 - one port's trouble must not stop the others
                self.log.exception("slot step failed", port=port)
        for port in [p for p, s in self.slots.items() if p not in self.ports and s.name is _slot.State.EMPTY]:
            del self.slots[port]  # a recorded port no longer configured, now cleaned up
        self.local.bound_early_output()
        if snapshot is not None:
            keep = {a.topology_id for a in assigned.values()}
            keep |= {s.assignment.topology_id for s in self.slots.values() if s.assignment is not None}
            keep |= {w.topology_id for w in self.workers.values()}
            for topology_id in self.code.cleanup(keep):
                self.log.info("code removed; topology no longer assigned here", topology=topology_id)

    def _step_port(self, port: int, assignment: _slot.SlotAssignment | None) -> None:
        assert self.code is not None
        state = self.slots[port]
        now = self.clock.time()
        view = self.local.view(state.worker_id)
        rec = self.workers.get(state.worker_id) if state.worker_id else None
        beat_time, beat_execs, ready = self._beat(state.worker_id) if state.worker_id and view.alive \
            else (None, None, None)
        obs = _slot.Observation(
            now=now, assignment=assignment,
            code_present=assignment is not None and self.code.present(assignment.topology_id,
                                                                      assignment.code_digest),
            worker_alive=view.alive, worker_pid=rec.pid if rec else None,
            heartbeat_time=beat_time, heartbeat_executors=beat_execs,
            timeouts=self.timeouts, new_worker_id=uuid.uuid4().hex,
            worker_leftovers=view.leftovers, worker_ready=ready, memory_bytes=view.memory,
            memory_max_bytes=self.memory_max, oom_killed=view.oom_killed,
        )
        new, actions = _slot.step(state, obs)
        self.slots[port] = new
        if new.name is not state.name:
            current = new.assignment or state.assignment
            self.log.info("slot state changed", port=port, topology=current.topology_id if current else None,
                          worker=new.worker_id or state.worker_id, previous=state.name.value,
                          state=new.name.value)
        if new.hold_until is not None and state.hold_until is None:
            self.log.warning("worker keeps dying; delaying its relaunch", port=port,
                             topology=new.assignment.topology_id if new.assignment else None,
                             crashes=new.crashes, delay_secs=round(new.hold_until - now, 1))
        for action in actions:
            self._perform(port, action)
            if isinstance(action, _slot.LaunchWorker) and new.relaunch_count and action.worker_id in self.workers:
                self.metrics.counts["restarts"] += 1

    def _beat(self, worker_id: str) -> tuple[float | None, frozenset[tuple[int, int]] | None, bool | None]:
        """The worker's heartbeat: its time, executors, and whether its components finished
        starting (None when it does not say)."""
        path = self.layout.heartbeat_file(worker_id)
        try:
            beat = local_state.read_heartbeat(self.layout, worker_id)
            return (None, None, None) if beat is None else (beat.time, beat.executors, beat.ready)
        except (ValueError, OSError) as exc:
            self.malformed_beats += 1
            self._warn_once(("beat", worker_id, str(exc)), "malformed worker heartbeat ignored",
                            worker=worker_id, path=str(path), error=str(exc))
            return None, None, None

    # -- actions -----------------------------------------------------------------------------
    def _perform(self, port: int, action: _slot.Action) -> None:
        assert self.code is not None
        if isinstance(action, _slot.DownloadCode):
            self.log.info("code requested", port=port, topology=action.topology_id, digest=action.digest,
                          url=self.code.url(action.topology_id))
            self.code.request(action.topology_id, action.digest)
        elif isinstance(action, _slot.LaunchWorker):
            self._launch(action)
        elif isinstance(action, _slot.KillWorker):
            if action.worker_id is not None:
                self.local.signal(action.worker_id, action.force, port, action.reason)
        elif isinstance(action, _slot.CleanupWorker):
            self.local.cleanup(action.worker_id, action.reason)
            self._warned = {k for k in self._warned if action.worker_id not in k}
            self.local.save(self.id)
        elif isinstance(action, _slot.ReportProblem):
            self._report(action)

    def worker_command(self, action: _slot.LaunchWorker) -> list[str]:
        return [*launcher.worker_prefix(self.conf), "start", action.topology_id, self.id, str(action.port),
                action.worker_id]

    def _launch(self, action: _slot.LaunchWorker) -> None:
        fields = dict(port=action.port, topology=action.topology_id, worker=action.worker_id)
        cmd = self.worker_command(action)
        handover = self._handover(action.topology_id, fields)
        if handover is None:
            return  # no record: relaunched (with back-off) once the secrets can be read
        try:
            who = self._identity(action.topology_id, handover.name)
            launch_file = self._write_launch_assignment(action, handover.active)
            child = launcher.launch(cmd, self.layout.worker_dir(action.worker_id), self.layout, action.worker_id,
                                    self.worker_conf, handover.credentials, launch_file, who, self.containment,
                                    self.memory_max)
        except (OSError, launcher.LaunchError, WorkerUserError) as exc:
            self.log.error("worker launch failed", command=cmd, error=str(exc), **fields)
            return  # no record: the next step sees no process and relaunches (with back-off)
        rec = self.local.add(action.worker_id, action.port, action.topology_id, action.executors,
                             action.code_digest, child, who.uid if who else None)
        self.local.save(self.id)
        self.log.info("worker launched", pid=child.pid, reason=action.reason, executors=rec.executors,
                      uid=who.uid if who else os.getuid(), **fields)

    def _identity(self, topology_id: str, name: str | None) -> WorkerIdentity | None:
        """Whom the topology's worker runs as, with its code and state dir given to it."""
        held = {r.topology_id: r.uid for r in self.workers.values() if r.uid is not None}
        state = self._state_dir(name) if name else None
        who = self.accounts.identity(topology_id, name or topology_id, held, worker_files.owners(
            self.state_dir, but=state) if self.accounts.switches else ())
        if who is not None:
            assert self.code is not None
            worker_files.share_code(self.code.root / topology_id, who.gid)
            if state is not None:
                worker_files.own_state_dir(state, who)
        return who

    def _state_dir(self, name: str) -> Path:
        """The directory of a topology's embedded state files on this host (by its name)."""
        return embedded_path(self.state_dir, namespace(name, "x", 0)).parent

    def _handover(self, topology_id: str, fields: dict[str, Any]) -> TopologyHandover | None:
        """The topology's credentials and status for its worker (see handover)."""
        assert self.state is not None
        with self._snapshot_lock:
            self.handovers.keep_only(self._snapshot or {})
        try:
            handover = self.handovers.get(self.state, topology_id)
        except NoSecrets as exc:
            self._warn_once(("secrets", topology_id), f"{exc}; worker not launched", **fields)
            return None
        except HandoverUnavailable as exc:
            self.log.error("worker not launched", error=str(exc), **fields)
            return None
        if handover.from_memory:
            self.log.warning("ZooKeeper unreachable; launching with the topology's secrets and "
                             "assignment read earlier", **fields)
        return handover

    def _write_launch_assignment(self, action: _slot.LaunchWorker, active: bool) -> Path:
        """The whole assignment this launch is for (the worker's fallback while ZooKeeper is
        away); an older file is removed when there is none to write."""
        path = self.layout.launch_assignment_file(action.worker_id)
        assignment = self._whole_assignment(action.topology_id)
        try:
            if assignment is not None:
                return write_launch_assignment(path, LaunchAssignment(assignment, active))
        except ValueError as exc:  # larger than a ZooKeeper node: the worker will need ZooKeeper
            self.log.warning("assignment not handed to the worker", error=str(exc), worker=action.worker_id)
        path.unlink(missing_ok=True)
        return path

    def _whole_assignment(self, topology_id: str) -> Assignment | None:
        """A topology's whole assignment, read now; while ZooKeeper does not answer, the one
        read at an earlier launch (kept for the topologies assigned here only)."""
        assert self.state is not None
        with self._snapshot_lock:
            assigned = set(self._snapshot or {})
        self._whole = {t: a for t, a in self._whole.items() if t in assigned}
        try:
            if self.state.connected:
                whole = self.state.assignment(topology_id)
                if whole is not None:
                    self._whole[topology_id] = whole
                return whole
        except ClusterStateError:
            pass
        return self._whole.get(topology_id)

    def _report(self, action: _slot.ReportProblem) -> None:
        """A verdict that ended a worker, in its topology's errors (``squall status``, the UI)."""
        problem = action.problem
        self.log.warning("worker ended by the supervisor", kind=problem.kind, error=problem.text, port=action.port,
                         topology=action.topology_id, worker=action.worker_id)
        self.metrics.counts[f"ended:{problem.kind}"] += 1
        if self.state is None or not self.state.connected:
            return  # said in the log; ZooKeeper's errors cannot take it now
        error = ErrorInfo(self.clock.time(), WORKER_COMPONENT, -1, self.host, action.port, problem.text)
        try:
            self.state.report_error(action.topology_id, error)
        except (ClusterStateError, ValueError) as exc:
            self.log.warning("cannot report the worker's end", topology=action.topology_id, error=str(exc))
