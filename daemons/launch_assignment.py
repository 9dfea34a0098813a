"""What a supervisor launched a worker for, handed over in the worker's directory.

At every launch the supervisor writes ``workers/<id>/assignment.json``
(``LocalLayout.launch_assignment_file``), atomically and readable by the worker's owner only:
its copy of the topology's assignment (the whole of it: the worker needs every executor's
slot to send tuples) and whether the topology was active when the supervisor last read it.
A worker that cannot reach ZooKeeper when it starts runs on it; with ZooKeeper reachable,
ZooKeeper stays authoritative. It is a file of its own rather than a field of the
credentials file: it is not secret, may be as large as a ZooKeeper node (the credentials
file is capped far below and removed once read), and keeps the secrets' parser to one job.

The worker treats the file as hostile input: a regular 0600 file of its own, at most
MAX_FILE_BYTES, decoded like a ZooKeeper node (``parse_node``, the assignment by
``Assignment.from_dict``), for the worker's topology and naming executors on its slot.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from squall.daemons.fields import as_dict, field_value
from squall.daemons.local_state import read_private, write_atomic
from squall.daemons.state.records import MAX_NODE_BYTES, Assignment, encode, parse_node
from squall.errors import SquallError

MAX_FILE_BYTES = MAX_NODE_BYTES  # as large as the ZooKeeper node it copies, no larger
# Whatever a parser may raise on hostile data.
_DECODE_ERRORS = (ValueError, TypeError, KeyError, AttributeError, IndexError, OverflowError,
                  RecursionError)


class LaunchAssignmentError(SquallError, ValueError):
    """The launch assignment cannot be used; the message names the problem."""


@dataclass(frozen=True)
class LaunchAssignment:
    assignment: Assignment
    active: bool  # the topology's status was "active" when the supervisor last read it

    def to_dict(self) -> dict[str, Any]:
        return {"assignment": self.assignment.to_dict(), "active": self.active}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LaunchAssignment:
        active = field_value(d, "active")
        if not isinstance(active, bool):
            raise ValueError(f"field 'active' is {active!r}, not a boolean")
        return cls(Assignment.from_dict(as_dict(field_value(d, "assignment"), "assignment")), active)


def write_launch_assignment(path: Path, launch: LaunchAssignment) -> Path:
    """Write ``launch`` for a worker about to start (0600, atomic); returns ``path``.
    ValueError when it is larger than MAX_FILE_BYTES."""
    write_atomic(path, encode(str(path), launch.to_dict()))
    return path


def check_launch_assignment(data: bytes, topology_id: str, node: str, port: int) -> LaunchAssignment:
    """What ``data`` hands the worker of ``topology_id`` on ``node``:``port``, when usable;
    LaunchAssignmentError naming the problem otherwise."""
    if len(data) > MAX_FILE_BYTES:
        raise LaunchAssignmentError(f"{len(data)} bytes, above {MAX_FILE_BYTES}")
    try:
        launch = parse_node(data, LaunchAssignment.from_dict)
    except _DECODE_ERRORS as exc:
        raise LaunchAssignmentError(f"malformed: {type(exc).__name__}: {exc}") from None
    found = launch.assignment.topology_id
    if found != topology_id:
        raise LaunchAssignmentError(f"it is for topology {found!r}, not {topology_id!r}")
    if not launch.assignment.executors_on(node, port):
        raise LaunchAssignmentError(f"it names no executors on {node}:{port}")
    return launch


def read_launch_assignment(path: Path, topology_id: str, node: str, port: int) -> LaunchAssignment:
    """Read and check the launch assignment at ``path``; LaunchAssignmentError (missing, not
    the worker's own private file, too big, malformed, for another topology or slot)."""
    try:
        data = read_private(path, MAX_FILE_BYTES)
    except FileNotFoundError:
        raise LaunchAssignmentError(f"{path} does not exist") from None
    except (OSError, ValueError) as exc:
        raise LaunchAssignmentError(str(exc)) from None
    try:
        return check_launch_assignment(data, topology_id, node, port)
    except LaunchAssignmentError as exc:
        raise LaunchAssignmentError(f"{path}: {exc}") from None
