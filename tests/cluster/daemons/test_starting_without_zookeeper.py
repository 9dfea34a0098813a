"""What lets daemons and workers start while ZooKeeper is away, against a real ZooKeeper: the
supervisor's remembered secrets and status, and ClusterState's background connection (watches
that come into force once ZooKeeper is up). The launch assignment file itself is tested in
tests/unit/daemons/test_launch_assignment.py."""
from __future__ import annotations

import json
import threading

import pytest

from squall.config import build_config
from squall.daemons.nimbus.secrets import new_topology_secrets
from squall.daemons.state import Assignment, ClusterState, ClusterStateError, TopologyInfo
from squall.daemons.supervisor.handover import Handovers, HandoverUnavailable, NoSecrets
from squall.testing.waiting import wait_for
from squall.testing.zookeeper import ZooKeeperServer, free_port

ASSIGNMENT = Assignment("t1", {(1, 2): ("n1", 6700), (3, 3): ("n2", 6701)}, {"n1": "h1", "n2": "h2"},
                        {(1, 2): 5.0, (3, 3): 5.0}, "digest", 7)


@pytest.mark.cluster
def test_the_supervisor_remembers_secrets_and_status_for_relaunches_while_zookeeper_is_away(cluster_conf):
    handovers = Handovers()
    with ClusterState(cluster_conf) as state:
        with pytest.raises(NoSecrets):
            handovers.get(state, "t1")
        secrets = new_topology_secrets()
        state.set_topology_secrets("t1", secrets)
        state.set_topology(TopologyInfo("t1", "t", "inactive", 1, {}, "d", 0.0))
        first = handovers.get(state, "t1")
        assert (first.credentials.secrets, first.active, first.from_memory) == (secrets, False, False)
        state.set_topology_status("t1", "active")
        assert handovers.get(state, "t1").active is True
    # The session is gone (as when ZooKeeper is away): what was read last is used.
    remembered = handovers.get(state, "t1")
    assert (remembered.credentials.secrets, remembered.active, remembered.from_memory) == (secrets, True, True)
    with pytest.raises(HandoverUnavailable, match="none were read earlier"):
        handovers.get(state, "t2")
    handovers.keep_only({"t2"})
    with pytest.raises(HandoverUnavailable):
        handovers.get(state, "t1")


@pytest.mark.cluster
def test_a_background_start_returns_while_zookeeper_is_away_and_watches_start_when_it_comes(tmp_path):
    port = free_port()
    conf = build_config({"zookeeper.servers": ["127.0.0.1"], "zookeeper.port": port,
                         "zookeeper.root": "/bg", "zookeeper.connection.timeout.ms": 1000,
                         "zookeeper.session.timeout.ms": 4000}, user_file=False)
    with pytest.raises(ClusterStateError, match="cannot connect"):
        ClusterState(conf).start()  # the daemons' mode is unchanged: no ZooKeeper, no start
    state = ClusterState(conf).start(background=True)
    server = ZooKeeperServer(port, tick_time=500, min_session_timeout=1000, work_dir=tmp_path / "zk")
    try:
        assert not state.connected
        seen: list[Assignment | None] = []
        got = threading.Event()

        def on_assignment(a: Assignment | None) -> None:
            seen.append(a)
            got.set()

        state.watch_assignment("t1", on_assignment)  # returns at once, nothing read yet
        assert seen == []
        server.start(timeout=60)
        wait_for(lambda: got.is_set(), 30, "the watch's first read once ZooKeeper is up")
        assert seen == [None]
        assert state.connected
        wait_for(lambda: state.client.exists("/bg/workerbeats"), 10, "base paths made on connection")
        with ClusterState(conf) as other:
            other.set_assignment(ASSIGNMENT)
        wait_for(lambda: len(seen) == 2, 10, "the watch firing on a change")
        assert seen[1] == ASSIGNMENT
        assert json.loads(state.client.get("/bg/assignments/t1")[0])["version"] == 7
    finally:
        state.close()
        server.stop()
