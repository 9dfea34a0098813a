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
* LaunchWorker: start the worker's command-line main in its own session, ``SQUALL_CONF``
  pointing at this supervisor's effective config. Its output goes to ``workers/<id>/worker.out``
  only until the worker opens its own rotating ``worker.log`` (see ``squall.rotating_log``).
* KillWorker: SIGTERM, or SIGKILL once the slot says the shutdown sleep is over.
* CleanupWorker: keep the worker's log, remove its directory and local record.

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
import shutil
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import structlog
import yaml

from squall.daemons import local_state
from squall.daemons.credentials import ENV_VAR as CREDENTIALS_ENV
from squall.daemons.credentials import without_daemon_secret_env, without_daemon_secrets
from squall.daemons.credentials import write_credentials
from squall.daemons.insecure import warn_insecure
from squall.daemons.launch_assignment import LaunchAssignment, write_launch_assignment
from squall.daemons.state import Assignment, ClusterState, ClusterStateError, NodeAssignment, SupervisorInfo
from squall.daemons.supervisor import slot as _slot
from squall.daemons.supervisor.assigned import port_assignments
from squall.daemons.nimbus.access import AccessError
from squall.daemons.supervisor.downloads import CodeDownloads
from squall.daemons.supervisor.handover import Handovers, HandoverUnavailable, NoSecrets, TopologyHandover
from squall.daemons.supervisor.worker_user import WorkerUser, WorkerUserError
from squall.daemons.supervisor.endpoints import EndpointError, Endpoints
from squall.daemons.supervisor.metrics import SupervisorMetrics
from squall.daemons.supervisor.reporter import Reporter
from squall.daemons.supervisor.processes import (
    WorkerProc,
    parse_records,
    process_create_time,
    save_records,
    signal_worker,
    worker_alive,
)
from squall.daemons.timers import SYSTEM_CLOCK, Clock, Every, Waker, sleep

log = structlog.get_logger("squall.supervisor")

DEFAULT_WORKER_COMMAND = (sys.executable, "-m", "squall.daemons.worker.main")
FAST_TICK = 0.5  # seconds between ticks while a slot is starting, downloading or killing
CRASH_WINDOW = 60.0  # a worker dying this soon after its launch counts as a crash loop
MAX_RELAUNCH_DELAY = 30.0  # cap of the crash-loop back-off
ARCHIVED_LOGS_KEPT = 100  # logs of cleaned-up workers kept under <log dir>/workers
LAYOUT_POLL_SECS = 2.0  # how often a supervisor waiting for an upgraded nimbus looks again
# worker.out holds what a worker prints before its own rotating log is set up; if a worker
# writes there anyway (output from before that, a child process), it is emptied past this.
EARLY_OUTPUT_MAX_BYTES = 1 << 20
# Keys the workers' copy of the config leaves out: user code runs in the workers.


class SupervisorError(RuntimeError):
    """The supervisor cannot start or go on (exit code 1); the message says why."""


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
        self.worker_user: WorkerUser | None = None
        self.slots: dict[int, _slot.SlotState] = {}
        self.workers: dict[str, WorkerProc] = {}  # by worker id: every worker we still own
        self.children: dict[str, subprocess.Popen[bytes]] = {}  # workers launched by this process
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
        self._crash_hold: dict[str, float] = {}  # worker id -> relaunch not before
        self._exits_logged: set[str] = set()
        self._zk_down = False
        self.metrics = SupervisorMetrics(self.layout, clock.time)
        self.endpoints: Endpoints | None = None
        self._tokens_watch: Any = None
        self.handovers = Handovers()

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> Supervisor:
        """Lock the local dir, settle the id, write the workers' config, connect, recover the
        slots from the local state file, register and watch assignments."""
        self.started_at = self.clock.time()
        try:
            self.worker_user = WorkerUser.from_conf(self.conf)
        except WorkerUserError as exc:
            raise SupervisorError(str(exc)) from None
        try:
            local_state.private_dir(self.local_dir)
            self.workers_dir.mkdir(exist_ok=True)
            if self.worker_user is not None:  # a way through for the workers' group, nothing to list
                self.worker_user.share(self.local_dir, 0o710)
                self.worker_user.share(self.workers_dir, 0o710)
            self._take_lock()
            self.id = load_supervisor_id(self.conf, self.layout)
            self.conf["supervisor.id"] = self.id
            # The effective config without the daemons' secrets, once: workers read it
            # through SQUALL_CONF; their own topology's credentials come per launch.
            local_state.write_atomic(self.conf_path, yaml.safe_dump(
                without_daemon_secrets(self.conf), sort_keys=True).encode())
            if self.worker_user is not None:
                self.worker_user.share(self.conf_path, 0o640)
        except OSError as exc:
            self._release_lock()
            raise SupervisorError(f"cannot use local dir {self.local_dir}: {exc}") from None
        self.log = log.bind(supervisor=self.id)
        try:
            self.endpoints = Endpoints(self.conf, self.host, self.clock, self.log)
            self.endpoints.serve_metrics(self.metrics_series)
        except EndpointError as exc:
            self._release_lock()
            raise SupervisorError(str(exc)) from None
        try:
            self.code = CodeDownloads(self.layout.topologies_dir, self.conf, self.log, self._waker.wake, self.clock,
                                      self.worker_user)
        except AccessError as exc:
            self._release_lock()
            raise SupervisorError(str(exc)) from None
        warn_insecure(self.conf, self.log)
        if self.code.access.token is None:
            self.log.warning("SECURITY OFF: no squall.token (or SQUALL_TOKEN): a secured nimbus refuses this "
                             "supervisor's code downloads; an open one serves anyone")
        if self.code.access.ssl_context is None:
            self.log.warning("SECURITY OFF: no nimbus.tls.ca.file: code is downloaded over plain HTTP, "
                             "unverified except for its sha256")
        self.log.info("supervisor starting", host=self.host, ports=self.ports, local_dir=str(self.local_dir),
                      worker_user=self.worker_user.name if self.worker_user else None)
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

    def stop(self) -> None:
        """Ask ``run`` to return (safe from signal handlers and other threads)."""
        self._stopping = True
        self._waker.wake()

    def run(self) -> None:
        """The loop, until ``stop()``: tick on every assignment change, every monitor period,
        and often while a slot is in motion. Then shut down."""
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
                if any(s.name not in (_slot.State.EMPTY, _slot.State.RUNNING) for s in self.slots.values()):
                    wait = min(wait, FAST_TICK, self.monitor_secs)
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

    def metrics_series(self) -> Any:
        """This supervisor's series and its workers' (called on the metrics server's threads)."""
        used = [p for p, s in list(self.slots.items()) if s.name is not _slot.State.EMPTY]
        refused = self.endpoints.refused() if self.endpoints is not None else {}
        out = self.metrics.series(self.ports, used, dict(self.workers), self.malformed_beats, refused)
        if self.endpoints is not None:
            out.extend(self.endpoints.tls_series())
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
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

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
        records = self._load_state()
        self._kill_orphans(records)
        assigned = self.my_assignments(snapshot, {rec.port: _slot.SlotAssignment(
            rec.topology_id, [(s, e) for s, e in rec.executors], rec.code_digest) for rec in records.values()})
        now = self.clock.time()
        by_port: dict[int, WorkerProc] = {}
        for rec in sorted(records.values(), key=lambda r: r.launch_time, reverse=True):
            if rec.port in by_port:  # should not happen: one worker per port
                self.log.warning("two workers recorded for one port; killing the older", port=rec.port,
                                 worker=rec.worker_id)
                self._kill_now(rec)
                continue
            by_port[rec.port] = rec
        self.workers = {rec.worker_id: rec for rec in by_port.values()}
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
        self._save_state()

    def _load_state(self) -> dict[str, WorkerProc]:
        try:
            raw = self.state_path.read_bytes()
        except FileNotFoundError:
            return {}
        try:
            records, problems = parse_records(raw)
        except ValueError as exc:
            bad = self.state_path.with_name(f"{self.state_path.name}.corrupt-{int(self.clock.time())}")
            os.replace(self.state_path, bad)
            self.log.error("local state file is malformed; set aside (unknown workers will be killed)",
                           path=str(self.state_path), moved_to=str(bad), error=str(exc))
            return {}
        for problem in problems:
            self.log.warning("malformed worker record skipped", path=str(self.state_path), error=problem)
        return records

    def _save_state(self) -> None:
        try:
            save_records(self.state_path, self.id, self.workers)
        except OSError as exc:
            self.log.error("cannot write the local state file", path=str(self.state_path), error=str(exc))

    def _kill_orphans(self, records: Mapping[str, WorkerProc]) -> None:
        """Worker dirs without a record (a crash between launch and record, or a lost state
        file): kill a process that still runs there, then remove the dir."""
        for entry in sorted(self.workers_dir.iterdir()):
            if entry.name in records or not entry.is_dir():
                continue
            pid = local_state.read_pid(self.layout, entry.name)
            orphan = WorkerProc(entry.name, 0, "unrecorded", [], "", pid, None, 0.0)
            if pid is not None and worker_alive(pid, None, entry.name):
                self.log.warning("killing unrecorded worker", worker=entry.name, pid=pid)
                self._kill_now(orphan)
            self._remove_worker_dir(orphan)

    def _kill_now(self, rec: WorkerProc, grace: float | None = None) -> None:
        """SIGTERM, wait ``grace`` (default the shutdown sleep), SIGKILL: for start-up and
        exit, not the loop."""
        signal_worker(rec.pid, rec.create_time, rec.worker_id, signal.SIGTERM)
        if not self._wait_gone(rec, self.timeouts.shutdown_sleep if grace is None else grace):
            self.log.warning("worker did not stop in time: SIGKILL", worker=rec.worker_id, pid=rec.pid)
            signal_worker(rec.pid, rec.create_time, rec.worker_id, signal.SIGKILL)
            self._wait_gone(rec, 5.0)

    def _wait_gone(self, rec: WorkerProc, secs: float) -> bool:
        """Wait at most ``secs`` for the worker to end; True once it has."""
        deadline = self.clock.monotonic() + secs
        while worker_alive(rec.pid, rec.create_time, rec.worker_id):
            if self.clock.monotonic() >= deadline:
                return False
            self._reap()
            sleep(0.05)
        return True

    def kill_all_workers(self) -> None:
        """Stop every worker of this node (``--kill-workers-on-exit``)."""
        for rec in list(self.workers.values()):
            signal_worker(rec.pid, rec.create_time, rec.worker_id, signal.SIGTERM)
        # One shutdown sleep for all of them, not one each: they were all told at once.
        deadline = self.clock.monotonic() + self.timeouts.shutdown_sleep
        for rec in list(self.workers.values()):
            self._kill_now(rec, max(0.0, deadline - self.clock.monotonic()))
            self.log.info("worker stopped", port=rec.port, topology=rec.topology_id, worker=rec.worker_id)
            self._cleanup(_slot.CleanupWorker(rec.worker_id, "supervisor exiting"))
        self.slots = {p: _slot.SlotState(port=p) for p in self.ports}

    # -- one tick ----------------------------------------------------------------------------
    def tick(self) -> None:
        """Observe and step every port, carry out the actions, drop unused code."""
        assert self.code is not None
        self._reap()
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
        self._bound_early_output()
        if snapshot is not None:
            keep = {a.topology_id for a in assigned.values()}
            keep |= {s.assignment.topology_id for s in self.slots.values() if s.assignment is not None}
            keep |= {w.topology_id for w in self.workers.values()}
            for topology_id in self.code.cleanup(keep):
                self.log.info("code removed; topology no longer assigned here", topology=topology_id)

    def _bound_early_output(self) -> None:
        for rec in self.workers.values():
            path = self.layout.worker_early_output(rec.worker_id)
            try:
                emptied = local_state.truncate_if_over(path, EARLY_OUTPUT_MAX_BYTES)
            except OSError as exc:
                self._warn_once(("early", rec.worker_id), "cannot bound worker output", path=str(path),
                                error=str(exc))
                continue
            if emptied:
                self.log.warning("worker output outside its log passed its bound; emptied", path=str(path),
                                 worker=rec.worker_id, max_bytes=EARLY_OUTPUT_MAX_BYTES)

    def _step_port(self, port: int, assignment: _slot.SlotAssignment | None) -> None:
        assert self.code is not None
        state = self.slots[port]
        now = self.clock.time()
        rec = self.workers.get(state.worker_id) if state.worker_id else None
        alive = rec is not None and worker_alive(rec.pid, rec.create_time, rec.worker_id)
        beat_time, beat_execs = self._beat(state.worker_id) if state.worker_id and alive else (None, None)
        if self._hold_relaunch(state, assignment, alive, now):
            return
        obs = _slot.Observation(
            now=now, assignment=assignment,
            code_present=assignment is not None and self.code.present(assignment.topology_id,
                                                                      assignment.code_digest),
            worker_alive=alive, worker_pid=rec.pid if rec else None,
            heartbeat_time=beat_time, heartbeat_executors=beat_execs,
            timeouts=self.timeouts, new_worker_id=uuid.uuid4().hex,
        )
        new, actions = _slot.step(state, obs)
        self.slots[port] = new
        if new.name is not state.name:
            current = new.assignment or state.assignment
            self.log.info("slot state changed", port=port, topology=current.topology_id if current else None,
                          worker=new.worker_id or state.worker_id, previous=state.name.value,
                          state=new.name.value)
        for action in actions:
            self._perform(port, action)
            if isinstance(action, _slot.LaunchWorker) and new.relaunch_count and action.worker_id in self.workers:
                self.metrics.counts["restarts"] += 1

    def _hold_relaunch(self, state: _slot.SlotState, assignment: _slot.SlotAssignment | None,
                       alive: bool, now: float) -> bool:
        """Crash-loop back-off: a worker of an unchanged assignment that died soon after its
        launch, and not for the first time, is relaunched after 1, 2, 4 ... seconds."""
        if (alive or state.worker_id is None or state.relaunch_count < 1 or assignment != state.assignment
                or state.name not in (_slot.State.WAITING_FOR_WORKER_START, _slot.State.RUNNING)
                or state.launch_time is None or now - state.launch_time > CRASH_WINDOW):
            return False
        delay = min(2.0 ** (state.relaunch_count - 1), MAX_RELAUNCH_DELAY)
        until = self._crash_hold.setdefault(state.worker_id, now + delay)
        if now < until:
            self._warn_once(("hold", state.worker_id), "worker keeps dying; delaying its relaunch",
                            port=state.port, topology=state.assignment.topology_id if state.assignment else None,
                            worker=state.worker_id, relaunches=state.relaunch_count, delay_secs=delay)
            return True
        return False

    def _beat(self, worker_id: str) -> tuple[float | None, frozenset[tuple[int, int]] | None]:
        path = self.layout.heartbeat_file(worker_id)
        try:
            beat = local_state.read_heartbeat(self.layout, worker_id)
            return (None, None) if beat is None else (beat.time, beat.executors)
        except (ValueError, OSError) as exc:
            self.malformed_beats += 1
            self._warn_once(("beat", worker_id, str(exc)), "malformed worker heartbeat ignored",
                            worker=worker_id, path=str(path), error=str(exc))
            return None, None

    def _reap(self) -> None:
        """Collect exit codes of our own children (so they do not linger as zombies)."""
        for worker_id, child in list(self.children.items()):
            code = child.poll()
            if code is None or worker_id in self._exits_logged:
                continue
            self._exits_logged.add(worker_id)
            rec = self.workers.get(worker_id)
            fields = dict(worker=worker_id, pid=child.pid, exit_code=code,
                          port=rec.port if rec else None, topology=rec.topology_id if rec else None)
            if code == 0:
                self.log.info("worker exited", **fields)
            else:
                self.log.warning("worker exited", **fields)

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
            self._kill(port, action)
        elif isinstance(action, _slot.CleanupWorker):
            self._cleanup(action)

    def worker_command(self, action: _slot.LaunchWorker) -> list[str]:
        prefix = self.conf.get("supervisor.worker.command") or DEFAULT_WORKER_COMMAND
        return [*prefix, "start", action.topology_id, self.id, str(action.port), action.worker_id]

    def _launch(self, action: _slot.LaunchWorker) -> None:
        fields = dict(port=action.port, topology=action.topology_id, worker=action.worker_id)
        wdir = self.layout.worker_dir(action.worker_id)
        cmd = self.worker_command(action)
        handover = self._handover(action.topology_id, fields)
        if handover is None:
            return  # no record: relaunched (with back-off) once the secrets can be read
        as_user: dict[str, Any] = {}
        try:
            wdir.mkdir(parents=True, exist_ok=True)
            # The supervisor's API token and ZooKeeper password stay with it, environment included.
            env = without_daemon_secret_env(os.environ)
            env["SQUALL_CONF"] = str(self.conf_path)
            env[CREDENTIALS_ENV] = str(write_credentials(wdir, handover.credentials))
            launch_file = self._write_launch_assignment(action, handover.active)
            if self.worker_user is not None:
                self.worker_user.own(wdir)
                self.worker_user.own(Path(env[CREDENTIALS_ENV]), mode=0o600)
                if launch_file.exists():
                    self.worker_user.own(launch_file, mode=0o600)
                env, as_user = self.worker_user.environ(env), self.worker_user.popen_args()
            with open(self.layout.worker_early_output(action.worker_id), "ab") as out:
                # Own session: signals reach the worker (and its children) alone, and a
                # Ctrl-C or SIGTERM meant for the supervisor does not.
                child = subprocess.Popen(cmd, cwd=wdir, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True, **as_user)
        except OSError as exc:
            self.log.error("worker launch failed", command=cmd, error=str(exc), **fields)
            return  # no record: the next step sees no process and relaunches (with back-off)
        self.children[action.worker_id] = child
        self.metrics.counts["launches"] += 1
        rec = WorkerProc(action.worker_id, action.port, action.topology_id,
                         [[s, e] for s, e in sorted(action.executors)], action.code_digest,
                         child.pid, process_create_time(child.pid), self.clock.time())
        self.workers[action.worker_id] = rec
        self._save_state()
        self.log.info("worker launched", pid=child.pid, reason=action.reason,
                      executors=rec.executors, **fields)

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

    def _kill(self, port: int, action: _slot.KillWorker) -> None:
        rec = self.workers.get(action.worker_id or "")
        if rec is None:
            return
        sig = signal.SIGKILL if action.force else signal.SIGTERM
        sent = signal_worker(rec.pid, rec.create_time, rec.worker_id, sig)
        if sent:
            self.metrics.counts[f"kill:{sig.name}"] += 1
        self.log.info("worker signalled", port=port, topology=rec.topology_id, worker=rec.worker_id,
                      pid=rec.pid, signal=sig.name, sent=sent, reason=action.reason)

    def _cleanup(self, action: _slot.CleanupWorker) -> None:
        rec = self.workers.pop(action.worker_id, None)
        child = self.children.pop(action.worker_id, None)
        if child is not None:
            child.poll()
        self._exits_logged.discard(action.worker_id)
        self._crash_hold.pop(action.worker_id, None)
        self._warned = {k for k in self._warned if action.worker_id not in k}
        self._remove_worker_dir(rec or WorkerProc(action.worker_id, 0, "unrecorded", [], "", None, None, 0.0))
        self._save_state()
        self.log.info("worker cleaned up", worker=action.worker_id, reason=action.reason,
                      port=rec.port if rec else None, topology=rec.topology_id if rec else None)

    def _remove_worker_dir(self, rec: WorkerProc) -> None:
        wdir = self.layout.worker_dir(rec.worker_id)
        self._archive_log(self.layout.worker_log(rec.worker_id), rec, "")
        self._archive_log(self.layout.worker_early_output(rec.worker_id), rec, "-early")
        shutil.rmtree(wdir, ignore_errors=True)

    def _archive_log(self, path: Path, rec: WorkerProc, suffix: str) -> None:
        """Keep a cleaned-up worker's log (why did it die?) under ``<log dir>/workers``."""
        if not path.is_file() or path.stat().st_size == 0:
            return
        dest_dir = self.log_dir / "workers"
        try:
            dest_dir.mkdir(parents=True, exist_ok=True)
            shutil.move(str(path), dest_dir / f"{rec.topology_id}-{rec.port}-{rec.worker_id}{suffix}.log")
            kept = sorted(dest_dir.glob("*.log"), key=lambda p: p.stat().st_mtime)
            for old in kept[:-ARCHIVED_LOGS_KEPT]:
                old.unlink(missing_ok=True)
        except OSError as exc:
            self.log.warning("cannot keep worker log", worker=rec.worker_id, error=str(exc))

