"""AssignmentNodes: topologies' assignments and each supervisor's part of them in ZooKeeper.

``/assignments/<id>`` holds a topology's whole ``Assignment`` (its workers read it: they
send to every slot); ``/node-assignments/<node>/<id>`` holds one supervisor's part of it
(``NodeAssignment``), which is all that supervisor reads and watches (Storm 2 keeps
assignments per node). ``set_assignment`` writes the whole first, then each part that
changed, and deletes the parts of nodes no longer named; ``/layout`` marks a cluster whose
assignments have parts, so that a supervisor of this version knows it can follow them
(docs/operations/upgrades.md). The typed facade on top is ``cluster_state.ClusterState``.
"""
from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

from kazoo.exceptions import NoNodeError

from squall.daemons.fields import ExecutorId
from squall.daemons.state.nodes import ZkNodes
from squall.daemons.state.records import LAYOUT, Assignment, LayoutMark, NodeAssignment, Slot, check_name, node_parts
from squall.daemons.state.watchers import Watch

_UNREAD: Any = object()  # set_assignment's previous assignment, when the caller does not know it


class AssignmentNodes(ZkNodes):
    """Assignments, supervisors' parts of them and the layout mark (see the module doc)."""

    _layout_marked = False  # this client has written the layout mark

    def set_assignment(self, assignment: Assignment, previous: Assignment | None | object = _UNREAD) -> None:
        """Write a topology's assignment, then each supervisor's part of it
        (``/node-assignments/<node>/<id>``): a part is written only when it changed, and the
        part of a node the assignment no longer names is deleted. ``previous`` is the
        assignment this one replaces as the caller knows it (None: there is none); unless
        given it is read here. The whole assignment goes first: a supervisor that sees its
        part can launch a worker at once, and that worker reads the whole."""
        topology_id = check_name(assignment.topology_id, "topology id")
        old = self._known_parts(topology_id, previous)
        self._write(self._path("assignments", topology_id), assignment.to_dict())
        self._write_parts(topology_id, node_parts(assignment), old)
        self._mark_layout()

    def assignment(self, topology_id: str) -> Assignment | None:
        return self._read(self._path("assignments", topology_id), Assignment.from_dict)

    def assignment_exists(self, topology_id: str) -> bool:
        """Whether the assignment node exists (ZooKeeper checks no ACL for this)."""
        return self._retry(self._op, "exists", self._path("assignments", topology_id)) is not None

    def assignment_ids(self) -> list[str]:
        """Every assignment node, malformed ones included (a watched list, like ``assignments``)."""
        return self._watched_children(self._path("assignments"))

    def assignments(self) -> dict[str, Assignment]:
        """Every well-formed assignment (decoded again only when it changed: do not modify them)."""
        return self._read_children(self._path("assignments"), Assignment.from_dict, cached=True)

    def remove_assignment(self, topology_id: str) -> None:
        """Delete the assignment (its workers stop), then the supervisors' parts of it."""
        old = self._known_parts(topology_id)
        self._delete(self._path("assignments", topology_id))
        self._write_parts(topology_id, {}, old)

    def remove_node_parts(self, topology_id: str) -> int:
        """Delete every supervisor's part of a topology, looking under every node (the sweep
        after a removal: a part left by a crash between two writes); how many were deleted."""
        return self._write_parts(topology_id, {}, self._find_parts(topology_id))

    def node_assignments(self, node: str) -> dict[str, NodeAssignment | None]:
        """One supervisor's parts by topology id; None for a malformed one."""
        return self._read_children(self._path("node-assignments", check_name(node, "node id")),
                                   NodeAssignment.from_dict, keep_malformed=True)

    def watch_node_assignments(self, node: str,
                               callback: Callable[[dict[str, NodeAssignment | None]], None]) -> Watch:
        """Call ``callback({topology id: NodeAssignment or None})`` now and whenever one of
        this supervisor's parts changes, appears or goes; None marks a malformed part (the
        supervisor keeps what runs there until a well-formed part says otherwise)."""
        return self._watch_children(self._path("node-assignments", check_name(node, "node id")),
                                    NodeAssignment.from_dict, dict, callback, f"assignments of {node}",
                                    keep_malformed=True)

    def reconcile_node_parts(self, assignments: Mapping[str, Assignment],
                             malformed: Collection[str] = ()) -> int:
        """Make every supervisor's parts agree with ``assignments`` (every well-formed
        assignment, by topology id): missing or stale parts written, parts of topologies
        without one deleted, except those of ``malformed`` assignments (left as they are:
        they keep their workers). Run by a nimbus taking the lead (an earlier leader may have
        died between writes, or written only the whole assignments, as versions before
        per-node parts did); then the layout is marked. The number of writes it took."""
        parent = self._path("node-assignments")
        stored: dict[str, dict[str, NodeAssignment | None]] = {}
        for node in self._children(parent):
            for topology_id, part in self._read_children(f"{parent}/{node}", NodeAssignment.from_dict,
                                                         keep_malformed=True).items():
                stored.setdefault(topology_id, {})[node] = part
        writes = 0
        for topology_id in sorted(set(stored) | set(assignments)):
            if topology_id in malformed:
                continue
            wanted = node_parts(assignments[topology_id]) if topology_id in assignments else {}
            writes += self._write_parts(topology_id, wanted, stored.get(topology_id, {}))
        for node in self._children(parent):  # nodes left with no part: supervisors long gone
            if not self._children(f"{parent}/{node}"):
                self._delete(f"{parent}/{node}")
        self._mark_layout()
        return writes

    def assignment_from_parts(self, topology_id: str) -> Assignment | None:
        """A topology's assignment rebuilt from the supervisors' parts of it (when its own node
        is malformed): executors and code, without hosts or start times, version 0; None
        when no readable part exists."""
        found = self._find_parts(topology_id)
        executors: dict[ExecutorId, Slot] = {}
        digest = None
        for node in sorted(found):
            part = self._read(self._path("node-assignments", node, topology_id), NodeAssignment.from_dict)
            if part is None:
                continue
            digest = part.code_digest
            for port, execs in part.ports.items():
                executors.update((ex, (node, port)) for ex in execs)
        if digest is None:
            return None
        return Assignment(topology_id, executors, code_digest=digest, version=0)

    def layout_current(self) -> bool:
        """Whether supervisors can follow their parts: the layout is marked (a nimbus of this
        version keeps them), or no assignment exists yet. False while an earlier nimbus, which
        writes whole assignments only, runs the cluster."""
        marked = self._read(self._path("layout"), LayoutMark.from_dict)
        if marked is not None and marked.layout >= LAYOUT:
            return True
        return not self._children(self._path("assignments"))

    def _mark_layout(self) -> None:
        if not self._layout_marked:
            self._write(self._path("layout"), LayoutMark(LAYOUT).to_dict())
            self._layout_marked = True

    def _known_parts(self, topology_id: str,
                     previous: Assignment | None | object = _UNREAD) -> Mapping[str, NodeAssignment | None]:
        """The parts stored for a topology as far as its assignment tells (every node it
        names); when the stored assignment is malformed, found by looking under every node."""
        if previous is _UNREAD:
            path = self._path("assignments", topology_id)
            try:
                data, _ = self._retry(self._op, "get", path)
            except NoNodeError:
                return {}
            previous = self._decode(path, data, Assignment.from_dict)
            if previous is None:
                return self._find_parts(topology_id)
        return node_parts(previous) if isinstance(previous, Assignment) else {}

    def _find_parts(self, topology_id: str) -> dict[str, NodeAssignment | None]:
        parent = self._path("node-assignments")
        nodes = self._children(parent)
        found = self._get_many([f"{parent}/{node}/{topology_id}" for node in nodes])
        return {node: None for node in nodes if found[f"{parent}/{node}/{topology_id}"] is not None}

    def _write_parts(self, topology_id: str, wanted: Mapping[str, NodeAssignment],
                     stored: Mapping[str, NodeAssignment | None]) -> int:
        """Write the parts that differ from ``stored``, delete the stored ones not wanted;
        the number of writes."""
        writes = 0
        for node, part in sorted(wanted.items()):
            if stored.get(node) != part:
                self._write(self._path("node-assignments", check_name(node, "node id"), topology_id),
                            part.to_dict())
                writes += 1
        for node in sorted(set(stored) - set(wanted)):
            self._delete(self._path("node-assignments", node, topology_id))
            writes += 1
        return writes

    def watch_assignments(self, callback: Callable[[dict[str, Assignment]], None]) -> Watch:
        """Call ``callback({topology id: Assignment})`` now and on any change of the set or
        of any assignment's data. Malformed assignments are left out."""
        return self._watch_children(self._path("assignments"), Assignment.from_dict, dict,
                                    callback, "assignments")

    def watch_assignment(self, topology_id: str, callback: Callable[[Assignment | None], None]) -> Watch:
        """Call ``callback(assignment)`` now and whenever one topology's assignment changes."""
        path = self._path("assignments", topology_id)
        return self._watch_node(path, Assignment.from_dict, callback, f"assignment {topology_id}")
