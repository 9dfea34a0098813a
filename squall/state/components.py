"""Stateful spouts and bolts: what users subclass for checkpointed state (Storm's
IStatefulComponent, with Python names)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from squall.components import Bolt, Spout
from squall.state.wiring import with_checkpoints

if TYPE_CHECKING:
    from squall.state.kv import KeyValueState
    from squall.topology import TopologyTransform


class Stateful:
    """A component with a key-value state saved at every checkpoint.

    ``init_state(state)`` is called before the first tuple, and again after every rollback
    with the state as last committed: derive anything kept outside the state there. The
    ``pre_*`` hooks run just before the state is prepared, committed or rolled back (e.g. a
    spout writes its read position into the state in ``pre_prepare``).
    """

    def init_state(self, state: "KeyValueState") -> None:
        self.state = state

    def pre_prepare(self, txid: int) -> None:
        """The state is about to be saved as checkpoint ``txid``."""

    def pre_commit(self, txid: int) -> None:
        """Checkpoint ``txid`` is about to be committed."""

    def pre_rollback(self) -> None:
        """The state is about to be rolled back to the last committed checkpoint."""

    def topology_transform(self) -> TopologyTransform | None:
        """A topology with a stateful component gets checkpoints (squall.state.wiring)."""
        return with_checkpoints


class StatefulBolt(Stateful, Bolt):
    """A bolt with checkpointed state: its updates are applied exactly once, also when
    workers die, because every task rolls back to the last committed checkpoint and the
    spouts replay from there."""


class StatefulSpout(Stateful, Spout):
    """A spout that keeps its read position in its state, so that a rollback rewinds it
    to the position of the last committed checkpoint: this gives exactly-once state updates
    downstream. ``next_tuple`` is not called until ``init_state`` has run."""


def is_stateful(component: object) -> bool:
    return isinstance(component, Stateful)
