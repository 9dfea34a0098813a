"""The worker's decisions as plain functions, tested without processes or sockets.

Is this worker still assigned, which task lives where, which conf a worker runs with, how
much of its stats fit in a beat, and when to log a ZooKeeper outage.
"""
from __future__ import annotations

import json
import threading
from collections.abc import Container, Iterable, Mapping
from dataclasses import replace
from typing import Any

from squall.daemons.state import Assignment, TopologyInfo
from squall.model import executor_tasks
from squall.runtime.stats import ExecutorStats

ExecutorId = tuple[int, int]
Endpoint = tuple[str, int]

# Where a topology's conf.json may not reach: keys that say where this daemon lives.
# The transport's security settings are the cluster's, not a topology's to relax; where its
# state lives is nimbus's choice, handed over by the supervisor.
DAEMON_ONLY_PREFIXES = ("zookeeper.", "nimbus.", "supervisor.", "squall.local.dir", "zmq.curve",
                        "zmq.bind.host", "topology.state.namespace")

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


def task_endpoints(assignment: Assignment, known_tasks: Container[int] | None = None) -> dict[int, Endpoint]:
    """task -> (host, port) from executor -> (node, port) and node -> host. Tasks on a
    node without a host are left out (see ``nodes_without_host``), and so are executors
    whose ends are not tasks of the topology (``known_tasks``, contiguous ids): a hostile
    row is never iterated."""
    out: dict[int, Endpoint] = {}
    for ex, (node, port) in assignment.executors.items():
        host = assignment.node_host.get(node)
        if host is None:
            continue
        if known_tasks is not None and (ex[0] not in known_tasks or ex[1] not in known_tasks):
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


def fit_stats(entries: list[ExecutorStats], budget: int) -> tuple[list[ExecutorStats], int]:
    """The executor stats entries that fit in ``budget`` bytes of JSON, and how many were
    left out: a worker beat must stay well under ZooKeeper's node limit whatever the
    executor count (the executor list itself is what nimbus needs; stats are extra)."""
    kept: list[ExecutorStats] = []
    used = 0
    for entry in entries:
        size = len(json.dumps(entry.to_dict(), separators=(",", ":"), default=str)) + 1
        if used + size > budget:
            break
        kept.append(entry)
        used += size
    return kept, len(entries) - len(kept)


def bind_host(conf: Mapping[str, Any], advertised: str) -> str:
    """Where the receive socket binds: ``zmq.bind.host`` when set, else the host the
    supervisor advertises (never every interface unless configured)."""
    return str(conf.get("zmq.bind.host") or advertised)


class OutageLog:
    """Logs a ZooKeeper outage once when it starts and once when it ends, not per call:
    the worker keeps running on what it has (``failed`` / ``recovered`` say whether to log).
    Several timer threads report to one instance."""

    def __init__(self) -> None:
        self.down_since: float | None = None
        self.failures = 0
        self._lock = threading.Lock()

    def failed(self, now: float) -> bool:
        with self._lock:
            self.failures += 1
            if self.down_since is None:
                self.down_since = now
                return True
            return False

    def recovered(self, now: float) -> float | None:
        """Seconds the outage lasted when this call ends one, else None."""
        with self._lock:
            if self.down_since is None:
                return None
            lasted, self.down_since = now - self.down_since, None
            return lasted


def with_capacity(stats: list[ExecutorStats], previous: Mapping[ExecutorId, tuple[float, float]],
                  now: float) -> tuple[list[ExecutorStats], dict[ExecutorId, tuple[float, float]]]:
    """Storm's capacity: the share of the last stats window an executor spent executing
    (``busy_secs`` growth over the window's length), added to each bolt's stats; also the
    (busy, time) marks the next window starts from. The first window has no capacity yet."""
    out, marks = [], {}
    for entry in stats:
        busy, key = entry.busy_secs, entry.executor
        if busy is None:
            out.append(entry)
            continue
        marks[key] = (busy, now)
        prev = previous.get(key)
        if prev is not None and now > prev[1]:
            entry = replace(entry, capacity=round(min(1.0, max(0.0, (busy - prev[0]) / (now - prev[1]))), 3))
        out.append(entry)
    return out, marks
