"""Cluster state that is damaged but not lost (issue 20): a malformed assignment, or a
malformed part of one supervisor's assignments, must not stop running workers; nimbus
rewrites the assignment from the supervisors' parts, placing nothing elsewhere; a well-formed
assignment that says otherwise still stops them."""
from __future__ import annotations

import time

import pytest

from squall.daemons.state import Assignment, ClusterState
from squall.daemons.state.records import parse_node
from squall.testing.cluster import FAST
from squall.testing.waiting import wait_for
from support.paths import CLUSTER_TOPOLOGIES

pytestmark = pytest.mark.cluster

TOPOLOGY = CLUSTER_TOPOLOGIES / "cluster_wordcount.py"
# Several rounds of everything that reads assignments: supervisor, workers, nimbus.
ROUNDS = 4 * max(FAST["supervisor.monitor.frequency.secs"], FAST["task.refresh.poll.secs"],
                 FAST["nimbus.monitor.freq.secs"])


def test_malformed_assignment_data_keeps_the_running_workers(start_cluster, zk_root, tmp_path):
    cluster = start_cluster(supervisors=1, slots=2)
    with ClusterState(cluster.common) as state:  # the cluster's own daemon credential
        _damage_and_watch(cluster, state.client, zk_root, tmp_path)


def _damage_and_watch(cluster, zk_client, zk_root, tmp_path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    res = cluster.cli("submit", str(TOPOLOGY), "--name", "wc", "-c", "topology.workers=2",
                      "-c", f"test.output.dir={out}", "-c", "test.sentences=1000000", "-c", "test.rate=100")
    assert res.returncode == 0, res.stdout + res.stderr
    cluster.wait_for(lambda: len(cluster.worker_pids()) == 2, 60, "two workers")
    cluster.wait_for(lambda: _acked(out) > 50, 60, "sentences acked: both workers running")
    pids = cluster.worker_pids()
    (tid,) = [t["id"] for t in cluster.client.topologies()]
    path = f"{zk_root}/assignments/{tid}"
    placed = parse_node(zk_client.get(path)[0], Assignment.from_dict)

    zk_client.set(path, b"{not json")
    time.sleep(ROUNDS)
    assert cluster.worker_pids() == pids, "a worker was stopped because its assignment was unreadable"
    # Nimbus rewrote it from the supervisor's parts: the same placement.
    fixed = wait_for(lambda: _readable(zk_client.get(path)[0]), 20, "the assignment rewritten")
    assert fixed.executors == placed.executors and fixed.node_host == placed.node_host

    (node,) = {n for n, _ in placed.slots()}
    zk_client.set(f"{zk_root}/node-assignments/{node}/{tid}", b'{"v": 1, "ports": "garbage"}')
    time.sleep(ROUNDS)
    assert cluster.worker_pids() == pids, "a worker was stopped because its supervisor's part was unreadable"

    assert cluster.cli("kill", "wc", "--wait", "0").returncode == 0  # well-formed: no assignment
    cluster.wait_for(lambda: not cluster.worker_pids(), 30, "the workers stopped by the kill")


def _readable(data: bytes) -> Assignment | None:
    try:
        return parse_node(data, Assignment.from_dict)
    except ValueError:
        return None


def _acked(out) -> int:
    return sum(len(f.read_text().split()) for f in out.glob("acked-*.txt"))
