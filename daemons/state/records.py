"""The records kept in ZooKeeper and their node encoding (their fields are checked by
:mod:`squall.daemons.fields`).

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

from squall.daemons.fields import (
    ExecutorId,
    as_bool,
    as_dict,
    as_int,
    as_list,
    as_num,
    as_str,
    executor_id,
    executor_runs,
    expand_runs,
    field_value,
    int_field,
    num_field,
    row_of,
    str_field,
)
from squall.daemons.state.json_depth import check_json_depth
from squall.runtime.stats import WorkerStats

FORMAT_VERSION = 1
# The cluster's layout: 2 adds each supervisor's part of every assignment and moves worker
# beats off ZooKeeper (1: whole assignments only, beats in /workerbeats).
LAYOUT = 2
TOPOLOGY_STATUSES = ("active", "inactive", "killed", "rebalancing")
MAX_NODE_BYTES = 1_000_000  # ZooKeeper's default jute.maxbuffer is 1 MiB
MAX_ERROR_CHARS = 8000  # one error text; keeps kept-errors nodes far below the node limit
# The component of errors a supervisor reports about a whole worker (task -1): it ended the
# worker over its memory limit, or because it did not finish starting in time.
WORKER_COMPONENT = "__worker"
MAX_DEPTH = 64  # JSON nesting past this is refused (deeper input made json raise RecursionError)

Slot = tuple[str, int]
T = TypeVar("T")


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
        status = str_field(d, "status")
        if status not in TOPOLOGY_STATUSES:
            raise ValueError(f"status must be one of {TOPOLOGY_STATUSES}, got {status!r}")
        parallelism = {
            as_str(k, "component name"): as_int(v, f"parallelism of {k!r}")
            for k, v in as_dict(field_value(d, "component_parallelism"), "component_parallelism").items()
        }
        return cls(
            id=str_field(d, "id"), name=str_field(d, "name"), status=status,
            num_workers=int_field(d, "num_workers"), component_parallelism=parallelism,
            code_digest=str_field(d, "code_digest"), submitted_at=num_field(d, "submitted_at"),
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
            s, e, node, port = row_of(row, 4, "executors")
            executors[executor_id(s, e, "executor")] = (
                as_str(node, "executor node"), as_int(port, "executor port"))
        starts: dict[ExecutorId, float] = {}
        for row in as_list(field_value(d, "executor_start"), "executor_start"):
            s, e, t = row_of(row, 3, "executor_start")
            starts[executor_id(s, e, "executor_start")] = as_num(t, "executor start time")
        hosts = {as_str(k, "node id"): as_str(v, f"host of node {k!r}")
                 for k, v in as_dict(field_value(d, "node_host"), "node_host").items()}
        return cls(topology_id=str_field(d, "topology_id"), executors=executors, node_host=hosts,
                   executor_start=starts, code_digest=str_field(d, "code_digest"),
                   version=int_field(d, "version"))


@dataclass
class NodeAssignment:
    """One supervisor's part of one topology's assignment (Storm 2 keeps assignments per
    node): what each of its ports runs, and the code that runs there. A supervisor reads
    and watches only its own parts; workers still read their topology's whole
    ``Assignment`` (they send to every slot). Stored as executor runs per port, so a part
    stays small whatever the topology's size."""

    topology_id: str
    code_digest: str
    ports: dict[int, list[ExecutorId]]

    def to_dict(self) -> dict[str, Any]:
        return {"topology_id": self.topology_id, "code_digest": self.code_digest,
                "ports": [[port, executor_runs(execs)] for port, execs in sorted(self.ports.items())]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> NodeAssignment:
        ports: dict[int, list[ExecutorId]] = {}
        for row in as_list(field_value(d, "ports"), "ports"):
            port, runs = row_of(row, 2, "ports")
            port = as_int(port, "port")
            if port in ports:
                raise ValueError(f"port {port} appears twice")
            ports[port] = expand_runs(as_list(runs, f"executors of port {port}"))
            if not ports[port]:
                raise ValueError(f"port {port} has no executors")
        return cls(str_field(d, "topology_id"), str_field(d, "code_digest"), ports)


def node_parts(assignment: Assignment) -> dict[str, NodeAssignment]:
    """The per-supervisor parts of ``assignment``, by node id."""
    by_node: dict[str, dict[int, list[ExecutorId]]] = {}
    for ex, (node, port) in sorted(assignment.executors.items()):
        by_node.setdefault(node, {}).setdefault(port, []).append(ex)
    return {node: NodeAssignment(assignment.topology_id, assignment.code_digest, ports)
            for node, ports in by_node.items()}


@dataclass
class SupervisorInfo:
    """A live supervisor and its slots; ``time`` is when the node was last refreshed.
    ``away``: it stopped cleanly and means to come back (a persistent node nimbus honours
    for ``supervisor.restart.grace.secs``). ``unusable``: its ports another process holds
    (port -> why); nimbus assigns nothing there until they are free."""

    id: str
    host: str
    ports: list[int]
    started_at: float
    used_ports: list[int] = field(default_factory=list)
    time: float = 0.0
    logviewer_port: int | None = None  # where its worker logs are served; None: not served
    away: bool = False
    unusable: dict[int, str] = field(default_factory=dict)
    # sha256 (hex) of the key this run of the supervisor signs its reports to nimbus with;
    # "" for a supervisor of an earlier squall
    report_key: str = ""

    @property
    def usable_ports(self) -> list[int]:
        """The ports nimbus may assign: all but the unusable ones."""
        return [p for p in self.ports if p not in self.unusable]

    def to_dict(self) -> dict[str, Any]:
        out = {"id": self.id, "host": self.host, "ports": list(self.ports),
               "started_at": self.started_at, "used_ports": list(self.used_ports), "time": self.time,
               "logviewer_port": self.logviewer_port}
        if self.away:
            out["away"] = True
        if self.unusable:
            out["unusable"] = {str(p): why for p, why in sorted(self.unusable.items())}
        if self.report_key:
            out["report_key"] = self.report_key
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SupervisorInfo:
        return cls(
            id=str_field(d, "id"), host=str_field(d, "host"),
            ports=[as_int(p, "port") for p in as_list(field_value(d, "ports"), "ports")],
            started_at=num_field(d, "started_at"),
            used_ports=[as_int(p, "used port") for p in as_list(field_value(d, "used_ports"), "used_ports")],
            time=as_num(d.get("time", 0.0), "time"),
            logviewer_port=None if d.get("logviewer_port") is None
            else as_int(d["logviewer_port"], "logviewer_port"),
            away=as_bool(d.get("away", False), "away"),
            unusable=_unusable(d.get("unusable", {})),
            report_key=_report_key(d.get("report_key", "")),
        )


MAX_UNUSABLE_REASON = 500


def _unusable(value: Any) -> dict[int, str]:
    """A supervisor node's unusable ports (port -> why), checked: ports as in ``ports``,
    reasons cut to MAX_UNUSABLE_REASON characters."""
    if not isinstance(value, dict):
        raise ValueError(f"field 'unusable' is {type(value).__name__}, not an object")
    out = {}
    for port, why in value.items():
        if not isinstance(port, str) or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"field 'unusable' names {port!r:.40}, not a port")
        out[int(port)] = as_str(why, "unusable reason")[:MAX_UNUSABLE_REASON]
    return out


def _report_key(value: Any) -> str:
    key = as_str(value, "report_key")
    if key and (len(key) != 64 or any(c not in "0123456789abcdef" for c in key)):
        raise ValueError("report_key must be 64 lower-case hex digits (a sha256)")
    return key


@dataclass
class Beat:
    """What every form of a worker's beat says: which worker (topology, node, port), when it
    beat (``time``, by the worker's clock), the executors it runs and its uptime. The forms
    (WorkerBeat, and squall.daemons.reports.ReportedBeat) add what they carry of its stats."""

    topology_id: str
    node: str
    port: int
    time: float
    executors: list[ExecutorId]
    uptime: float

    def beat_dict(self) -> dict[str, Any]:
        """These fields in their wire form (executors as runs)."""
        return {"topology_id": self.topology_id, "node": self.node, "port": self.port,
                "time": self.time, "executor_runs": executor_runs(self.executors), "uptime": self.uptime}

    def beat_fields(self) -> dict[str, Any]:
        """These fields by name (a copy of the executors), to make another form of this beat."""
        return {"topology_id": self.topology_id, "node": self.node, "port": self.port, "time": self.time,
                "executors": list(self.executors), "uptime": self.uptime}

    @staticmethod
    def checked_fields(d: Mapping[str, Any], executors: list[ExecutorId]) -> dict[str, Any]:
        """These fields of the wire form ``d``, each checked (ValueError naming the field);
        ``executors`` are the caller's, already checked."""
        return {"topology_id": str_field(d, "topology_id"), "node": str_field(d, "node"), "port": int_field(d, "port"),
                "time": num_field(d, "time"), "executors": executors, "uptime": num_field(d, "uptime")}


@dataclass
class WorkerBeat(Beat):
    """A worker's heartbeat for nimbus, with its stats."""

    stats: WorkerStats = field(default_factory=WorkerStats)

    def to_dict(self) -> dict[str, Any]:
        return {**self.beat_dict(), "stats": self.stats.to_dict()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> WorkerBeat:
        if "executor_runs" in d:
            executors = expand_runs(as_list(d["executor_runs"], "executor_runs"))
        else:  # the row form older workers write
            rows = [row_of(r, 2, "executors") for r in as_list(field_value(d, "executors"), "executors")]
            executors = [executor_id(start, end, "executor") for start, end in rows]
        return cls(**cls.checked_fields(d, executors),
                   stats=WorkerStats.from_dict(as_dict(field_value(d, "stats"), "stats")))


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
        return cls(time=num_field(d, "time"), component=str_field(d, "component"), task=int_field(d, "task"),
                   host=str_field(d, "host"), port=int_field(d, "port"), error=str_field(d, "error"))


@dataclass(frozen=True)
class LayoutMark:
    """The ``/layout`` node: the layout the leading nimbus keeps (see LAYOUT)."""

    layout: int

    def to_dict(self) -> dict[str, Any]:
        return {"layout": self.layout}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LayoutMark:
        return cls(int_field(d, "layout"))


@dataclass(frozen=True)
class NimbusId:
    """The data of a nimbus contender's lock node."""

    id: str

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> NimbusId:
        return cls(id=str_field(d, "id"))


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
        out = cls(zk_password=str_field(d, "zk_password"), curve_public=str_field(d, "curve_public"),
                  curve_secret=str_field(d, "curve_secret"))
        for key in ("curve_public", "curve_secret"):
            if len(getattr(out, key)) != 40:
                raise ValueError(f"{key} must be 40 characters of Z85")
        if not out.zk_password:
            raise ValueError("zk_password is empty")
        return out

    def __repr__(self) -> str:  # never print secrets
        return f"TopologySecrets(curve_public={self.curve_public!r})"


MAX_STATE_OWNERS = 32


@dataclass(frozen=True)
class StateLineage:
    """Where the checkpointed state of the topologies of one name went, by owner: the state
    namespace each owner's last topology of that name used (nimbus writes it at submit and
    keeps it after the kill, so that an owner may carry their state over to a new instance)."""

    owners: tuple[tuple[str, str], ...] = ()  # (owner, namespace), the most recent last

    def namespace_of(self, owner: str) -> str | None:
        return dict(self.owners).get(owner)

    def with_owner(self, owner: str, namespace: str) -> StateLineage:
        """This lineage with ``owner``'s namespace set (the oldest owners dropped past the bound)."""
        rest = [(o, ns) for o, ns in self.owners if o != owner]
        return StateLineage(tuple([*rest, (owner, namespace)][-MAX_STATE_OWNERS:]))

    def to_dict(self) -> dict[str, Any]:
        return {"owners": [list(e) for e in self.owners]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> StateLineage:
        rows = as_list(field_value(d, "owners"), "owners")
        if len(rows) > MAX_STATE_OWNERS:
            raise ValueError(f"more than {MAX_STATE_OWNERS} owners")
        out = []
        for row in rows:
            if not isinstance(row, list) or len(row) != 2 or not all(isinstance(x, str) and x for x in row):
                raise ValueError("an owner entry must be [owner, namespace], both non-empty strings")
            out.append((row[0], row[1]))
        return cls(tuple(out))


MAX_PUBLISHED_TOKENS = 10_000


@dataclass(frozen=True)
class PublishedTokens:
    """The API token table the leading nimbus publishes for the supervisors' HTTP endpoints:
    ``enabled`` False means nimbus runs with API authentication off; ``entries`` are
    (sha256 hex of a token, user, role). Hashes only: a reader learns no token."""

    enabled: bool
    entries: tuple[tuple[str, str, str], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"enabled": self.enabled, "tokens": [list(e) for e in self.entries]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PublishedTokens:
        rows = as_list(field_value(d, "tokens"), "tokens")
        if len(rows) > MAX_PUBLISHED_TOKENS:
            raise ValueError(f"more than {MAX_PUBLISHED_TOKENS} tokens")
        entries = []
        for row in rows:
            if not isinstance(row, list) or len(row) != 3 or not all(isinstance(x, str) for x in row):
                raise ValueError("a token entry must be [sha256, user, role] strings")
            digest, user, role = row
            if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
                raise ValueError("a token entry's sha256 must be 64 lower-case hex digits")
            if not user or len(user) > 200 or not role or len(role) > 32:
                raise ValueError("a token entry's user or role is empty or too long")
            entries.append((digest, user, role))
        return cls(as_bool(field_value(d, "enabled"), "enabled"), tuple(entries))


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


def parse_node(data: bytes | None, parse: Callable[[dict[str, Any]], T]) -> T:
    """Decode one node's data with ``parse``; ValueError/TypeError/KeyError when malformed."""
    if not data:
        raise ValueError("empty node")
    if len(data) > MAX_NODE_BYTES:
        raise ValueError(f"node is {len(data)} bytes, above {MAX_NODE_BYTES}")
    try:
        obj = json.loads(data)  # JSON and UTF-8 errors are ValueErrors
    except RecursionError:
        raise ValueError(f"JSON nested deeper than the interpreter allows (limit {MAX_DEPTH})") from None
    check_json_depth(data, MAX_DEPTH)
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    if obj.get("v") != FORMAT_VERSION:
        raise ValueError(f"unsupported format version {obj.get('v')!r} (expected {FORMAT_VERSION})")
    return parse(obj)
