"""This supervisor's parts of the assignments as ZooKeeper gives them: a watch is the fast
path, a periodic re-read the safety net; while ZooKeeper does not answer, the last ones
read stay in force. Also the whole assignments a launch hands its worker."""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from squall.daemons.state import Assignment, ClusterState, ClusterStateError, NodeAssignment
from squall.daemons.timers import Waker

LAYOUT_POLL_SECS = 2.0  # how often a supervisor waiting for an upgraded nimbus looks again


class AssignmentFeed:
    """The newest snapshot (topology id -> this node's part, None when malformed); the
    watch's thread and the loop's both write it, under one lock."""

    def __init__(self, state: ClusterState, supervisor_id: str, waker: Waker, logger: Any) -> None:
        self.state = state
        self.id = supervisor_id
        self._waker = waker
        self.log = logger
        self._lock = threading.Lock()
        self._snapshot: dict[str, NodeAssignment | None] | None = None  # this node's parts by topology
        self._whole: dict[str, Assignment] = {}  # whole assignments read at launches (outage fallback)
        self._watch_seq = 0  # bumped by every watch delivery
        self._zk_down = False

    @property
    def snapshot(self) -> dict[str, NodeAssignment | None] | None:
        """None until the first read."""
        with self._lock:
            return self._snapshot

    def read(self) -> dict[str, NodeAssignment | None]:
        """Read this node's parts now (at start); ClusterStateError when ZooKeeper cannot say."""
        snapshot = self.state.node_assignments(self.id)
        with self._lock:
            self._snapshot = snapshot
        return snapshot

    def wait_for_layout(self, stopping: Callable[[], bool]) -> None:
        """A cluster whose nimbus writes whole assignments only (an earlier squall) has no
        parts for this supervisor to follow: acting on none would stop every worker here.
        Wait, without registering, until a nimbus of this version leads and writes them."""
        warned = False
        while not stopping() and not self.state.layout_current():
            if not warned:
                warned = True
                self.log.error("the leading nimbus is of an earlier squall (it writes whole assignments only); "
                               "this supervisor waits for an upgraded nimbus and leaves its workers alone "
                               "meanwhile: upgrade every nimbus first (docs/operations/upgrades.md)")
            self._waker.wait(LAYOUT_POLL_SECS)
        if stopping():
            raise ClusterStateError("stopped while waiting for an upgraded nimbus")
        if warned:
            self.log.info("a nimbus of this version leads; going on")

    def on_assignments(self, snapshot: dict[str, NodeAssignment | None]) -> None:
        # kazoo's thread: store and wake the loop, nothing more.
        with self._lock:
            self._snapshot = snapshot
            self._watch_seq += 1
        self._waker.wake()

    def poll(self) -> None:
        """The safety net: re-read this node's parts in case a watch event went missing."""
        with self._lock:
            seq = self._watch_seq
        try:
            if not self.state.connected:  # fail fast: the loop must keep ticking the slots
                raise ClusterStateError("not connected to ZooKeeper")
            snapshot = self.state.node_assignments(self.id)
        except ClusterStateError as exc:
            if not self._zk_down:
                self.log.warning("cannot read assignments; keeping the last ones", error=str(exc))
            self._zk_down = True
            return
        if self._zk_down:
            self.log.info("assignments readable again")
        self._zk_down = False
        with self._lock:
            if self._watch_seq == seq:  # a watch delivery during the read is newer: keep it
                self._snapshot = snapshot

    def whole_assignment(self, topology_id: str) -> Assignment | None:
        """A topology's whole assignment, read now; while ZooKeeper does not answer, the one
        read at an earlier launch (kept for the topologies assigned here only)."""
        assigned = set(self.snapshot or {})
        self._whole = {t: a for t, a in self._whole.items() if t in assigned}
        try:
            if self.state.connected:
                whole = self.state.assignment(topology_id)
                if whole is not None:
                    self._whole[topology_id] = whole
                return whole
        except ClusterStateError:
            pass
        return self._whole.get(topology_id)

    def nimbus_leader(self) -> str | None:
        """The leading nimbus's host:port from ZooKeeper (the reporter's thread)."""
        if not self.state.connected:
            return None
        try:
            return self.state.nimbus_leader()
        except ClusterStateError:
            return None
