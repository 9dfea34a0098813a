"""What each port of this supervisor should run, from its parts of the assignments: a plain
function of what ZooKeeper holds and of what the slots run now.

A supervisor reads only its own parts (``/node-assignments/<node>/<topology>``, see
``ClusterState.watch_node_assignments``). A part that cannot be read (malformed) is not an
order to stop: the ports that run that topology keep running what they run until a
well-formed part says otherwise (issue 20: a damaged node must not kill workers).
"""
from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from squall.daemons.state import NodeAssignment
from squall.daemons.supervisor.slot import SlotAssignment


@dataclass(frozen=True)
class Problem:
    """Something to warn about once: ``key`` identifies it, ``event`` says it."""

    key: tuple[Any, ...]
    event: str
    fields: dict[str, Any] = field(default_factory=dict)


def port_assignments(ports: Collection[int], parts: Mapping[str, NodeAssignment | None],
                     running: Mapping[int, SlotAssignment | None]
                     ) -> tuple[dict[int, SlotAssignment], list[Problem]]:
    """Port -> what it should run, and the problems found. ``parts`` are this node's parts by
    topology id (None: malformed); ``running`` what each port runs now (its slot's assignment)."""
    out: dict[int, SlotAssignment] = {}
    problems: list[Problem] = []
    for topology_id in sorted(parts):
        part = parts[topology_id]
        if part is None:
            kept = sorted(p for p, a in running.items() if a is not None and a.topology_id == topology_id)
            problems.append(Problem(("malformed", topology_id), "this node's part of an assignment is "
                                    "unreadable; its workers keep running until it is rewritten",
                                    {"topology": topology_id, "ports": kept}))
            for port in kept:
                out.setdefault(port, running[port])  # type: ignore[arg-type]
            continue
        for port in sorted(part.ports):
            if port not in ports:
                problems.append(Problem(("port", topology_id, port), "assignment names a port this "
                                        "supervisor does not have", {"topology": topology_id, "port": port}))
                continue
            if port in out:
                problems.append(Problem(("clash", topology_id, port), "two topologies assigned to one port; "
                                        "keeping the first", {"port": port, "topology": topology_id,
                                                              "kept": out[port].topology_id}))
                continue
            out[port] = SlotAssignment(topology_id, frozenset(part.ports[port]), part.code_digest)
    return out, problems
