"""Where checkpoints flow: the checkpoint spout a stateful topology gets at build time,
and the barrier edges its system topology gets at run time.

The user's topology gains only the ``__checkpoint`` spout (so task ids, nimbus's counts
and ``structure.json`` include it). The barrier edges, Storm's ``$checkpoint`` stream,
are added to the system topology the runtime builds: every spout subscribes to the
checkpoint spout, every bolt to each component it reads from, all with an all grouping,
and every component declares the ``__checkpoint`` stream.
"""
from __future__ import annotations

import pickle
from collections.abc import Mapping

from squall import grouping as g
from squall.components import Component, StreamDeclaration
from squall.grouping import Grouping
from squall.state.components import is_stateful
from squall.model import CHECKPOINT
from squall.state.protocol import CHECKPOINT_FIELDS, CHECKPOINT_STREAM
from squall.topology import SPOUT, ComponentSpec, Subscription, Topology, TopologyError

_DECL = StreamDeclaration(CHECKPOINT_FIELDS, False)


def checkpoint_spec() -> ComponentSpec:
    from squall.state.checkpoint_spout import CheckpointSpout

    return ComponentSpec(CHECKPOINT, SPOUT, pickle.dumps(CheckpointSpout(), protocol=5), 1, 1, {}, [],
                         {CHECKPOINT_STREAM: _DECL})


def with_checkpoints(specs: Mapping[str, ComponentSpec], objects: Mapping[str, Component]) -> dict[str, ComponentSpec]:
    """``specs`` plus the checkpoint spout if any component is stateful (build time)."""
    out = dict(specs)
    stateful = sorted(c for c, obj in objects.items() if is_stateful(obj))
    if not stateful:
        return out
    for c in stateful:
        if out[c].kind != SPOUT and not out[c].inputs:
            raise TopologyError(f"stateful bolt {c!r} subscribes to nothing: its checkpoints "
                                "arrive with its inputs")
    cycle = find_cycle(out)
    if cycle:
        raise TopologyError(f"stateful component {stateful[0]!r} is in a topology with a cycle "
                            f"({' -> '.join(cycle)}); checkpoints need an acyclic topology")
    out[CHECKPOINT] = checkpoint_spec()
    return out


def find_cycle(specs: Mapping[str, ComponentSpec]) -> list[str]:
    """A cycle of subscriptions as a path (first id repeated at the end), or []."""
    ups = {c: sorted({s.component for s in spec.inputs}) for c, spec in specs.items()}
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(c: str, path: list[str]) -> list[str]:
        state[c] = 1
        path.append(c)
        for u in ups.get(c, ()):
            if state.get(u) == 1:
                return path[path.index(u):] + [u]
            if u not in state:
                found = visit(u, path)
                if found:
                    return found
        path.pop()
        state[c] = 2
        return []

    for c in sorted(specs):
        if c not in state:
            found = visit(c, [])
            if found:
                return list(reversed(found))
    return []


def is_checkpointed(topology: Topology) -> bool:
    return CHECKPOINT in topology.components


def wire(topology: Topology) -> dict[str, ComponentSpec]:
    """The components of a checkpointed topology with the barrier edges added (run time)."""
    every = Grouping(g.ALL)
    out: dict[str, ComponentSpec] = {}
    for c in topology.components.values():
        if c.id == CHECKPOINT:
            out[c.id] = c
            continue
        if c.kind == SPOUT:
            extra = [Subscription(CHECKPOINT, CHECKPOINT_STREAM, every)]
        else:
            ups = sorted({s.component for s in c.inputs})
            extra = [Subscription(u, CHECKPOINT_STREAM, every) for u in ups]
        out[c.id] = ComponentSpec(c.id, c.kind, c.blob, c.parallelism, c.num_tasks, c.config,
                                  [*c.inputs, *extra], {**c.streams, CHECKPOINT_STREAM: _DECL})
    return out


def channels(system: Topology, component: str, tasks_of: Mapping[str, list[int]]) -> list[int]:
    """The tasks a component's tasks receive barriers from."""
    out: list[int] = []
    for s in system.components[component].inputs:
        if s.stream == CHECKPOINT_STREAM:
            out.extend(tasks_of[s.component])
    return sorted(set(out))
