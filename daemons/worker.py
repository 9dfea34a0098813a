"""The worker process around a WorkerRuntime: start-up, timers, watches, heartbeats, shutdown.

Start-up follows seed 000's mk-worker: pid file; conf and assignment; the topology from
the extracted code bundle; bind the receive socket; one synchronous heartbeat, then the
heartbeat timers (before executors load, so slow-loading tasks do not look dead);
refresh-connections and refresh-active once, each with its timer (the safety net) and a
ZooKeeper watch (the fast path); executors; the transfer thread.

Every timer is a *halting* timer: a callback that raises ends the worker with exit code 1,
since a half-alive worker is worse than a dead one (the supervisor restarts it). The
decisions (is this worker still assigned, which task lives where, whose backpressure
counts) are plain functions at the top of this module, tested without processes.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import structlog

from squall import config as _config
from squall.daemons.state import (
    Assignment,
    ClusterState,
    ClusterStateError,
    ErrorInfo,
    TopologyInfo,
    WorkerBeat,
)
from squall.messaging import make_context
from squall.model import executor_tasks
from squall.runtime.executor import ErrorThrottle
from squall.topology import Topology, TopologyError

log = structlog.get_logger("squall.worker")

ExecutorId = tuple[int, int]
Endpoint = tuple[str, int]

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2
# A stop that has not finished by then ends the process anyway (os._exit with its code).
SHUTDOWN_DEADLINE_SECS = 15.0
# How long shutdown waits for a timer or writer thread; one stuck in a ZooKeeper call
# (kazoo queues requests while disconnected, without a deadline) is left behind.
THREAD_JOIN_SECS = 2.0
# Where a topology's conf.json may not reach: keys that say where this daemon lives.
DAEMON_ONLY_PREFIXES = ("zookeeper.", "nimbus.", "supervisor.", "squall.local.dir")
ERROR_QUEUE_MAX = 100  # error reports waiting for ZooKeeper; beyond it they are counted, dropped


class WorkerError(RuntimeError):
    """The worker cannot run (bad bundle, bad conf, cannot bind...); the text says why."""


# --- decisions (plain functions) -------------------------------------------------------

KEEP, GONE, CHANGED, UNREADABLE = "keep", "gone", "changed", "unreadable"


def assignment_verdict(assignment: Assignment | None, listed: bool, node: str, port: int,
                       executors: Iterable[ExecutorId]) -> str:
    """What the current assignment means for the worker running ``executors`` on (node, port).

    ``listed`` says whether the assignment node exists (consulted only when ``assignment``
    is None, to tell a removed assignment from one that could not be decoded).
    KEEP: exactly our executors; GONE: no assignment or nothing for our slot (stop, exit 0);
    CHANGED: our slot holds another executor set (stop, exit 0: the supervisor relaunches
    a worker for the new set, as Storm's suicideIfLocalAssignmentsChanged); UNREADABLE:
    malformed data, keep running on what we have.
    """
    if assignment is None:
        return UNREADABLE if listed else GONE
    assigned = assignment.executors_on(node, port)
    if not assigned:
        return GONE
    return KEEP if assigned == sorted(executors) else CHANGED


def task_endpoints(assignment: Assignment) -> dict[int, Endpoint]:
    """task -> (host, port) from executor -> (node, port) and node -> host. Tasks on a
    node without a host are left out (see ``nodes_without_host``)."""
    out: dict[int, Endpoint] = {}
    for ex, (node, port) in assignment.executors.items():
        host = assignment.node_host.get(node)
        if host is None:
            continue
        for task in executor_tasks(ex):
            out[task] = (host, port)
    return out


def nodes_without_host(assignment: Assignment) -> list[str]:
    """Nodes that run executors but have no host in ``node_host``."""
    return sorted({node for node, _ in assignment.executors.values()} - set(assignment.node_host))


def missing_tasks(outbound: Iterable[int], local: Iterable[int],
                  endpoints: Mapping[int, Endpoint]) -> list[int]:
    """Remote tasks we may send to that have no endpoint (Storm logs these and retries)."""
    local_set = set(local)
    return sorted(t for t in outbound if t not in local_set and t not in endpoints)


def remote_backpressure(by_slot: Mapping[tuple[str, int], Iterable[int]],
                        me: tuple[str, int]) -> set[int]:
    """The union of the tasks under backpressure in every worker but this one."""
    out: set[int] = set()
    for slot, tasks in by_slot.items():
        if slot != me:
            out.update(tasks)
    return out


def is_active(info: TopologyInfo | None) -> bool:
    """Spouts run only while the topology's status is "active" (gone counts as inactive)."""
    return info is not None and info.status == "active"


def check_executors(executors: Iterable[ExecutorId], task_to_component: Mapping[int, str]) -> list[str]:
    """Problems of an executor set against the topology's tasks (empty when it fits)."""
    problems = []
    for ex in sorted(executors):
        comps = {task_to_component.get(t) for t in executor_tasks(ex)}
        if None in comps:
            problems.append(f"executor {list(ex)} names tasks the topology does not have")
        elif len(comps) > 1:
            problems.append(f"executor {list(ex)} spans components {sorted(comps)}")  # type: ignore[type-var]
    return problems


def merge_worker_conf(base: Mapping[str, Any], topology_conf: Mapping[str, Any],
                      overrides: Mapping[str, Any] | None = None) -> tuple[dict[str, Any], list[str]]:
    """The worker's conf: the supervisor's, then the topology's own, then ``-c`` overrides.
    Keys that say where the daemon lives (ZooKeeper, local dir, ...) stay the supervisor's;
    returns (conf, topology keys ignored)."""
    conf = dict(base)
    ignored = []
    for key, value in topology_conf.items():
        if key.startswith(DAEMON_ONLY_PREFIXES):
            ignored.append(key)
        else:
            conf[key] = value
    conf.update(overrides or {})
    return conf, sorted(ignored)


class ConnectionGuard:
    """Decides when ZooKeeper has been unreachable for too long.

    kazoo queues requests while it reconnects and waits for them without a deadline, so a
    worker cut off from ZooKeeper would hang in its timers, half alive. ``check`` is fed
    the connection state periodically and raises once it has been down for ``limit`` secs.
    """

    def __init__(self, limit: float, now: float) -> None:
        self.limit = limit
        self.last_connected = now

    def check(self, connected: bool, now: float) -> None:
        if connected:
            self.last_connected = now
        elif now - self.last_connected > self.limit:
            raise ClusterStateError(f"ZooKeeper unavailable for {now - self.last_connected:.1f}s "
                                    f"(longer than the session timeout, {self.limit:.1f}s)")


def heartbeat_record(now: float, topology_id: str, port: int, worker_id: str, pid: int,
                     executors: Iterable[ExecutorId]) -> dict[str, Any]:
    """The local heartbeat file's content (read by the supervisor's slot machine)."""
    return {"time": now, "topology_id": topology_id, "port": port, "worker_id": worker_id,
            "pid": pid, "executors": [[s, e] for s, e in sorted(executors)]}


# --- paths and files -------------------------------------------------------------------

def local_dir(conf: Mapping[str, Any]) -> Path:
    return Path(str(conf["squall.local.dir"])).absolute()


def worker_dir(conf: Mapping[str, Any], worker_id: str) -> Path:
    return local_dir(conf) / "workers" / worker_id


def topology_dir(conf: Mapping[str, Any], topology_id: str) -> Path:
    return local_dir(conf) / "topologies" / topology_id


def write_atomic(path: Path, text: str) -> None:
    """Write via a temporary file and rename, so readers never see half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def read_topology_conf(bundle: Path) -> dict[str, Any]:
    """The topology's conf.json, validated; WorkerError saying what is wrong."""
    path = bundle / "conf.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise WorkerError(f"code bundle at {bundle} has no conf.json") from None
    except (OSError, ValueError) as exc:
        raise WorkerError(f"cannot read {path}: {exc}") from None
    if not isinstance(data, dict):
        raise WorkerError(f"{path} must hold a JSON object")
    try:
        return _config.validate(data)
    except _config.ConfigError as exc:
        raise WorkerError(f"{path}: {exc}") from None


def load_bundle_topology(bundle: Path) -> Topology:
    """Put the bundle's ``code/`` on sys.path and read ``topology.bin``."""
    code = bundle / "code"
    if not code.is_dir():
        raise WorkerError(f"code bundle at {bundle} has no code/ directory")
    if str(code) not in sys.path:
        sys.path.insert(0, str(code))
    try:
        data = (bundle / "topology.bin").read_bytes()
    except OSError as exc:
        raise WorkerError(f"cannot read {bundle / 'topology.bin'}: {exc.strerror or exc}") from None
    try:
        return Topology.from_bytes(data)
    except TopologyError as exc:
        raise WorkerError(f"{bundle / 'topology.bin'}: {exc}") from None
    except Exception as exc:  # unpickling runs user imports (custom groupings)
        raise WorkerError(f"{bundle / 'topology.bin'} cannot be loaded from {code}: "
                          f"{type(exc).__name__}: {exc}") from None


# --- timers ----------------------------------------------------------------------------

class HaltingTimer:
    """Runs ``fn`` every ``period`` seconds on its own thread; ``trigger()`` runs it soon.

    If ``fn`` raises, the error is logged, ``on_halt(name, exc)`` is called and the timer
    stops: the owner ends the process (Storm's mk-halting-timer). While ``quiet()`` is true
    (the owner is already stopping) a failure is only logged at info level."""

    def __init__(self, name: str, period: float, fn: Callable[[], None],
                 on_halt: Callable[[str, BaseException], None],
                 quiet: Callable[[], bool] = lambda: False) -> None:
        self.name, self.period, self._fn, self._on_halt = name, max(0.01, float(period)), fn, on_halt
        self._quiet = quiet
        self._wake = threading.Event()
        self._cancelled = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"timer-{name}", daemon=True)
        self.runs = 0

    def start(self) -> HaltingTimer:
        self._thread.start()
        return self

    def trigger(self) -> None:
        """Run the callback as soon as the timer thread is free (a watch's fast path)."""
        self._wake.set()

    def cancel(self, timeout: float = 10.0) -> None:
        """Stop the timer and wait for a callback in progress to finish."""
        self._cancelled.set()
        self._wake.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        next_at = time.monotonic() + self.period
        while True:
            self._wake.wait(max(0.0, next_at - time.monotonic()))
            if self._cancelled.is_set():
                return
            self._wake.clear()
            try:
                self._fn()
            except BaseException as exc:  # noqa: BLE001 - any failure halts the worker
                if self._cancelled.is_set() or self._quiet():
                    log.info("timer callback failed while stopping", timer=self.name, error=repr(exc))
                else:
                    log.exception("timer callback raised; the worker halts", timer=self.name)
                if not self._cancelled.is_set():
                    self._on_halt(self.name, exc)
                return
            self.runs += 1
            next_at = time.monotonic() + self.period


# --- ZooKeeper writes off the hot threads ------------------------------------------------

class ZkWriter:
    """Backpressure changes and error reports, written to ZooKeeper by one thread.

    The runtime calls in from its receive and executor threads, which must never wait on
    ZooKeeper: the latest backpressure set is kept (older ones are superseded) and errors
    queue up to ERROR_QUEUE_MAX; a failed write is logged, backpressure is retried later.
    """

    def __init__(self, state: ClusterState, topology_id: str, node: str, port: int, host: str,
                 conf: Mapping[str, Any]) -> None:
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
        now = time.time()
        with self._lock:
            throttle = self._throttles.get(component)
            if throttle is None:
                throttle = self._throttles[component] = ErrorThrottle(self._limit, self._interval)
            if not throttle.allow(time.monotonic()):
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


# --- the worker ------------------------------------------------------------------------

class Worker:
    """One worker process: ``run()`` starts it, waits for a stop and shuts it down.

    ``conf`` is the supervisor's configuration (SQUALL_CONF, plus ``overrides``); the
    topology's conf.json is merged in at start. Stops come from ``request_stop`` (signals,
    a halting timer, a dead executor, the assignment no longer naming this worker).
    """

    def __init__(self, conf: Mapping[str, Any], topology_id: str, supervisor_id: str, port: int,
                 worker_id: str, overrides: Mapping[str, Any] | None = None) -> None:
        self.base_conf = dict(conf)
        self.overrides = dict(overrides or {})
        self.conf: dict[str, Any] = dict(conf)
        self.topology_id, self.supervisor_id = topology_id, supervisor_id
        self.port, self.worker_id = port, worker_id
        self.slot = (supervisor_id, port)
        self.dir = worker_dir(conf, worker_id)
        self.bundle = topology_dir(conf, topology_id)
        self.pid = os.getpid()
        self.started_at = time.time()
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
        self._stats: dict[str, Any] = {}
        self._stats_at = float("-inf")
        self._last_missing: list[int] = []
        self._shut_down = False
        self.log = log.bind(topology=topology_id, node=supervisor_id, port=port, worker=worker_id)

    # -- stop requests ------------------------------------------------------------------
    def request_stop(self, code: int, reason: str) -> None:
        """Ask the main thread to shut down and exit with ``code``; the first request wins.

        Safe in a signal handler: it only sets state (``run`` logs the reason), since
        logging from a handler could deadlock on the log stream's lock."""
        with self._stop_lock:
            if self.exit_code is not None:
                return
            self.exit_code, self.stop_reason = code, reason
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until a stop is requested (True) or ``timeout`` passes (False)."""
        return self._stop.wait(timeout)

    def _on_halt(self, timer: str, exc: BaseException) -> None:
        self.request_stop(EXIT_FAILURE, f"timer {timer} failed: {exc!r}")
        state = self.state
        if state is not None and not state.connected:
            # Calls queued on a lost connection wait forever (the main thread may be one of
            # them, still starting up): closing the session makes them fail now.
            state.close()

    def _on_fatal(self, reason: str) -> None:
        self.request_stop(EXIT_FAILURE, reason)

    def _checkpoint(self) -> None:
        """Between start-up steps: a stop requested meanwhile (SIGTERM) ends the start."""
        if self.stopping:
            raise _Interrupted()

    # -- start-up (seed 000's mk-worker) -------------------------------------------------
    def start(self) -> None:
        """Bring the worker up; WorkerError (or ClusterStateError) when it cannot run."""
        self.log.info("launching worker", pid=self.pid, local_dir=str(local_dir(self.base_conf)))
        self._write_pid()
        self._read_conf()
        self._check_transport()
        self._checkpoint()
        self.state = ClusterState(self.conf).start()
        guard = ConnectionGuard(self.state.session_timeout, time.monotonic())
        self._timer("zookeeper-guard", min(1.0, self.state.session_timeout / 4),
                    lambda: guard.check(self.state.connected, time.monotonic()))  # type: ignore[union-attr]
        assignment = self.state.assignment(self.topology_id)
        if assignment is None:
            if self._assignment_listed():
                raise WorkerError(f"the assignment of {self.topology_id} is unreadable (see the "
                                  "malformed-data warning above)")
            raise _NotAssigned(f"there is no assignment for {self.topology_id}")
        self.executors = assignment.executors_on(self.supervisor_id, self.port)
        if not self.executors:
            raise _NotAssigned(f"the assignment of {self.topology_id} names no executors on "
                               f"{self.supervisor_id}:{self.port}")
        self.host = assignment.node_host.get(self.supervisor_id, self.host)
        topology = load_bundle_topology(self.bundle)
        self._checkpoint()
        self._make_runtime(topology)
        self.rt.bind()
        self.log.info("receive socket bound", bind_host=self.conf["zmq.bind.host"], port=self.port,
                      executors=[list(e) for e in self.executors])
        # Heartbeat once now (a failure here fails the start), then on timers, before the
        # executors load: slow-loading tasks must not make the worker look dead.
        self.local_heartbeat()
        self.zk_heartbeat()
        every = float(self.conf["worker.heartbeat.frequency.secs"])
        self._timer("heartbeat", every, self.local_heartbeat)
        self._timer("executor-heartbeat", every, self.zk_heartbeat)
        poll = float(self.conf["task.refresh.poll.secs"])
        self.refresh_connections()
        refresh = self._timer("refresh-connections", poll, self.refresh_connections)
        self.watches.append(self.state.watch_assignment(self.topology_id, lambda _a: refresh.trigger()))
        self.refresh_active()
        active = self._timer("refresh-active", poll, self.refresh_active)
        self.watches.append(self.state.watch_topology(self.topology_id, lambda _i: active.trigger()))
        self.watches.append(self.state.watch_backpressure(self.topology_id, self._on_remote_backpressure))
        self._checkpoint()
        self.rt.start_executors()
        self.rt.start_transfer()
        self.log.info("worker has finished loading", executors=len(self.executors),
                      active=self.rt.active, secs=round(time.time() - self.started_at, 2))

    def _write_pid(self) -> None:
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            write_atomic(self.dir / "pid", str(self.pid))
        except OSError as exc:
            raise WorkerError(f"cannot write the pid file in {self.dir}: {exc}") from None

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

    def _assignment_listed(self) -> bool:
        assert self.state is not None
        return self.topology_id in self.state.assignment_ids()

    def _make_runtime(self, topology: Topology) -> None:
        from squall.runtime.worker_runtime import WorkerRuntime

        self.context = make_context(self.conf)
        assert self.state is not None
        self.writer = ZkWriter(self.state, self.topology_id, self.supervisor_id, self.port, self.host,
                               self.conf)
        self.writer.start()
        self.rt = WorkerRuntime(self.topology_id, topology, self.conf, self.executors, self.port,
                                self.context, host=self.host, error_sink=self.writer.report_error,
                                on_fatal=self._on_fatal)
        problems = check_executors(self.executors, self.rt.task_to_component)
        if problems:
            raise WorkerError("the assignment does not fit the topology in the code bundle: "
                              + "; ".join(problems))
        self.rt.on_backpressure = self.writer.publish_backpressure

    def _timer(self, name: str, period: float, fn: Callable[[], None]) -> HaltingTimer:
        timer = HaltingTimer(name, period, fn, self._on_halt, lambda: self.stopping).start()
        self.timers[name] = timer
        return timer

    # -- timer callbacks ----------------------------------------------------------------
    def local_heartbeat(self) -> None:
        """The heartbeat file the supervisor watches."""
        record = heartbeat_record(time.time(), self.topology_id, self.port, self.worker_id, self.pid,
                                  self.executors)
        write_atomic(self.dir / "heartbeat.json", json.dumps(record))

    def zk_heartbeat(self) -> None:
        """The worker beat nimbus watches; executor stats at most every task.heartbeat secs."""
        assert self.state is not None
        now = time.time()
        if self.rt is not None and self.rt.executors and \
                now - self._stats_at >= float(self.conf["task.heartbeat.frequency.secs"]):
            self._stats = {"executors": self._executor_stats()}
            self._stats_at = now
        self.state.worker_beat(WorkerBeat(self.topology_id, self.supervisor_id, self.port, now,
                                          list(self.executors), now - self.started_at, self._stats))

    def _executor_stats(self) -> list[dict[str, Any]]:
        # Stats are read while the executors run; a rare concurrent-mutation error must not
        # halt the worker: keep the last good stats instead.
        try:
            return self.rt.stats()
        except Exception as exc:  # noqa: BLE001
            self.log.warning("reading executor stats failed", error=repr(exc))
            return self._stats.get("executors", [])

    def refresh_connections(self) -> None:
        """Seed 000's mk-refresh-connections, plus the "still assigned?" check."""
        if self.stopping:
            return
        assert self.state is not None
        assignment = self.state.assignment(self.topology_id)
        listed = True if assignment is not None else self._assignment_listed()
        verdict = assignment_verdict(assignment, listed, self.supervisor_id, self.port, self.executors)
        if verdict == UNREADABLE:
            self.log.warning("assignment unreadable; keeping current connections")
            return
        if verdict in (GONE, CHANGED):
            now = [] if assignment is None else [list(e) for e in assignment.executors_on(*self.slot)]
            self.request_stop(EXIT_OK, f"assignment no longer names this worker's executors ({verdict}); "
                              f"assigned here now: {now}")
            return
        assert assignment is not None
        endpoints = task_endpoints(assignment)
        hostless = nodes_without_host(assignment)
        if hostless:
            self.log.warning("assignment has nodes without a host", nodes=hostless)
        self.rt.refresh_connections(endpoints)
        missing = missing_tasks(self.rt.outbound_tasks(), self.rt.local_tasks, endpoints)
        if missing and missing != self._last_missing:
            self.log.warning("missing assignment for tasks", tasks=missing)
        self._last_missing = missing

    def refresh_active(self) -> None:
        """Seed 000's refresh-storm-active: spouts run only while the topology is active."""
        if self.stopping:
            return
        assert self.state is not None
        active = is_active(self.state.topology(self.topology_id))
        if active != self.rt.active:
            self.log.info("topology status changed", active=active)
        self.rt.set_active(active)

    def _on_remote_backpressure(self, by_slot: Mapping[tuple[str, int], frozenset[int]]) -> None:
        if self.rt is not None:
            self.rt.remote_bp = remote_backpressure(by_slot, self.slot)

    # -- shutdown (seed 000's shutdown*) --------------------------------------------------
    def shutdown(self) -> None:
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
        if self.writer is not None:
            self.writer.stop(THREAD_JOIN_SECS)
        try:
            (self.dir / "heartbeat.json").unlink(missing_ok=True)
        except OSError as exc:
            self.log.warning("removing the heartbeat file failed", error=str(exc))
        if self.state is not None:
            if self.state.connected and self.executors:
                try:
                    self.state.remove_worker_beat(self.topology_id, self.supervisor_id, self.port)
                except ClusterStateError as exc:
                    self.log.warning("removing the worker beat failed", error=str(exc))
            self.state.close()
        self.log.info("worker shut down")

    # -- the whole life -----------------------------------------------------------------
    def run(self) -> int:
        """Start, wait for a stop request, shut down; returns the exit code.

        Once a stop is requested, a watchdog ends the process if shutdown has not finished
        within SHUTDOWN_DEADLINE_SECS, even when the main thread is stuck in start-up."""
        done = threading.Event()
        threading.Thread(target=self._watchdog, args=(done,), name="shutdown-watchdog", daemon=True).start()
        try:
            self.start()
        except _Interrupted:
            pass
        except _NotAssigned as exc:
            self.request_stop(EXIT_OK, str(exc))
        except (WorkerError, ClusterStateError, OSError) as exc:
            self.request_stop(EXIT_FAILURE, f"worker failed to start: {exc}")
        except Exception as exc:  # noqa: BLE001 - an unexpected failure is still a clean exit 1
            self.log.exception("worker failed to start")
            self.request_stop(EXIT_FAILURE, f"worker failed to start: {exc!r}")
        while not self.wait(1.0):
            pass
        (self.log.info if self.exit_code == EXIT_OK else self.log.error)(
            "worker stopping", reason=self.stop_reason, exit_code=self.exit_code)
        try:
            self.shutdown()
        except Exception:  # noqa: BLE001
            self.log.exception("worker shutdown failed")
            return EXIT_FAILURE
        finally:
            done.set()
        return EXIT_FAILURE if self.exit_code is None else self.exit_code

    def _watchdog(self, done: threading.Event) -> None:
        self._stop.wait()
        if done.wait(SHUTDOWN_DEADLINE_SECS):
            return
        code = EXIT_FAILURE if self.exit_code is None else self.exit_code
        self.log.error("shutdown did not finish in time; exiting", deadline_secs=SHUTDOWN_DEADLINE_SECS,
                       exit_code=code, reason=self.stop_reason)
        _flush_and_exit(code)


class _NotAssigned(Exception):
    """At start, the assignment does not name this worker: nothing to run, exit 0."""


class _Interrupted(Exception):
    """A stop was requested while starting."""


def _flush_and_exit(code: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001
            pass
    os._exit(code)
