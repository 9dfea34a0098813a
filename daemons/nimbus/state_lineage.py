"""Whose checkpointed state a new topology gets: nimbus's decision at submit, plain code.

State belongs to a topology instance and its owner, not to a name. A topology's tasks keep
their state under ``topology.state.namespace``, which nimbus sets (a user may not): the new
topology's own id, so that a name used again, by another user or the same one, starts
empty; or, when its owner asks (``topology.state.carry.over``, ``squall submit
--carry-state``), the namespace of that owner's last topology of the name, and never another
owner's. What each owner's last topology of a name used is kept in ZooKeeper
(``ClusterState.state_lineage``) after the kill, so it can be carried over later.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from squall.daemons.state import StateLineage
from squall.errors import SquallError
from squall.state.stores import NAMESPACE_KEY as NAMESPACE

CARRY = "topology.state.carry.over"


class StateRefused(SquallError, ValueError):
    """The submission asks for state it may not have; the message says why."""


def user_set_namespace(conf: Mapping[str, Any]) -> bool:
    """Does a submitted config name the namespace at all (nimbus's to set; even a null would
    hide the one the supervisor gives the workers)?"""
    return NAMESPACE in conf


def choose(name: str, owner: str, topology_id: str, conf: Mapping[str, Any], lineage: StateLineage) -> str:
    """The state namespace of the new topology ``topology_id`` named ``name``, owned by ``owner``."""
    if not conf.get(CARRY):
        return topology_id
    earlier = lineage.namespace_of(owner)
    if earlier is None:  # the same answer whether or not another user had the name
        raise StateRefused(f"{CARRY}: user {owner!r} has had no topology named {name!r} whose state to carry "
                           f"over (only one's own state can be)")
    return earlier
