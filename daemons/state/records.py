"""The records kept in ZooKeeper, their field checks and their node encoding.

Plain data and plain functions: nothing here touches ZooKeeper, so every check can be
tested without a server. Every node holds JSON ``{"v": FORMAT_VERSION, ...}``; decoding
raises ValueError naming the problem and the facade turns that into a counted warning.

Tuple-keyed maps of an Assignment are stored as rows: ``executors`` as
``[[start, end, node, port], ...]`` and ``executor_start`` as ``[[start, end, time], ...]``.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

FORMAT_VERSION = 1
TOPOLOGY_STATUSES = ("active", "inactive", "killed", "rebalancing")
MAX_NODE_BYTES = 1_000_000  # ZooKeeper's default jute.maxbuffer is 1 MiB
MAX_ERROR_CHARS = 8000  # one error text; keeps kept-errors nodes far below the node limit

ExecutorId = tuple[int, int]
Slot = tuple[str, int]
T = TypeVar("T")


# --- field checks (raise ValueError naming the field) --------------------------------

def field_value(d: Mapping[str, Any], key: str) -> Any:
    if key not in d:
        raise ValueError(f"missing field {key!r}")
    return d[key]


def as_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what} must be an integer, got {value!r}")
    return value


def as_num(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{what} must be a number, got {value!r}")
    return float(value)


def as_str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string, got {value!r}")
    return value


def as_list(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError(f"{what} must be a list, got {type(value).__name__}")
    return value


def as_dict(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{what} must be an object, got {type(value).__name__}")
    return value


def _int(d: Mapping[str, Any], key: str) -> int:
    return as_int(field_value(d, key), key)


def _num(d: Mapping[str, Any], key: str) -> float:
    return as_num(field_value(d, key), key)


def _str(d: Mapping[str, Any], key: str) -> str:
    return as_str(field_value(d, key), key)


def _executor(start: Any, end: Any, what: str) -> ExecutorId:
    start, end = as_int(start, f"{what} start"), as_int(end, f"{what} end")
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
    owner: str = ""  # the API user who submitted it; "" for records written before owners

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "name": self.name, "status": self.status, "num_workers": self.num_workers,
            "component_parallelism": dict(self.component_parallelism),
            "code_digest": self.code_digest, "submitted_at": self.submitted_at, "conf": self.conf,
            "owner": self.owner,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TopologyInfo:
        status = _str(d, "status")
        if status not in TOPOLOGY_STATUSES:
            raise ValueError(f"status must be one of {TOPOLOGY_STATUSES}, got {status!r}")
        parallelism = {
            as_str(k, "component name"): as_int(v, f"parallelism of {k!r}")
            for k, v in as_dict(field_value(d, "component_parallelism"), "component_parallelism").items()
        }
        return cls(
            id=_str(d, "id"), name=_str(d, "name"), status=status,
            num_workers=_int(d, "num_workers"), component_parallelism=parallelism,
            code_digest=_str(d, "code_digest"), submitted_at=_num(d, "submitted_at"),
            conf=as_dict(field_value(d, "conf"), "conf"),
            owner=as_str(d.get("owner", ""), "owner"),
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
        for row in as_list(field_value(d, "executors"), "executors"):
            s, e, node, port = _row(row, 4, "executors")
            executors[_executor(s, e, "executor")] = (
                as_str(node, "executor node"), as_int(port, "executor port"))
        starts: dict[ExecutorId, float] = {}
        for row in as_list(field_value(d, "executor_start"), "executor_start"):
            s, e, t = _row(row, 3, "executor_start")
            starts[_executor(s, e, "executor_start")] = as_num(t, "executor start time")
        hosts = {as_str(k, "node id"): as_str(v, f"host of node {k!r}")
                 for k, v in as_dict(field_value(d, "node_host"), "node_host").items()}
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
    logviewer_port: int | None = None  # where its worker logs are served; None: not served

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "host": self.host, "ports": list(self.ports),
                "started_at": self.started_at, "used_ports": list(self.used_ports), "time": self.time,
                "logviewer_port": self.logviewer_port}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SupervisorInfo:
        return cls(
            id=_str(d, "id"), host=_str(d, "host"),
            ports=[as_int(p, "port") for p in as_list(field_value(d, "ports"), "ports")],
            started_at=_num(d, "started_at"),
            used_ports=[as_int(p, "used port") for p in as_list(field_value(d, "used_ports"), "used_ports")],
            time=as_num(d.get("time", 0.0), "time"),
            logviewer_port=None if d.get("logviewer_port") is None
            else as_int(d["logviewer_port"], "logviewer_port"),
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
                     for r in as_list(field_value(d, "executors"), "executors")]
        return cls(topology_id=_str(d, "topology_id"), node=_str(d, "node"), port=_int(d, "port"),
                   time=_num(d, "time"), executors=executors, uptime=_num(d, "uptime"),
                   stats=as_dict(field_value(d, "stats"), "stats"))


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
class Backpressure:
    """The tasks of one worker that are under backpressure."""

    node: str
    port: int
    tasks: frozenset[int]

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Backpressure:
        tasks = frozenset(as_int(t, "task") for t in as_list(field_value(d, "tasks"), "tasks"))
        return cls(node=_str(d, "node"), port=_int(d, "port"), tasks=tasks)


@dataclass(frozen=True)
class NimbusId:
    """The data of a nimbus contender's lock node."""

    id: str

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> NimbusId:
        return cls(id=_str(d, "id"))


@dataclass(frozen=True)
class TopologySecrets:
    """A topology's secrets, generated by nimbus at submit and readable by daemons only: its
    ZooKeeper digest password (user ``acls.topology_user(id)``) and its CurveZMQ key pair
    (Z85 text), which every worker of the topology uses as server and client key."""

    zk_password: str
    curve_public: str
    curve_secret: str

    def to_dict(self) -> dict[str, Any]:
        return {"zk_password": self.zk_password, "curve_public": self.curve_public,
                "curve_secret": self.curve_secret}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TopologySecrets:
        out = cls(zk_password=_str(d, "zk_password"), curve_public=_str(d, "curve_public"),
                  curve_secret=_str(d, "curve_secret"))
        for key in ("curve_public", "curve_secret"):
            if len(getattr(out, key)) != 40:
                raise ValueError(f"{key} must be 40 characters of Z85")
        if not out.zk_password:
            raise ValueError("zk_password is empty")
        return out

    def __repr__(self) -> str:  # never print secrets
        return f"TopologySecrets(curve_public={self.curve_public!r})"


def encode(path: str, payload: Mapping[str, Any]) -> bytes:
    """Versioned compact JSON for ``path``; ValueError when it exceeds a node's limit."""
    data = json.dumps({"v": FORMAT_VERSION, **payload}, separators=(",", ":")).encode("utf-8")
    if len(data) > MAX_NODE_BYTES:
        raise ValueError(f"data for {path} is {len(data)} bytes, above ZooKeeper's {MAX_NODE_BYTES}")
    return data


def check_name(value: Any, what: str) -> str:
    """``value`` if it can be one element of a ZooKeeper path, else ValueError."""
    if (not isinstance(value, str) or not value or "/" in value or value in (".", "..")
            or any(ord(c) < 32 for c in value)):
        raise ValueError(f"{what} {value!r} cannot be used as a ZooKeeper node name")
    return value


def slot_name(node: str, port: int) -> str:
    """The ``<node>-<port>`` node name of a worker slot."""
    return f"{check_name(node, 'node id')}-{as_int(port, 'port')}"


def backpressure_by_slot(entries: Mapping[str, Backpressure]) -> dict[Slot, frozenset[int]]:
    """Backpressure entries keyed by their (node, port)."""
    return {(e.node, e.port): e.tasks for e in entries.values()}


def parse_node(data: bytes | None, parse: Callable[[dict[str, Any]], T]) -> T:
    """Decode one node's data with ``parse``; ValueError/TypeError/KeyError when malformed."""
    if not data:
        raise ValueError("empty node")
    obj = json.loads(data)  # JSON and UTF-8 errors are ValueErrors
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    if obj.get("v") != FORMAT_VERSION:
        raise ValueError(f"unsupported format version {obj.get('v')!r} (expected {FORMAT_VERSION})")
    return parse(obj)
