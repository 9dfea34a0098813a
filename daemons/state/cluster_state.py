"""ClusterState: the one module through which daemons read and write ZooKeeper (kazoo).

Layout under ``zookeeper.root`` (default ``/squall``); every node holds JSON ``{"v": 1, ...}``:

    /topologies/<id>                         TopologyInfo: metadata and status (no code)
    /assignments/<id>                        Assignment
    /supervisors/<id>                        SupervisorInfo (ephemeral)
    /workerbeats/<topology>/<node>-<port>    WorkerBeat
    /errors/<topology>/<component>           {"errors": [ErrorInfo, ...]}, oldest first, bounded
    /nimbus/leader/<lock node>               kazoo Lock contenders, data {"id": identifier}
    /backpressure/<topology>/<node>-<port>   {"node", "port", "tasks": [task ids]} (ephemeral)

Tuple-keyed maps of an Assignment are stored as rows: ``executors`` as
``[[start, end, node, port], ...]`` and ``executor_start`` as ``[[start, end, time], ...]``.

Reading malformed data (not JSON, another format version, wrong shape) logs a warning naming
the path, counts it in ``malformed_reads`` and yields None / skips the entry; it never raises.
ZooKeeper unreachable past the retry deadline (the session timeout) raises ClusterStateError.

Watches are one-shot ZooKeeper watches re-armed after every event, re-synchronised after a
reconnect or a session expiry, and report only real changes. Their callbacks run on kazoo's
event thread or on this module's restore thread: keep them short. Ephemeral nodes written
here are re-created after a session expiry. Everything here is for timers and watches; never
call it per tuple.
"""
from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    CancelledError,
    ConnectionLoss,
    KazooException,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import EventType, KazooState, WatchedEvent
from kazoo.retry import ForceRetryError, KazooRetry, RetryFailedError

from squall.config import load_defaults

log = structlog.get_logger("squall.cluster_state")

FORMAT_VERSION = 1
TOPOLOGY_STATUSES = ("active", "inactive", "killed", "rebalancing")
MAX_NODE_BYTES = 1_000_000  # ZooKeeper's default jute.maxbuffer is 1 MiB
MAX_ERROR_CHARS = 8000  # one error text; keeps kept-errors nodes far below the node limit

ExecutorId = tuple[int, int]
Slot = tuple[str, int]
T = TypeVar("T")

# Failures that mean "ZooKeeper is not reachable right now"; they become ClusterStateError.
_UNAVAILABLE = (RetryFailedError, ConnectionLoss, SessionExpiredError, OperationTimeoutError,
                KazooTimeoutError)


class ClusterStateError(RuntimeError):
    """ZooKeeper could not be reached (or the state is closed); the message says for what."""


# --- field checks (raise ValueError naming the field) --------------------------------

def _field(d: Mapping[str, Any], key: str) -> Any:
    if key not in d:
        raise ValueError(f"missing field {key!r}")
    return d[key]


def _as_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what} must be an integer, got {value!r}")
    return value


def _as_num(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{what} must be a number, got {value!r}")
    return float(value)


def _as_str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string, got {value!r}")
    return value


def _as_list(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError(f"{what} must be a list, got {type(value).__name__}")
    return value


def _as_dict(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{what} must be an object, got {type(value).__name__}")
    return value


def _int(d: Mapping[str, Any], key: str) -> int:
    return _as_int(_field(d, key), key)


def _num(d: Mapping[str, Any], key: str) -> float:
    return _as_num(_field(d, key), key)


def _str(d: Mapping[str, Any], key: str) -> str:
    return _as_str(_field(d, key), key)


def _executor(start: Any, end: Any, what: str) -> ExecutorId:
    start, end = _as_int(start, f"{what} start"), _as_int(end, f"{what} end")
    if start > end:
        raise ValueError(f"{what} [{start}, {end}] has start after end")
    return (start, end)


def _row(value: Any, width: int, what: str) -> list[Any]:
    if not isinstance(value, list) or len(value) != width:
        raise ValueError(f"{what} entry must be a list of {width}, got {value!r}")
    return value


# --- records -------------------------------------------------------------------------

@dataclass
class TopologyInfo:
    """A submitted topology: metadata and status. Code and serialized topology live elsewhere."""

    id: str
    name: str
    status: str  # one of TOPOLOGY_STATUSES
    num_workers: int
    component_parallelism: dict[str, int]
    code_digest: str
    submitted_at: float
    conf: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "name": self.name, "status": self.status, "num_workers": self.num_workers,
            "component_parallelism": dict(self.component_parallelism),
            "code_digest": self.code_digest, "submitted_at": self.submitted_at, "conf": self.conf,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TopologyInfo:
        status = _str(d, "status")
        if status not in TOPOLOGY_STATUSES:
            raise ValueError(f"status must be one of {TOPOLOGY_STATUSES}, got {status!r}")
        parallelism = {
            _as_str(k, "component name"): _as_int(v, f"parallelism of {k!r}")
            for k, v in _as_dict(_field(d, "component_parallelism"), "component_parallelism").items()
        }
        return cls(
            id=_str(d, "id"), name=_str(d, "name"), status=status,
            num_workers=_int(d, "num_workers"), component_parallelism=parallelism,
            code_digest=_str(d, "code_digest"), submitted_at=_num(d, "submitted_at"),
            conf=_as_dict(_field(d, "conf"), "conf"),
        )


@dataclass
class Assignment:
    """Where a topology's executors run: executor -> (node, port), node -> host, start times."""

    topology_id: str
    executors: dict[ExecutorId, Slot]
    node_host: dict[str, str] = field(default_factory=dict)
    executor_start: dict[ExecutorId, float] = field(default_factory=dict)
    code_digest: str = ""
    version: int = 0

    def slots(self) -> set[Slot]:
        """Every (node, port) that runs an executor of this topology."""
        return set(self.executors.values())

    def executors_on(self, node: str, port: int) -> list[ExecutorId]:
        """The executors assigned to one slot, sorted."""
        return sorted(ex for ex, slot in self.executors.items() if slot == (node, port))

    def to_dict(self) -> dict[str, Any]:
        return {
            "topology_id": self.topology_id,
            "executors": [[s, e, node, port] for (s, e), (node, port) in sorted(self.executors.items())],
            "node_host": dict(self.node_host),
            "executor_start": [[s, e, t] for (s, e), t in sorted(self.executor_start.items())],
            "code_digest": self.code_digest,
            "version": self.version,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Assignment:
        executors: dict[ExecutorId, Slot] = {}
        for row in _as_list(_field(d, "executors"), "executors"):
            s, e, node, port = _row(row, 4, "executors")
            executors[_executor(s, e, "executor")] = (
                _as_str(node, "executor node"), _as_int(port, "executor port"))
        starts: dict[ExecutorId, float] = {}
        for row in _as_list(_field(d, "executor_start"), "executor_start"):
            s, e, t = _row(row, 3, "executor_start")
            starts[_executor(s, e, "executor_start")] = _as_num(t, "executor start time")
        hosts = {_as_str(k, "node id"): _as_str(v, f"host of node {k!r}")
                 for k, v in _as_dict(_field(d, "node_host"), "node_host").items()}
        return cls(topology_id=_str(d, "topology_id"), executors=executors, node_host=hosts,
                   executor_start=starts, code_digest=_str(d, "code_digest"),
                   version=_int(d, "version"))


@dataclass
class SupervisorInfo:
    """A live supervisor and its slots; ``time`` is when the node was last refreshed."""

    id: str
    host: str
    ports: list[int]
    started_at: float
    used_ports: list[int] = field(default_factory=list)
    time: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "host": self.host, "ports": list(self.ports),
                "started_at": self.started_at, "used_ports": list(self.used_ports), "time": self.time}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SupervisorInfo:
        return cls(
            id=_str(d, "id"), host=_str(d, "host"),
            ports=[_as_int(p, "port") for p in _as_list(_field(d, "ports"), "ports")],
            started_at=_num(d, "started_at"),
            used_ports=[_as_int(p, "used port") for p in _as_list(_field(d, "used_ports"), "used_ports")],
            time=_as_num(d.get("time", 0.0), "time"),
        )


@dataclass
class WorkerBeat:
    """A worker's heartbeat for nimbus; ``stats`` is the worker's opaque JSON."""

    topology_id: str
    node: str
    port: int
    time: float
    executors: list[ExecutorId]
    uptime: float
    stats: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"topology_id": self.topology_id, "node": self.node, "port": self.port,
                "time": self.time, "executors": [[s, e] for s, e in self.executors],
                "uptime": self.uptime, "stats": self.stats}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> WorkerBeat:
        executors = [_executor(*_row(r, 2, "executors"), "executor")
                     for r in _as_list(_field(d, "executors"), "executors")]
        return cls(topology_id=_str(d, "topology_id"), node=_str(d, "node"), port=_int(d, "port"),
                   time=_num(d, "time"), executors=executors, uptime=_num(d, "uptime"),
                   stats=_as_dict(_field(d, "stats"), "stats"))


@dataclass
class ErrorInfo:
    """One error reported by a task."""

    time: float
    component: str
    task: int
    host: str
    port: int
    error: str

    def to_dict(self) -> dict[str, Any]:
        return {"time": self.time, "component": self.component, "task": self.task,
                "host": self.host, "port": self.port, "error": self.error}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ErrorInfo:
        return cls(time=_num(d, "time"), component=_str(d, "component"), task=_int(d, "task"),
                   host=_str(d, "host"), port=_int(d, "port"), error=_str(d, "error"))


@dataclass(frozen=True)
class _Backpressure:
    node: str
    port: int
    tasks: frozenset[int]

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> _Backpressure:
        tasks = frozenset(_as_int(t, "task") for t in _as_list(_field(d, "tasks"), "tasks"))
        return cls(node=_str(d, "node"), port=_int(d, "port"), tasks=tasks)


@dataclass(frozen=True)
class _Identifier:
    id: str

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> _Identifier:
        return cls(id=_str(d, "id"))


def _encode(path: str, payload: Mapping[str, Any]) -> bytes:
    data = json.dumps({"v": FORMAT_VERSION, **payload}, separators=(",", ":")).encode("utf-8")
    if len(data) > MAX_NODE_BYTES:
        raise ValueError(f"data for {path} is {len(data)} bytes, above ZooKeeper's {MAX_NODE_BYTES}")
    return data


def _check_name(value: Any, what: str) -> str:
    if (not isinstance(value, str) or not value or "/" in value or value in (".", "..")
            or any(ord(c) < 32 for c in value)):
        raise ValueError(f"{what} {value!r} cannot be used as a ZooKeeper node name")
    return value


def _slot_name(node: str, port: int) -> str:
    return f"{_check_name(node, 'node id')}-{_as_int(port, 'port')}"


# --- watches -------------------------------------------------------------------------

class Watch:
    """Handle returned by the ``watch_*`` methods; ``cancel()`` stops further callbacks."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._cancelled = False

    def cancel(self) -> None:
        self._cancelled = True

    @property
    def cancelled(self) -> bool:
        return self._cancelled


_UNSET: Any = object()


class _Watcher:
    """Common part of the watchers: emission only on change, in order, errors logged."""

    def __init__(self, state: ClusterState, handle: Watch, callback: Callable[[Any], None]) -> None:
        self._state = state
        self._handle = handle
        self._callback = callback
        self._mutex = threading.RLock()  # serializes reads of ZooKeeper and the cached values
        self._emit_lock = threading.Lock()  # callbacks in order, never two at once
        self._last: Any = _UNSET

    @property
    def active(self) -> bool:
        return not self._handle.cancelled and not self._state.closed

    def _deliver(self, value: Any) -> None:
        # Caller holds _emit_lock.
        if value == self._last or not self.active:
            return
        self._last = value
        try:
            self._callback(value)
        except Exception:  # noqa: BLE001 - a broken callback must not kill the watch
            log.exception("watch callback raised", watch=self._handle.what)

    def _on_event(self, event: WatchedEvent) -> None:
        # NONE events announce connection state; the restore thread resyncs on reconnect.
        if event.type == EventType.NONE or not self.active:
            return
        try:
            self.refresh()
        except (KazooException, KazooTimeoutError) as exc:
            log.info("watch refresh failed, resync requested", watch=self._handle.what, error=repr(exc))
            self._state._request_resync()

    def refresh(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def resync(self) -> None:
        self.refresh()


class _NodeWatcher(_Watcher):
    """One node's decoded value (None when absent or malformed)."""

    def __init__(self, state: ClusterState, handle: Watch, path: str,
                 decode: Callable[[str, bytes], Any], callback: Callable[[Any], None]) -> None:
        super().__init__(state, handle, callback)
        self._path = path
        self._decode = decode

    def refresh(self) -> None:
        client = self._state.client
        with self._emit_lock:
            with self._mutex:
                while True:
                    try:
                        data, _ = client.get(self._path, watch=self._on_event)
                        value = self._decode(self._path, data)
                        break
                    except NoNodeError:
                        # exists() leaves a watch that fires on creation; if the node came
                        # back in between, read it again.
                        if client.exists(self._path, watch=self._on_event) is None:
                            value = None
                            break
            self._deliver(value)


class _ChildrenWatcher(_Watcher):
    """A parent's children with their decoded data, delivered once every child is loaded."""

    def __init__(self, state: ClusterState, handle: Watch, parent: str,
                 decode: Callable[[str, bytes], Any], transform: Callable[[dict[str, Any]], Any],
                 callback: Callable[[Any], None]) -> None:
        super().__init__(state, handle, callback)
        self._parent = parent
        self._decode = decode
        self._transform = transform
        self._children: set[str] = set()
        self._values: dict[str, Any] = {}  # child -> decoded value, None when malformed
        self._child_watchers: dict[str, Callable[[WatchedEvent], None]] = {}

    def _watcher_for(self, child: str) -> Callable[[WatchedEvent], None]:
        # One stable function per child: kazoo keeps watchers in a set, so re-arming the
        # same path with the same function never doubles the callbacks.
        fn = self._child_watchers.get(child)
        if fn is None:
            def fn(event: WatchedEvent, child: str = child) -> None:
                if event.type == EventType.NONE or not self.active:
                    return
                try:
                    self._refresh_child(child)
                except (KazooException, KazooTimeoutError) as exc:
                    log.info("watch refresh failed, resync requested", watch=self._handle.what,
                             error=repr(exc))
                    self._state._request_resync()
            self._child_watchers[child] = fn
        return fn

    def _load(self, children: Iterable[str]) -> None:
        # Caller holds _mutex. Reads in parallel; a child deleted meanwhile is simply absent.
        client = self._state.client
        pending = [(c, client.get_async(f"{self._parent}/{c}", watch=self._watcher_for(c)))
                   for c in children]
        for child, result in pending:
            path = f"{self._parent}/{child}"
            try:
                data, _ = result.get(timeout=self._state.session_timeout)
            except NoNodeError:
                self._values.pop(child, None)
                continue
            self._values[child] = self._decode(path, data)

    def _list(self) -> set[str]:
        client = self._state.client
        try:
            return set(client.get_children(self._parent, watch=self._on_event))
        except NoNodeError:
            if client.exists(self._parent, watch=self._on_event) is not None:
                return self._list()
            return set()

    def refresh(self) -> None:
        with self._emit_lock:
            with self._mutex:
                current = self._list()
                self._load(current - self._values.keys())
                self._forget(self._values.keys() - current)
                self._children = current
            self._emit()

    def resync(self) -> None:
        with self._emit_lock:
            with self._mutex:
                current = self._list()
                self._values.clear()
                self._load(current)
                self._forget(set(self._child_watchers) - current)
                self._children = current
            self._emit()

    def _refresh_child(self, child: str) -> None:
        with self._emit_lock:
            with self._mutex:
                if child not in self._children:
                    return  # gone from the listing: the children watch has dealt with it
                self._load([child])
            self._emit()

    def _forget(self, children: Iterable[str]) -> None:
        for child in list(children):
            self._values.pop(child, None)
            self._child_watchers.pop(child, None)

    def _emit(self) -> None:
        # Caller holds _emit_lock. A listed child whose data is not read yet (deleted while
        # listed, its removal event still to come) holds back delivery: no partial views.
        with self._mutex:
            if self._children - self._values.keys():
                return
            loaded = {c: self._values[c] for c in sorted(self._children) if self._values[c] is not None}
        self._deliver(self._transform(loaded))


# --- nimbus election -----------------------------------------------------------------

class NimbusElection:
    """One contender for nimbus leadership, run on its own thread (see ``elect_nimbus``)."""

    def __init__(self, state: ClusterState, identifier: str,
                 on_leadership: Callable[[threading.Event], None]) -> None:
        self._state = state
        self.identifier = identifier
        self._on_leadership = on_leadership
        self._cancelled = threading.Event()
        self._lost = threading.Event()
        self._lost.set()
        self._leading = False
        self._suspended = False
        self._lock: Any = None
        self._thread = threading.Thread(target=self._run, name=f"nimbus-election-{identifier}",
                                        daemon=True)

    @property
    def is_leader(self) -> bool:
        """True while this contender holds leadership and is connected."""
        return self._leading and not self._suspended and not self._lost.is_set()

    def cancel(self, timeout: float = 10.0) -> None:
        """Step down (or stop contending) and wait for the election thread to end."""
        self._cancelled.set()
        self._lost.set()
        lock = self._lock
        if lock is not None:
            lock.cancel()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        if self in self._state._elections:
            self._state._elections.remove(self)

    # Connection state, from ClusterState's listener: set flags only, never block.
    def _session_lost(self) -> None:
        self._lost.set()

    def _set_suspended(self, suspended: bool) -> None:
        self._suspended = suspended

    def _run(self) -> None:
        state = self._state
        path = state._path("nimbus", "leader")
        payload = json.dumps({"v": FORMAT_VERSION, "id": self.identifier})
        pause = float(state.conf["nimbus.leader.poll.secs"])
        while not self._cancelled.is_set():
            if not state.client.connected:
                self._cancelled.wait(0.1)
                continue
            lock = state.client.Lock(path, payload)
            self._lock = lock
            if self._cancelled.is_set():
                break
            try:
                if not lock.acquire():
                    continue
            except CancelledError:
                break
            except (KazooException, KazooTimeoutError) as exc:
                log.warning("nimbus election failed, retrying", nimbus=self.identifier, error=repr(exc))
                self._cancelled.wait(pause)
                continue
            generation = state._session_generation
            lost = threading.Event()
            self._lost = lost  # from here on, a session loss or cancel() sets it
            if (self._cancelled.is_set() or state._session_generation != generation
                    or not self._owns(lock)):
                self._release(lock)  # cancelled, or won in a session that is already gone
                continue
            self._lead(lock, lost, pause)

    def _lead(self, lock: Any, lost: threading.Event, pause: float) -> None:
        self._leading = True
        log.info("nimbus leadership gained", nimbus=self.identifier)
        failed = False
        try:
            self._on_leadership(lost)
        except Exception:  # noqa: BLE001 - a failing leader steps down and contends again
            log.exception("on_leadership raised; stepping down", nimbus=self.identifier)
            failed = True
            lost.set()
        lost.wait()
        self._leading = False
        log.info("nimbus leadership ended", nimbus=self.identifier)
        self._release(lock)
        if failed:
            self._cancelled.wait(pause)  # let another contender take over first

    def _owns(self, lock: Any) -> bool:
        client = self._state.client
        try:
            stat = client.exists(f"{lock.path}/{lock.node}")
            client_id = client.client_id
        except (KazooException, KazooTimeoutError):
            return False
        return stat is not None and client_id is not None and stat.ephemeralOwner == client_id[0]

    def _release(self, lock: Any) -> None:
        try:
            lock.release()
        except (KazooException, KazooTimeoutError) as exc:
            # Without a session the lock node is gone already; with one it goes with the session.
            log.info("releasing nimbus lock failed", nimbus=self.identifier, error=repr(exc))


# --- the state -----------------------------------------------------------------------

class ClusterState:
    """Typed access to squall's ZooKeeper state for nimbus, supervisors and workers."""

    def __init__(self, conf: Mapping[str, Any]) -> None:
        merged = load_defaults()
        merged.update(conf)
        self.conf = merged
        root = "/" + str(merged["zookeeper.root"]).strip("/")
        self.root = root.rstrip("/") or "/"
        port = int(merged["zookeeper.port"])
        self.hosts = ",".join(h if ":" in h else f"{h}:{port}" for h in merged["zookeeper.servers"])
        self.session_timeout = merged["zookeeper.session.timeout.ms"] / 1000.0
        self.connection_timeout = merged["zookeeper.connection.timeout.ms"] / 1000.0
        self.errors_kept = int(merged["topology.errors.kept"])
        self.malformed_reads = 0  # count of malformed node data skipped
        self._client: KazooClient | None = None
        self._closed = threading.Event()
        self._session_generation = 0  # bumped on every session loss
        self._ephemerals: dict[str, bytes] = {}  # path -> data we keep alive across sessions
        self._ephemeral_lock = threading.Lock()
        self._watchers: list[_Watcher] = []
        self._watchers_lock = threading.Lock()
        self._elections: list[NimbusElection] = []
        self._restore_wanted = threading.Event()
        self._restorer: threading.Thread | None = None

    # -- lifecycle --------------------------------------------------------------------
    def start(self) -> ClusterState:
        """Connect (within ``zookeeper.connection.timeout.ms``) and create the base paths."""
        if self._client is not None:
            return self
        client = KazooClient(
            hosts=self.hosts, timeout=self.session_timeout,
            # Reconnect forever, promptly; commands retry until the session would be gone.
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=2.0),
            command_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=1.0,
                                     deadline=self.session_timeout),
        )
        client.add_listener(self._on_state)
        try:
            client.start(timeout=self.connection_timeout)
        except KazooTimeoutError:
            client.close()
            raise ClusterStateError(
                f"cannot connect to ZooKeeper at {self.hosts} within {self.connection_timeout}s") from None
        self._client = client
        for part in ("topologies", "assignments", "supervisors", "workerbeats", "errors",
                     "nimbus", "backpressure"):
            self._retry(client.ensure_path, self._path(part))
        self._restorer = threading.Thread(target=self._restore_loop, name="zk-restore", daemon=True)
        self._restorer.start()
        log.info("connected to ZooKeeper", zk=self.hosts, root=self.root)
        return self

    def close(self) -> None:
        """Step down from elections and close the session (its ephemeral nodes go with it)."""
        if self._closed.is_set():
            return
        for election in list(self._elections):
            election.cancel()
        self._closed.set()
        self._restore_wanted.set()
        if self._restorer is not None:
            self._restorer.join(10)
        if self._client is not None:
            try:
                self._client.stop()
            finally:
                self._client.close()
        log.info("ZooKeeper session closed", zk=self.hosts, root=self.root)

    def __enter__(self) -> ClusterState:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def client(self) -> KazooClient:
        """The underlying kazoo client (for tools and tests)."""
        if self._client is None:
            raise ClusterStateError("ClusterState is not started")
        return self._client

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    @property
    def connected(self) -> bool:
        return self._client is not None and self._client.connected

    # -- topologies -------------------------------------------------------------------
    def set_topology(self, info: TopologyInfo) -> None:
        path = self._path("topologies", _check_name(info.id, "topology id"))
        self._write(path, info.to_dict())

    def topology(self, topology_id: str) -> TopologyInfo | None:
        return self._read(self._path("topologies", topology_id), TopologyInfo.from_dict)

    def topology_ids(self) -> list[str]:
        return self._children(self._path("topologies"))

    def topologies(self) -> dict[str, TopologyInfo]:
        return self._read_children(self._path("topologies"), TopologyInfo.from_dict)

    def set_topology_status(self, topology_id: str, status: str) -> bool:
        """Change a topology's status; False when the topology does not exist (or is malformed)."""
        if status not in TOPOLOGY_STATUSES:
            raise ValueError(f"status must be one of {TOPOLOGY_STATUSES}, got {status!r}")
        path = self._path("topologies", topology_id)

        def update() -> bool:
            try:
                data, stat = self._op("get", path)
            except NoNodeError:
                return False
            info = self._decode(path, data, TopologyInfo.from_dict)
            if info is None:
                return False
            info.status = status
            try:
                self._op("set", path, _encode(path, info.to_dict()), version=stat.version)
            except BadVersionError:
                raise ForceRetryError() from None
            return True

        return self._retry(update)

    def remove_topology(self, topology_id: str) -> None:
        self._delete(self._path("topologies", topology_id))

    def watch_topology(self, topology_id: str, callback: Callable[[TopologyInfo | None], None]) -> Watch:
        """Call ``callback(info)`` now and whenever the topology changes (None: gone or malformed)."""
        path = self._path("topologies", topology_id)
        return self._watch_node(path, TopologyInfo.from_dict, callback, f"topology {topology_id}")

    # -- assignments ------------------------------------------------------------------
    def set_assignment(self, assignment: Assignment) -> None:
        path = self._path("assignments", _check_name(assignment.topology_id, "topology id"))
        self._write(path, assignment.to_dict())

    def assignment(self, topology_id: str) -> Assignment | None:
        return self._read(self._path("assignments", topology_id), Assignment.from_dict)

    def assignment_ids(self) -> list[str]:
        return self._children(self._path("assignments"))

    def assignments(self) -> dict[str, Assignment]:
        return self._read_children(self._path("assignments"), Assignment.from_dict)

    def remove_assignment(self, topology_id: str) -> None:
        self._delete(self._path("assignments", topology_id))

    def watch_assignments(self, callback: Callable[[dict[str, Assignment]], None]) -> Watch:
        """Call ``callback({topology id: Assignment})`` now and on any change of the set or
        of any assignment's data. Malformed assignments are left out."""
        return self._watch_children(self._path("assignments"), Assignment.from_dict, dict,
                                    callback, "assignments")

    def watch_assignment(self, topology_id: str, callback: Callable[[Assignment | None], None]) -> Watch:
        """Call ``callback(assignment)`` now and whenever one topology's assignment changes."""
        path = self._path("assignments", topology_id)
        return self._watch_node(path, Assignment.from_dict, callback, f"assignment {topology_id}")

    # -- supervisors ------------------------------------------------------------------
    def register_supervisor(self, info: SupervisorInfo) -> None:
        """Create or refresh this supervisor's ephemeral node; it is re-created after a
        session expiry until ``unregister_supervisor`` or ``close``."""
        path = self._path("supervisors", _check_name(info.id, "supervisor id"))
        self._put_ephemeral(path, _encode(path, info.to_dict()))

    def unregister_supervisor(self, supervisor_id: str) -> None:
        self._remove_ephemeral(self._path("supervisors", supervisor_id))

    def supervisor(self, supervisor_id: str) -> SupervisorInfo | None:
        return self._read(self._path("supervisors", supervisor_id), SupervisorInfo.from_dict)

    def supervisors(self) -> dict[str, SupervisorInfo]:
        return self._read_children(self._path("supervisors"), SupervisorInfo.from_dict)

    def watch_supervisors(self, callback: Callable[[dict[str, SupervisorInfo]], None]) -> Watch:
        """Call ``callback({supervisor id: SupervisorInfo})`` now and on any change."""
        return self._watch_children(self._path("supervisors"), SupervisorInfo.from_dict, dict,
                                    callback, "supervisors")

    # -- worker beats -----------------------------------------------------------------
    def worker_beat(self, beat: WorkerBeat) -> None:
        topology = _check_name(beat.topology_id, "topology id")
        self._write(self._path("workerbeats", topology, _slot_name(beat.node, beat.port)), beat.to_dict())

    def worker_beats(self, topology_id: str) -> dict[Slot, WorkerBeat]:
        """The topology's beats keyed by (node, port); malformed ones are skipped."""
        beats = self._read_children(self._path("workerbeats", topology_id), WorkerBeat.from_dict)
        return {(b.node, b.port): b for b in beats.values()}

    def remove_worker_beat(self, topology_id: str, node: str, port: int) -> None:
        self._delete(self._path("workerbeats", topology_id, _slot_name(node, port)))

    # -- errors -----------------------------------------------------------------------
    def report_error(self, topology_id: str, error: ErrorInfo, kept: int | None = None) -> None:
        """Append an error to its component's list, keeping the last ``kept``
        (default ``topology.errors.kept``). Callers throttle; this writes every call."""
        kept = self.errors_kept if kept is None else max(1, int(kept))
        path = self._path("errors", _check_name(topology_id, "topology id"),
                          _check_name(error.component, "component id"))
        entry = error.to_dict()
        if len(error.error) > MAX_ERROR_CHARS:
            entry["error"] = error.error[:MAX_ERROR_CHARS] + "... [truncated]"

        def append() -> None:
            try:
                data, stat = self._op("get", path)
            except NoNodeError:
                try:
                    self._op("create", path, _encode(path, {"errors": [entry]}), makepath=True)
                    return
                except NodeExistsError:
                    raise ForceRetryError() from None
            entries = [e.to_dict() for e in self._decode_errors(path, data)]
            entries = (entries + [entry])[-kept:]
            try:
                self._op("set", path, _encode(path, {"errors": entries}), version=stat.version)
            except BadVersionError:
                raise ForceRetryError() from None

        self._retry(append)

    def errors(self, topology_id: str, component: str | None = None) -> list[ErrorInfo]:
        """Kept errors of one component, or of all components, oldest first."""
        parent = self._path("errors", topology_id)
        components = [component] if component is not None else self._children(parent)
        paths = [f"{parent}/{_check_name(c, 'component id')}" for c in components]
        out: list[ErrorInfo] = []
        for path, data in self._get_many(paths).items():
            if data is not None:
                out.extend(self._decode_errors(path, data))
        return sorted(out, key=lambda e: e.time)

    def _decode_errors(self, path: str, data: bytes) -> list[ErrorInfo]:
        raw = self._decode(path, data, lambda d: _as_list(_field(d, "errors"), "errors"))
        out = []
        for item in raw or []:
            try:
                out.append(ErrorInfo.from_dict(_as_dict(item, "error entry")))
            except (ValueError, TypeError) as exc:
                self._malformed(path, f"error entry skipped: {exc}")
        return out

    # -- nimbus -----------------------------------------------------------------------
    def elect_nimbus(self, identifier: str,
                     on_leadership: Callable[[threading.Event], None]) -> NimbusElection:
        """Contend for leadership on a background thread.

        When this contender wins, ``on_leadership(lost)`` runs on the election thread; it may
        return at once or keep running until ``lost`` is set. Leadership is held until the
        session is lost or the election is cancelled (``lost`` is set then); afterwards the
        contender queues again. While disconnected ``election.is_leader`` is False.
        """
        election = NimbusElection(self, identifier, on_leadership)
        self._elections.append(election)
        election._thread.start()
        return election

    def nimbus_contenders(self) -> list[str]:
        """Identifiers of all contenders, leader first (malformed ones left out)."""
        return [ident for ident in self._contender_entries() if ident is not None]

    def nimbus_leader(self) -> str | None:
        """Identifier of the current leader; None when there is none or its node is malformed."""
        entries = self._contender_entries()
        return entries[0] if entries else None

    def _contender_entries(self) -> list[str | None]:
        # kazoo Lock nodes are "<uuid>__lock__<10-digit sequence>"; the lowest sequence leads.
        parent = self._path("nimbus", "leader")
        nodes = sorted((c for c in self._children(parent) if "__lock__" in c),
                       key=lambda name: name.rsplit("__lock__", 1)[1])
        out: list[str | None] = []
        for path, data in self._get_many([f"{parent}/{n}" for n in nodes]).items():
            if data is None:
                continue  # left meanwhile
            ident = self._decode(path, data, _Identifier.from_dict)
            out.append(ident.id if ident is not None else None)
        return out

    # -- backpressure -----------------------------------------------------------------
    def set_backpressure(self, topology_id: str, node: str, port: int, tasks: Iterable[int]) -> None:
        """Publish the tasks of one worker under backpressure (ephemeral); empty clears it.
        Call on a change of the set, not per tuple."""
        path = self._path("backpressure", _check_name(topology_id, "topology id"), _slot_name(node, port))
        task_list = sorted({_as_int(t, "task") for t in tasks})
        if not task_list:
            self._remove_ephemeral(path)
            return
        self._put_ephemeral(path, _encode(path, {"node": node, "port": port, "tasks": task_list}))

    def backpressure(self, topology_id: str) -> dict[Slot, frozenset[int]]:
        """Tasks under backpressure by (node, port)."""
        return _bp_by_slot(self._read_children(self._path("backpressure", topology_id),
                                               _Backpressure.from_dict))

    def watch_backpressure(self, topology_id: str,
                           callback: Callable[[dict[Slot, frozenset[int]]], None]) -> Watch:
        """Call ``callback({(node, port): tasks})`` now and whenever it changes."""
        parent = self._path("backpressure", _check_name(topology_id, "topology id"))
        return self._watch_children(parent, _Backpressure.from_dict, _bp_by_slot, callback,
                                    f"backpressure {topology_id}")

    # -- teardown ---------------------------------------------------------------------
    def teardown_topology(self, topology_id: str) -> None:
        """Remove the assignment, worker beats, errors and backpressure; the topology node last."""
        _check_name(topology_id, "topology id")
        bp_prefix = self._path("backpressure", topology_id) + "/"
        with self._ephemeral_lock:
            for path in [p for p in self._ephemerals if p.startswith(bp_prefix)]:
                del self._ephemerals[path]
        self._delete(self._path("assignments", topology_id))
        for part in ("workerbeats", "errors", "backpressure"):
            self._delete(self._path(part, topology_id), recursive=True)
        self._delete(self._path("topologies", topology_id))

    # -- internals: paths, reads, writes ----------------------------------------------
    def _path(self, *parts: str) -> str:
        for part in parts:
            _check_name(part, "path element")
        base = "" if self.root == "/" else self.root
        return base + "/" + "/".join(parts)

    def _op(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """One ZooKeeper request, waiting at most the session timeout: kazoo's synchronous
        calls wait forever while it reconnects, which would hang a daemon whose ZooKeeper
        is gone instead of letting it fail."""
        return getattr(self.client, name + "_async")(*args, **kwargs).get(timeout=self.session_timeout)

    def _retry(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        if self._closed.is_set():
            raise ClusterStateError("ClusterState is closed")
        client = self.client
        try:
            return client.retry(fn, *args, **kwargs)
        except _UNAVAILABLE as exc:
            if self._closed.is_set():
                raise ClusterStateError("ClusterState is closed") from None
            name = getattr(fn, "__name__", repr(fn))
            raise ClusterStateError(f"ZooKeeper at {self.hosts} unavailable ({name}): {exc!r}") from exc

    def _malformed(self, path: str, reason: str) -> None:
        self.malformed_reads += 1
        log.warning("malformed ZooKeeper data skipped", path=path, reason=reason)

    def _decode(self, path: str, data: bytes | None, parse: Callable[[dict[str, Any]], T]) -> T | None:
        try:
            if not data:
                raise ValueError("empty node")
            obj = json.loads(data)
            if not isinstance(obj, dict):
                raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
            if obj.get("v") != FORMAT_VERSION:
                raise ValueError(f"unsupported format version {obj.get('v')!r} (expected {FORMAT_VERSION})")
            return parse(obj)
        except (ValueError, TypeError, KeyError) as exc:  # JSON and UTF-8 errors are ValueErrors
            self._malformed(path, str(exc))
            return None

    def _decoder(self, parse: Callable[[dict[str, Any]], T]) -> Callable[[str, bytes], T | None]:
        return lambda path, data: self._decode(path, data, parse)

    def _read(self, path: str, parse: Callable[[dict[str, Any]], T]) -> T | None:
        try:
            data, _ = self._retry(self._op, "get", path)
        except NoNodeError:
            return None
        return self._decode(path, data, parse)

    def _children(self, path: str) -> list[str]:
        try:
            return sorted(self._retry(self._op, "get_children", path))
        except NoNodeError:
            return []

    def _get_many(self, paths: list[str]) -> dict[str, bytes | None]:
        """Data of many nodes with requests in flight together; None for missing nodes."""
        def fetch() -> dict[str, bytes | None]:
            pending = [(p, self.client.get_async(p)) for p in paths]
            out: dict[str, bytes | None] = {}
            for path, result in pending:
                try:
                    out[path] = result.get(timeout=self.session_timeout)[0]
                except NoNodeError:
                    out[path] = None
            return out

        return self._retry(fetch) if paths else {}

    def _read_children(self, parent: str, parse: Callable[[dict[str, Any]], T]) -> dict[str, T]:
        names = self._children(parent)
        fetched = self._get_many([f"{parent}/{n}" for n in names])
        out: dict[str, T] = {}
        for name in names:
            data = fetched[f"{parent}/{name}"]
            if data is None:
                continue  # deleted between listing and reading
            value = self._decode(f"{parent}/{name}", data, parse)
            if value is not None:
                out[name] = value
        return out

    def _write(self, path: str, payload: Mapping[str, Any]) -> None:
        data = _encode(path, payload)

        def put() -> None:
            try:
                self._op("set", path, data)
            except NoNodeError:
                try:
                    self._op("create", path, data, makepath=True)
                except NodeExistsError:
                    raise ForceRetryError() from None

        self._retry(put)

    def _delete(self, path: str, recursive: bool = False) -> None:
        def remove() -> None:
            try:
                self.client.delete(path, recursive=recursive)
            except NoNodeError:
                pass
            except NotEmptyError:
                raise ForceRetryError() from None  # a child appeared meanwhile: delete again

        self._retry(remove)

    # -- internals: ephemeral nodes that outlive sessions -----------------------------
    def _put_ephemeral(self, path: str, data: bytes) -> None:
        with self._ephemeral_lock:
            self._ephemerals[path] = data
            self._retry(self._ensure_ephemeral, path, data)

    def _remove_ephemeral(self, path: str) -> None:
        with self._ephemeral_lock:
            self._ephemerals.pop(path, None)
            self._delete(path)

    def _ensure_ephemeral(self, path: str, data: bytes) -> None:
        client = self.client
        client_id = client.client_id
        if client_id is None:
            raise ConnectionLoss("not connected")
        stat = client.exists(path)
        if stat is not None and stat.ephemeralOwner != client_id[0]:
            # Left by an earlier session of ours (a restart or an expiry not yet processed).
            log.info("replacing ephemeral node of another session", path=path)
            try:
                client.delete(path, version=stat.version)
            except (NoNodeError, BadVersionError):
                pass
            raise ForceRetryError()
        if stat is None:
            try:
                client.create(path, data, ephemeral=True, makepath=True)
            except NodeExistsError:
                raise ForceRetryError() from None
        else:
            client.set(path, data)

    # -- internals: connection state and the restore thread ---------------------------
    def _on_state(self, state: str) -> None:
        # Runs on kazoo's connection thread: set flags and events only, never block.
        if state == KazooState.LOST:
            self._session_generation += 1
            for election in list(self._elections):
                election._session_lost()
        elif state == KazooState.SUSPENDED:
            for election in list(self._elections):
                election._set_suspended(True)
        else:
            for election in list(self._elections):
                election._set_suspended(False)
            self._restore_wanted.set()

    def _request_resync(self) -> None:
        self._restore_wanted.set()

    def _restore_loop(self) -> None:
        """Re-create our ephemeral nodes and resync watches after every (re)connection."""
        while True:
            self._restore_wanted.wait()
            if self._closed.is_set():
                return
            if not self.connected:
                self._closed.wait(0.1)  # the next CONNECTED sets the event again
                continue
            self._restore_wanted.clear()
            try:
                self._restore_once()
            except (KazooException, KazooTimeoutError, ClusterStateError) as exc:
                if self._closed.is_set():
                    return
                log.info("restore after reconnect failed, retrying", error=repr(exc))
                self._restore_wanted.set()
                self._closed.wait(0.5)

    def _restore_once(self) -> None:
        with self._ephemeral_lock:
            for path, data in list(self._ephemerals.items()):
                self._ensure_ephemeral_once(path, data)
        with self._watchers_lock:
            self._watchers = [w for w in self._watchers if w.active]
            watchers = list(self._watchers)
        for watcher in watchers:
            watcher.resync()

    def _ensure_ephemeral_once(self, path: str, data: bytes) -> None:
        for _ in range(5):
            try:
                self._ensure_ephemeral(path, data)
                return
            except ForceRetryError:
                continue

    # -- internals: watches -----------------------------------------------------------
    def _add_watcher(self, watcher: _Watcher) -> None:
        with self._watchers_lock:
            self._watchers.append(watcher)
        try:
            self._retry(watcher.refresh)
        except BaseException:
            with self._watchers_lock:
                self._watchers.remove(watcher)
            raise

    def _watch_node(self, path: str, parse: Callable[[dict[str, Any]], Any],
                    callback: Callable[[Any], None], what: str) -> Watch:
        handle = Watch(what)
        self._add_watcher(_NodeWatcher(self, handle, path, self._decoder(parse), callback))
        return handle

    def _watch_children(self, parent: str, parse: Callable[[dict[str, Any]], Any],
                        transform: Callable[[dict[str, Any]], Any], callback: Callable[[Any], None],
                        what: str) -> Watch:
        handle = Watch(what)
        self._retry(self.client.ensure_path, parent)
        self._add_watcher(_ChildrenWatcher(self, handle, parent, self._decoder(parse), transform,
                                           callback))
        return handle


def _bp_by_slot(entries: Mapping[str, _Backpressure]) -> dict[Slot, frozenset[int]]:
    return {(e.node, e.port): e.tasks for e in entries.values()}
