"""What a supervisor hands a worker it launches, remembered per topology so that a worker
can be relaunched while ZooKeeper is away.

At a launch with ZooKeeper answering, the topology's secrets and status are read from it
(and remembered); while ZooKeeper does not answer, the last ones read are used. The
assignment itself comes from the supervisor's assignment snapshot, which it keeps through
outages anyway. Entries of topologies no longer assigned here are forgotten.
"""
from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from squall.daemons.credentials import WorkerCredentials
from squall.daemons.state import ClusterState, ClusterStateError, TopologyInfo
from squall.errors import SquallError
from squall.state.stores import NAMESPACE_KEY as NAMESPACE


class HandoverUnavailable(SquallError):
    """Nothing to launch the worker with; the message says why."""


class NoSecrets(HandoverUnavailable):
    """ZooKeeper answered: the topology has no secrets (it stays so until resubmitted)."""


@dataclass(frozen=True)
class TopologyHandover:
    credentials: WorkerCredentials
    active: bool  # the topology's status was "active" when read
    name: str | None = None  # the topology's name
    from_memory: bool = False  # read at an earlier launch: ZooKeeper did not answer now
    state_namespace: str | None = None  # where its checkpointed state lives (nimbus set it at submit)


def state_namespace(info: TopologyInfo | None) -> str | None:
    """Where a topology's checkpointed state lives: the namespace nimbus set at submit; a
    topology submitted before nimbus set one keeps its state by name."""
    if info is None:
        return None
    namespace = info.conf.get(NAMESPACE) if isinstance(info.conf, dict) else None
    return namespace if isinstance(namespace, str) and namespace else info.name


class Handovers:
    """Per topology, the credentials and status read at its last launch."""

    def __init__(self) -> None:
        self._known: dict[str, TopologyHandover] = {}

    def get(self, state: ClusterState, topology_id: str) -> TopologyHandover:
        """Read from ZooKeeper when it answers, else remembered; HandoverUnavailable when
        neither (or when the topology has no secrets)."""
        try:
            if not state.connected:  # fail fast: the supervisor's loop must keep ticking
                raise ClusterStateError("not connected to ZooKeeper")
            secrets = state.topology_secrets(topology_id)
            info = state.topology(topology_id) if secrets is not None else None
        except ClusterStateError as exc:
            known = self._known.get(topology_id)
            if known is None:
                raise HandoverUnavailable(f"cannot read the topology's secrets ({exc}) and none "
                                          "were read earlier") from None
            return TopologyHandover(known.credentials, known.active, known.name, from_memory=True,
                                    state_namespace=known.state_namespace)
        if secrets is None:
            raise NoSecrets("topology has no secrets in ZooKeeper (submitted before this version? "
                            "resubmit it)")
        handover = TopologyHandover(WorkerCredentials(topology_id, secrets, state.auth.daemon_id),
                                    info is not None and info.status == "active", info.name if info else None,
                                    state_namespace=state_namespace(info))
        self._known[topology_id] = handover
        return handover

    def keep_only(self, topology_ids: Collection[str]) -> None:
        """Forget topologies no longer assigned here (keeps this bounded)."""
        for topology_id in [t for t in self._known if t not in topology_ids]:
            del self._known[topology_id]
