"""squall's cluster state in ZooKeeper, one job per module.

- ``records``: the record types kept in ZooKeeper, their field checks and node encoding;
- ``operator_requests``: what operators ask of a topology's workers (log levels, sampling,
  profiles, restarts) and the checks of every field;
- ``watchers``: one-shot watches re-armed after every event (``Watch`` is the handle);
- ``election``: nimbus leader election (``NimbusElection``);
- ``session``: the kazoo session with deadlines, retries and the restore thread (``ZkSession``);
- ``read_cache``: what watched reads may serve without asking ZooKeeper again (``ReadCache``);
- ``nodes``: paths, ACLs, decoding, ephemeral nodes and watch registration (``ZkNodes``);
- ``assignments``: topologies' assignments and each supervisor's part of them (``AssignmentNodes``);
- ``cluster_state``: the ``ClusterState`` facade that daemons use, typed records on top.
"""
from squall.daemons.fields import ExecutorId
from squall.daemons.state.cluster_state import ClusterState, ClusterStateError
from squall.daemons.state.election import ElectionSupport, NimbusElection
from squall.daemons.state.operator_requests import OperatorRequests, ProfileRequest
from squall.daemons.state.records import (
    MAX_ERROR_CHARS,
    MAX_NODE_BYTES,
    TOPOLOGY_STATUSES,
    Assignment,
    ErrorInfo,
    NodeAssignment,
    PublishedTokens,
    Slot,
    StateLineage,
    SupervisorInfo,
    TopologyInfo,
    WorkerBeat,
)
from squall.daemons.state.watchers import Watch, WatchSupport

__all__ = [
    "MAX_ERROR_CHARS", "MAX_NODE_BYTES", "TOPOLOGY_STATUSES",
    "Assignment", "ClusterState", "ClusterStateError", "ElectionSupport", "ErrorInfo",
    "ExecutorId", "NimbusElection", "NodeAssignment",
    "OperatorRequests", "ProfileRequest", "PublishedTokens", "SupervisorInfo", "Slot", "StateLineage",
    "TopologyInfo", "Watch",
    "WatchSupport", "WorkerBeat",
]
