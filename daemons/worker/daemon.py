"""The worker process around a WorkerRuntime: start-up, timers, watches, heartbeats, shutdown.

Start-up follows Storm's mk-worker (worker.clj): pid file; conf and assignment; the topology from
the extracted code bundle; bind the receive socket; one synchronous heartbeat, then the
heartbeat and stats timers (before executors load, so slow-loading tasks do not look dead);
refresh-connections and refresh-active once, each with its timer (the safety net) and a
ZooKeeper watch (the fast path); executors; the transfer thread. When ZooKeeper does not
answer within ``zookeeper.connection.timeout.ms`` at start, the worker runs on the assignment
its supervisor launched it for (:mod:`squall.daemons.launch_assignment`) while the session
keeps connecting; its watches come into force once ZooKeeper is back.

Every timer is a *halting* timer: a callback that raises ends the worker with exit code 1,
since a half-alive worker is worse than a dead one (the supervisor restarts it). ZooKeeper
being unreachable is not such a failure: every request gives up after the session timeout,
the timers log the outage once and the worker keeps running its last assignment. Beats and
executor stats never go to ZooKeeper: the worker leaves them on local disk (``heartbeat.json``,
``stats.json``: :mod:`squall.daemons.worker.local_files`), and its supervisor watches the
heartbeat and reports both to nimbus (Storm 2's path; see :mod:`squall.daemons.reports`). The
decisions (is this worker still assigned, which task lives where) are plain functions in
:mod:`squall.daemons.worker.decisions`. Backpressure between workers travels over the
transport, not ZooKeeper (see squall.runtime.flow).

Verbs, as in every daemon: ``start()`` brings it up, ``run()`` blocks until stopped and
shuts down (returning the exit code), ``stop(code, reason)`` asks it to stop.
"""
from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from squall.compiled import compiled_modules
from squall.daemons import local_state
from squall.daemons.credentials import ENV_VAR as CREDENTIALS_ENV
from squall.daemons.credentials import WorkerCredentials
from squall.daemons.launch_assignment import LaunchAssignment, LaunchAssignmentError, read_launch_assignment
from squall.daemons.shutdown import StopDeadline
from squall.daemons.state import Assignment, ClusterState, ClusterStateError, OperatorRequests
from squall.daemons.timers import SYSTEM_CLOCK, Clock, HaltingTimer
from squall.daemons.worker.bundle import WorkerError, load_bundle_topology, read_topology_conf
from squall.daemons.worker.decisions import (
    CHANGED,
    GONE,
    UNREADABLE,
    ExecutorId,
    OutageLog,
    assignment_verdict,
    bind_host,
    check_executors,
    is_active,
    merge_worker_conf,
    missing_tasks,
    nodes_without_host,
    task_endpoints,
)
from squall.daemons.worker.local_files import LocalFiles
from squall.daemons.worker.operator import OperatorHandler
from squall.daemons.worker.zk_writer import ZkWriter
from squall.messaging import make_context
from squall.runtime.affinity import io_cpus, worker_cpu
from squall.runtime.worker_runtime import WorkerRuntime
from squall.topology import Topology

log = structlog.get_logger("squall.worker")

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2
EXIT_PORT_IN_USE = local_state.EXIT_PORT_IN_USE  # another process holds the port: the slot is unusable
# A stop that has not finished by then ends the process anyway (os._exit with its code).
SHUTDOWN_DEADLINE_SECS = 15.0
# How long shutdown waits for a timer or writer thread; one stuck in a ZooKeeper call
# (kazoo queues requests while disconnected, without a deadline) is left behind.
THREAD_JOIN_SECS = 2.0
OPERATOR_TICK_SECS = 1.0  # how often operator requests are carried out (a log level's end, samples)


# --- the worker ------------------------------------------------------------------------

class Worker:
    """One worker process: ``run()`` starts it, waits for a stop and shuts it down.

    ``conf`` is the supervisor's configuration (SQUALL_CONF, plus ``overrides``); the
    topology's conf.json is merged in at start. ``credentials`` are the topology's own
    (ZooKeeper digest, CURVE keys), handed over by the supervisor; without them it cannot
    start. Stops come from ``stop`` (signals, a halting timer, a dead executor, the
    assignment no longer naming this worker).
    """

    def __init__(self, conf: Mapping[str, Any], topology_id: str, supervisor_id: str, port: int,
                 worker_id: str, overrides: Mapping[str, Any] | None = None,
                 clock: Clock = SYSTEM_CLOCK, credentials: WorkerCredentials | None = None) -> None:
        self.clock = clock
        self.credentials = credentials
        self.base_conf = dict(conf)
        self.overrides = dict(overrides or {})
        self.conf: dict[str, Any] = dict(conf)
        self.topology_id, self.supervisor_id = topology_id, supervisor_id
        self.port, self.worker_id = port, worker_id
        self.slot = (supervisor_id, port)
        self.layout = local_state.LocalLayout.from_conf(conf)
        self.bundle = self.layout.topology_dir(topology_id)
        self.pid = os.getpid()
        self.started_at = clock.time()
        self.executors: list[ExecutorId] = []
        self.host = str(conf.get("supervisor.host", "127.0.0.1"))
        self.state: ClusterState | None = None
        self.context: Any = None
        self.rt: Any = None  # WorkerRuntime, imported lazily with the runtime
        self.writer: ZkWriter | None = None
        self.timers: dict[str, HaltingTimer] = {}
        self.watches: list[Any] = []
        self._stop = threading.Event()
        self._stop_lock = threading.Lock()
        self.exit_code: int | None = None
        self.stop_reason = ""
        self._executors_started = False  # start_executors returned (it waits 60 s at most)
        self._last_missing: list[int] = []
        self._outage = OutageLog()
        self._known_tasks: frozenset[int] | None = None
        self._shut_down = False
        self._deadline = StopDeadline(SHUTDOWN_DEADLINE_SECS, self._deadline_code, self._release_zookeeper,
                                      "worker")
        self.log = log.bind(topology=topology_id, node=supervisor_id, port=port, worker=worker_id)
        self.files = LocalFiles(self.layout, topology_id, port, worker_id, self.pid, self.started_at, clock,
                                lambda: self.rt, self._ready, lambda: self.stopping, self.log)
        self.operator = OperatorHandler(self.layout, worker_id, supervisor_id, port, self.started_at, clock,
                                        lambda: self.rt, lambda reason: self.stop(EXIT_OK, reason), self.log,
                                        lambda: self.stopping)

    # -- stop requests ------------------------------------------------------------------
    def stop(self, code: int, reason: str) -> None:
        """Ask the main thread to shut down and exit with ``code``; the first request wins.

        Safe in a signal handler: it only sets state (``run`` logs the reason), since
        logging from a handler could deadlock on the log stream's lock."""
        with self._stop_lock:
            if self.exit_code is not None:
                return
            self.exit_code, self.stop_reason = code, reason
        self._stop.set()
        self._deadline.request()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until a stop is requested (True) or ``timeout`` passes (False)."""
        return self._stop.wait(timeout)

    def _on_halt(self, timer: str, exc: BaseException) -> None:
        self.stop(EXIT_FAILURE, f"timer {timer} failed: {exc!r}")

    def _release_zookeeper(self) -> None:
        """On a stop request (on the deadline's thread): a session cut off from ZooKeeper is
        closed now, so that calls waiting in it (start-up, a timer) fail instead of waiting."""
        state = self.state
        if state is not None and not state.connected:
            state.close()

    def _deadline_code(self) -> int:
        return EXIT_FAILURE if self.exit_code is None else self.exit_code

    def _on_fatal(self, reason: str) -> None:
        self.stop(EXIT_FAILURE, reason)

    def _checkpoint(self) -> None:
        """Between start-up steps: a stop requested meanwhile (SIGTERM) ends the start."""
        if self.stopping:
            raise _Interrupted()

    # -- start-up (Storm's mk-worker) -------------------------------------------------
    def start(self) -> None:
        """Bring the worker up; WorkerError (or ClusterStateError) when it cannot run."""
        self.log.info("launching worker", pid=self.pid, local_dir=str(self.layout.root))
        self._write_pid()
        self._read_conf()
        self._check_transport()
        if self.credentials is None:
            raise WorkerError(f"no credentials for {self.topology_id} (the supervisor passes them in "
                              f"the file named by {CREDENTIALS_ENV})")
        self._checkpoint()
        auth = self.credentials.zk_auth()
        if not auth.enabled:
            self.log.warning("SECURITY OFF: ZooKeeper authentication is off on this cluster: the "
                             "worker's nodes are open to anyone reaching ZooKeeper")
        # Background: past the connection timeout the session keeps trying while the worker
        # starts on the assignment its supervisor launched it for.
        self.state = ClusterState(self.conf, auth=auth).start(background=True)
        assignment = self._zk_assignment()
        launch = None
        if assignment is None:
            launch = self._launch_assignment()
            assignment = launch.assignment
        self.executors = self.files.executors = assignment.executors_on(self.supervisor_id, self.port)
        if not self.executors:
            raise _NotAssigned(f"the assignment of {self.topology_id} names no executors on "
                               f"{self.supervisor_id}:{self.port}")
        self.host = assignment.node_host.get(self.supervisor_id, self.host)
        self.conf["zmq.bind.host"] = bind_host(self.conf, self.host)
        topology = load_bundle_topology(self.bundle)
        self._checkpoint()
        self._make_runtime(topology)
        try:
            self.rt.bind()
        except Exception as exc:  # zmq's error, whose errno is the system's
            if getattr(exc, "errno", None) == errno.EADDRINUSE:
                raise _PortInUse(f"cannot bind {self.conf['zmq.bind.host']}:{self.port}: another process "
                                 "holds it") from None
            raise
        self.log.info("receive socket bound", bind_host=self.conf["zmq.bind.host"], port=self.port,
                      executors=[list(e) for e in self.executors])
        # Heartbeat once now (a failure here fails the start), then on timers, before the
        # executors load: slow-loading tasks must not make the worker look dead.
        self.files.heartbeat()
        self.files.write_stats()
        self._timer("heartbeat", float(self.conf["worker.heartbeat.frequency.secs"]), self.files.heartbeat)
        self._timer("stats", float(self.conf["task.heartbeat.frequency.secs"]), self.files.write_stats)
        self._timer("metrics", float(self.conf["worker.metrics.frequency.secs"]), self.files.write_metrics)
        poll = float(self.conf["task.refresh.poll.secs"])
        if launch is not None:  # ZooKeeper is away: connect and run spouts by the supervisor's copy
            self._connect(launch.assignment)
            self.rt.set_active(launch.active)
        self.refresh_connections()
        refresh = self._timer("refresh-connections", poll, self.refresh_connections)
        self.watches.append(self.state.watch_assignment(self.topology_id, lambda _a: refresh.trigger()))
        self.refresh_active()
        active = self._timer("refresh-active", poll, self.refresh_active)
        self.watches.append(self.state.watch_topology(self.topology_id, lambda _i: active.trigger()))
        # What operators ask (log levels, sampling, profiles, restarts): read as the status is.
        operator = self._timer("operator", OPERATOR_TICK_SECS, self.operator.tick)

        def on_requests(requests: OperatorRequests | None) -> None:
            self.operator.on_requests(requests)
            operator.trigger()

        self.watches.append(self.state.watch_operator_requests(self.topology_id, on_requests))
        self._checkpoint()
        self.rt.start_executors()
        self._executors_started = True
        self.rt.start_transfer()
        self.log.info("worker has finished loading", executors=len(self.executors),
                      active=self.rt.active, secs=round(self.clock.time() - self.started_at, 2),
                      compiled=",".join(m for m, built in compiled_modules().items() if built) or "none")

    def _write_pid(self) -> None:
        try:
            local_state.write_pid(self.layout, self.worker_id, self.pid)
        except OSError as exc:
            raise WorkerError(f"cannot write the pid file in {self.layout.worker_dir(self.worker_id)}: "
                              f"{exc}") from None

    def _read_conf(self) -> None:
        if not self.bundle.is_dir():
            raise WorkerError(f"code bundle for {self.topology_id} not found at {self.bundle} "
                              "(the supervisor downloads and extracts it before launching workers)")
        topology_conf = read_topology_conf(self.bundle)
        self.conf, ignored = merge_worker_conf(self.base_conf, topology_conf, self.overrides)
        if ignored:
            self.log.warning("daemon keys in the topology conf ignored", keys=ignored)

    def _check_transport(self) -> None:
        transport = self.conf.get("squall.messaging.transport")
        if transport != "zmq":
            raise WorkerError(f"squall.messaging.transport is {transport!r}; a worker process "
                              "talks to other workers over zmq")

    def _zk_assignment(self) -> Assignment | None:
        """The assignment in ZooKeeper, authoritative when ZooKeeper answers (_NotAssigned
        when there is none); None when ZooKeeper does not answer."""
        assert self.state is not None
        try:
            if not self.state.connected:
                return None
            assignment = self.state.assignment(self.topology_id)
            listed = assignment is not None or self._assignment_listed()
        except ClusterStateError:
            if self.state.connected:  # refused (not authorized): no reason to guess
                raise
            return None
        if assignment is None:
            if listed:
                raise WorkerError(f"the assignment of {self.topology_id} is unreadable (see the "
                                  "malformed-data warning above)")
            raise _NotAssigned(f"there is no assignment for {self.topology_id}")
        return assignment

    def _launch_assignment(self) -> LaunchAssignment:
        """ZooKeeper is away: the assignment the supervisor launched this worker for,
        checked (WorkerError when unusable). The outage is logged here, once."""
        path = self.layout.launch_assignment_file(self.worker_id)
        try:
            launch = read_launch_assignment(path, self.topology_id, self.supervisor_id, self.port)
        except LaunchAssignmentError as exc:
            raise WorkerError(f"ZooKeeper is unreachable and the supervisor's assignment cannot be "
                              f"used: {exc}") from None
        self._outage.failed(self.clock.monotonic())  # the timers stay quiet until it is back
        self.log.warning("ZooKeeper unreachable at start; running on the assignment the supervisor "
                         "launched this worker for until it is back",
                         zk=self.state.hosts if self.state else None,
                         assignment_version=launch.assignment.version, active=launch.active)
        return launch

    def _assignment_listed(self) -> bool:
        assert self.state is not None
        return self.state.assignment_exists(self.topology_id)

    def _make_runtime(self, topology: Topology) -> None:
        assert self.credentials is not None
        curve = self.credentials.curve_keys() if self.conf.get("zmq.curve", True) else None
        if curve is None:
            self.log.warning("SECURITY OFF: CurveZMQ is off (zmq.curve: false): worker traffic is "
                             "plain TCP, unauthenticated")
        # ZeroMQ's I/O threads off the CPU of the worker's Python threads (worker.pin.cpu).
        self.context = make_context(self.conf, curve=curve, io_cpus=io_cpus(worker_cpu(self.conf, self.port)))
        assert self.state is not None
        self.writer = ZkWriter(self.state, self.topology_id, self.port, self.host, self.conf, self.clock)
        self.writer.start()
        self.rt = WorkerRuntime(self.topology_id, topology, self.conf, self.executors, self.port,
                                self.context, host=self.host, error_sink=self.writer.report_error,
                                on_fatal=self._on_fatal)
        self._known_tasks = frozenset(self.rt.task_to_component)
        problems = check_executors(self.executors, self.rt.task_to_component)
        if problems:
            raise WorkerError("the assignment does not fit the topology in the code bundle: "
                              + "; ".join(problems))

    def _timer(self, name: str, period: float, fn: Callable[[], None]) -> HaltingTimer:
        timer = HaltingTimer(name, period, fn, self._on_halt, lambda: self.stopping, self.clock,
                             owner="worker").start()
        self.timers[name] = timer
        return timer

    # -- timer callbacks ----------------------------------------------------------------
    def _ready(self) -> bool:
        return self._executors_started and all(t.started.is_set() for t in self.rt.threads)

    def _zk_call(self, what: str, fn: Callable[[], Any]) -> Any:
        """Run one ZooKeeper request of a timer; None while ZooKeeper is unreachable (each
        request gives up after the session timeout): the worker keeps running on what it has."""
        try:
            if self.state is None or not self.state.connected:  # fail fast while disconnected
                raise ClusterStateError("not connected to ZooKeeper")
            result = fn()
        except ClusterStateError as exc:
            if self._outage.failed(self.clock.monotonic()):
                self.log.warning("ZooKeeper unavailable; running on the last assignment", during=what,
                                 error=str(exc))
            return None
        lasted = self._outage.recovered(self.clock.monotonic())
        if lasted is not None:
            self.log.info("ZooKeeper available again", outage_secs=round(lasted, 1),
                          failed_calls=self._outage.failures)
        return result

    def refresh_connections(self) -> None:
        """Storm's mk-refresh-connections, plus the "still assigned?" check."""
        if self.stopping:
            return
        assert self.state is not None
        state = self.state
        read = self._zk_call("assignment read",
                             lambda: (a := state.assignment(self.topology_id),
                                      True if a is not None else self._assignment_listed()))
        if read is None:
            return  # ZooKeeper is away: keep the connections we have
        assignment, listed = read
        verdict = assignment_verdict(assignment, listed, self.supervisor_id, self.port, self.executors)
        if verdict == UNREADABLE:
            self.log.warning("assignment unreadable; keeping current connections")
            return
        if verdict in (GONE, CHANGED):
            now = [] if assignment is None else [list(e) for e in assignment.executors_on(*self.slot)]
            self.stop(EXIT_OK, f"assignment no longer names this worker's executors ({verdict}); "
                              f"assigned here now: {now}")
            return
        assert assignment is not None
        self._connect(assignment)

    def _connect(self, assignment: Assignment) -> None:
        """Connections to the slots of the tasks this worker sends to, by ``assignment``."""
        endpoints = task_endpoints(assignment, self._known_tasks)
        hostless = nodes_without_host(assignment)
        if hostless:
            self.log.warning("assignment has nodes without a host", nodes=hostless)
        self.rt.refresh_connections(endpoints)
        missing = missing_tasks(self.rt.outbound_tasks(), self.rt.local_tasks, endpoints)
        if missing and missing != self._last_missing:
            self.log.warning("missing assignment for tasks", tasks=missing)
        self._last_missing = missing

    def refresh_active(self) -> None:
        """Storm's refresh-storm-active: spouts run only while the topology is active."""
        if self.stopping:
            return
        assert self.state is not None
        state = self.state
        read = self._zk_call("topology read", lambda: (state.topology(self.topology_id),))
        if read is None:
            return  # ZooKeeper is away: keep the status we have
        active = is_active(read[0])
        if active != self.rt.active:
            self.log.info("topology status changed", active=active)
        self.rt.set_active(active)

    # -- shutdown (Storm's shutdown*) --------------------------------------------------
    def _shutdown(self) -> None:
        """Stop everything that was started, in order; safe after a partial start.

        The refresh timers and watches go first (they would open connections on a closing
        context); the heartbeat timers run until the runtime has stopped, so a slow
        shutdown does not look like a dead worker."""
        if self._shut_down:
            return
        self._shut_down = True
        self.log.info("shutting down worker", reason=self.stop_reason)
        if self.state is not None and not self.state.connected:
            # Cut off from ZooKeeper: closing the session now releases threads stuck in calls.
            self.state.close()
        for watch in self.watches:
            watch.cancel()
        for name in ("refresh-connections", "refresh-active"):
            if name in self.timers:
                self.timers[name].cancel(THREAD_JOIN_SECS)
        if self.context is not None:
            self.context.ending()  # the sockets the runtime closes below flush briefly
        if self.rt is not None:
            try:
                self.rt.shutdown()  # stop receiving, executors, transfer thread, close sockets
            except Exception:  # noqa: BLE001 - keep shutting down the rest
                self.log.exception("runtime shutdown failed")
        if self.context is not None:
            self.context.term()  # after the transfer thread: zmq sockets are single-threaded
            self.log.info("messaging context terminated")
        for timer in self.timers.values():
            timer.cancel(THREAD_JOIN_SECS)
        self.operator.close()
        if self.writer is not None:
            self.writer.stop(THREAD_JOIN_SECS)
        try:
            self.files.remove()
        except OSError as exc:
            self.log.warning("removing the heartbeat, stats or metrics file failed", error=str(exc))
        if self.state is not None:
            self.state.close()
        self.log.info("worker shut down")

    # -- the whole life -----------------------------------------------------------------
    def run(self) -> int:
        """Start, wait for a stop request, shut down; returns the exit code.

        Once a stop is requested, a StopDeadline ends the process if shutdown has not
        finished within SHUTDOWN_DEADLINE_SECS, even when the main thread is stuck in start-up."""
        self._deadline.start()
        try:
            self.start()
        except _Interrupted:
            pass
        except _NotAssigned as exc:
            self.stop(EXIT_OK, str(exc))
        except _PortInUse as exc:
            self.stop(EXIT_PORT_IN_USE, f"worker failed to start: {exc}")
        except (WorkerError, ClusterStateError, OSError) as exc:
            self.stop(EXIT_FAILURE, f"worker failed to start: {exc}")
        except Exception as exc:  # noqa: BLE001 - an unexpected failure is still a clean exit 1
            self.log.exception("worker failed to start")
            self.stop(EXIT_FAILURE, f"worker failed to start: {exc!r}")
        while not self.wait(1.0):
            pass
        (self.log.info if self.exit_code == EXIT_OK else self.log.error)(
            "worker stopping", reason=self.stop_reason, exit_code=self.exit_code)
        try:
            self._shutdown()
        except Exception:  # noqa: BLE001
            self.log.exception("worker shutdown failed")
            return EXIT_FAILURE
        finally:
            self._deadline.done()
        return EXIT_FAILURE if self.exit_code is None else self.exit_code


class _PortInUse(Exception):
    """At start, another process holds this worker's port: exit EXIT_PORT_IN_USE, so its
    supervisor looks at the port and takes the slot out of use while it is held."""


class _NotAssigned(Exception):
    """At start, the assignment does not name this worker: nothing to run, exit 0."""


class _Interrupted(Exception):
    """A stop was requested while starting."""
