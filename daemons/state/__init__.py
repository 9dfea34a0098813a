"""squall's cluster state in ZooKeeper (being split into one module per job)."""
from squall.daemons.state.cluster_state import (
    Assignment,
    ClusterState,
    ClusterStateError,
    ErrorInfo,
    NimbusElection,
    SupervisorInfo,
    TopologyInfo,
    Watch,
    WorkerBeat,
)

__all__ = ["Assignment", "ClusterState", "ClusterStateError", "ErrorInfo", "NimbusElection",
           "SupervisorInfo", "TopologyInfo", "Watch", "WorkerBeat"]
