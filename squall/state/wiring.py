"""What a stateful component does to the topology it is built into (its
``topology_transform``): the checkpoint spout, and every component run wrapped.

The user's topology gains only the ``__checkpoint`` spout (so task ids, nimbus's counts
and ``structure.json`` include it) and, in each of its other components' specs, the
wrapper its tasks run in (squall.state.checkpointing). The barrier edges, Storm's
``$checkpoint`` stream, are added to the system topology the runtime builds
(``squall.model.checkpoint_edges``).
"""
from __future__ import annotations

import pickle
from collections.abc import Mapping

from squall.components import StreamDeclaration
from squall.model import CHECKPOINT, CHECKPOINT_FIELDS, CHECKPOINT_STREAM, is_checkpointed
from squall.state.checkpoint_spout import CheckpointSpout
from squall.state.checkpointing import Checkpointing
from squall.topology import SPOUT, ComponentSpec, TopologyError

__all__ = ["checkpoint_spec", "find_cycle", "is_checkpointed", "with_checkpoints"]

_DECL = StreamDeclaration(CHECKPOINT_FIELDS, False)


def checkpoint_spec() -> ComponentSpec:
    spout = CheckpointSpout()
    return ComponentSpec(CHECKPOINT, SPOUT, pickle.dumps(spout, protocol=5), 1, 1, spout.component_config(), [],
                         {CHECKPOINT_STREAM: _DECL})


def with_checkpoints(specs: dict[str, ComponentSpec], stateful: list[str]) -> dict[str, ComponentSpec]:
    """``specs`` plus the checkpoint spout, every component wrapped to take part in
    checkpoints (``stateful``: the ids of those with a state). Build time."""
    for c in stateful:
        if specs[c].kind != SPOUT and not specs[c].inputs:
            raise TopologyError(f"stateful bolt {c!r} subscribes to nothing: its checkpoints "
                                "arrive with its inputs")
    cycle = find_cycle(specs)
    if cycle:
        raise TopologyError(f"stateful component {sorted(stateful)[0]!r} is in a topology with a cycle "
                            f"({' -> '.join(cycle)}); checkpoints need an acyclic topology")
    with_state = pickle.dumps(Checkpointing(stateful=True), protocol=5)
    without = pickle.dumps(Checkpointing(stateful=False), protocol=5)
    out = {c: spec.replace(wrapper=with_state if c in stateful else without) for c, spec in specs.items()}
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

