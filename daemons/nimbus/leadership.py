"""Whether this nimbus leads, and where the leader is: writes go to the leader only."""
from __future__ import annotations

from squall.daemons.nimbus.guard import ApiError
from squall.daemons.state import ClusterState, ClusterStateError, NimbusElection


class Leadership:
    """This nimbus's place in the election (``election`` is set once it contends)."""

    def __init__(self, state: ClusterState, identifier: str) -> None:
        self.state = state
        self.identifier = identifier  # host:port, settled once the API is bound
        self.election: NimbusElection | None = None

    @property
    def is_leader(self) -> bool:
        return self.election is not None and self.election.is_leader

    def require(self) -> None:
        """ApiError 503 naming the leader (``NimbusClient`` retries there) unless this nimbus leads."""
        if self.is_leader:
            return
        leader = self.address()
        where = f"the leader is {leader}" if leader else "no leader is elected yet"
        raise ApiError(503, f"this nimbus ({self.identifier}) is not the leader; {where}", leader=leader)

    def address(self) -> str | None:
        """The leader's ``host:port``; None when none is elected or ZooKeeper cannot say."""
        try:
            return self.state.nimbus_leader()
        except ClusterStateError:
            return None
