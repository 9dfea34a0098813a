"""ZooKeeper ACLs on a real ZooKeeper: clients without credentials and workers reaching past
their own topology are refused (the ACL decisions as plain functions are in
tests/unit/daemons/state/test_acls.py)."""
from __future__ import annotations

import time

import pytest
import structlog
import structlog.testing
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import OPEN_ACL_UNSAFE

from squall.config import build_config
from squall.daemons.credentials import WorkerCredentials, without_daemon_secrets
from squall.daemons.nimbus.auth import token_hash
from squall.daemons.nimbus.secrets import new_topology_secrets
from squall.daemons.state import (
    Assignment,
    ClusterState,
    ClusterStateError,
    ErrorInfo,
    PublishedTokens,
    TopologyInfo,
    WorkerBeat,
)
from squall.daemons.state.acls import topology_user


@pytest.fixture
def daemons(cluster_conf):
    """Nimbus's part: two topologies with secrets, nodes and assignments."""
    state = ClusterState(cluster_conf).start()
    secrets = {}
    try:
        for tid in ("ta", "tb"):
            secrets[tid] = new_topology_secrets()
            state.set_topology_secrets(tid, secrets[tid])
            state.set_topology(TopologyInfo(tid, tid, "active", 1, {"c": 1}, "d", time.time()))
            state.set_assignment(Assignment(tid, {(1, 1): ("n1", 6700)}, {"n1": "127.0.0.1"}, {(1, 1): 1.0}, "d"))
        state.set_api_tokens(PublishedTokens(True, ((token_hash("a-token-for-the-admin"), "root", "admin"),)))
        yield state, secrets
    finally:
        state.close()


def _worker_state(cluster_conf, state: ClusterState, tid: str, secrets) -> ClusterState:
    creds = WorkerCredentials(tid, secrets[tid], state.auth.daemon_id)
    return ClusterState(without_daemon_secrets(cluster_conf), auth=creds.zk_auth()).start()


def _snapshot(zk_client: KazooClient, root: str) -> dict[str, bytes]:
    """Every node under the root and its data (read with the daemons' credential)."""
    out = {}

    def walk(path: str) -> None:
        out[path] = zk_client.get(path)[0]
        for child in zk_client.get_children(path):
            walk(f"{path}/{child}")

    walk(root)
    return out


@pytest.mark.cluster
def test_client_without_credentials_can_do_nothing_under_the_root(daemons, zk_server, zk_client, zk_root) -> None:
    state, _ = daemons
    before = _snapshot(zk_client, zk_root)
    anon = KazooClient(hosts=zk_server.hosts, timeout=10)
    anon.start(timeout=10)
    try:
        attempts = [
            lambda: anon.get(f"{zk_root}/assignments/ta"),
            lambda: anon.get_children(f"{zk_root}/assignments"),
            lambda: anon.get(f"{zk_root}/credentials/ta"),
            lambda: anon.get(zk_root),
            lambda: anon.create(f"{zk_root}/planted", b"x"),
            lambda: anon.create(f"{zk_root}/supervisors/fake", b"{}", ephemeral=True),
            lambda: anon.create(f"{zk_root}/nimbus/fake", b"{}"),
            lambda: anon.set(f"{zk_root}/assignments/ta", b"{}"),
            lambda: anon.set(f"{zk_root}/topologies/ta", b"{}"),
            lambda: anon.delete(f"{zk_root}/assignments/ta"),
            lambda: anon.delete(f"{zk_root}/topologies/tb"),
            lambda: anon.set_acls(f"{zk_root}/assignments/ta", list(OPEN_ACL_UNSAFE)),
            lambda: anon.get(f"{zk_root}/tokens"),
            lambda: anon.set(f"{zk_root}/tokens", b'{"v": 1, "enabled": false, "tokens": []}'),
        ]
        for i, attempt in enumerate(attempts):
            with pytest.raises(NoAuthError):
                attempt()
                pytest.fail(f"attempt {i} was allowed")
    finally:
        anon.stop()
        anon.close()
    assert _snapshot(zk_client, zk_root) == before
    assert state.assignment("ta") is not None


@pytest.mark.cluster
def test_worker_credential_reaches_only_its_own_topology(daemons, cluster_conf, zk_client, zk_root) -> None:
    state, secrets = daemons
    worker = _worker_state(cluster_conf, state, "ta", secrets)
    try:
        # What a worker of ta needs works.
        assert worker.assignment("ta") is not None and worker.topology("ta") is not None
        assert worker.assignment_exists("ta")
        worker.worker_beat(WorkerBeat("ta", "n1", 6700, time.time(), [(1, 1)], 1.0))
        worker.report_error("ta", ErrorInfo(time.time(), "c", 1, "127.0.0.1", 6700, "boom"))
        assert state.worker_beats("ta") and state.errors("ta")  # and daemons read what it wrote
        before = _snapshot(zk_client, zk_root)

        refused = [
            lambda: worker.worker_beat(WorkerBeat("tb", "n1", 6700, time.time(), [(1, 1)], 1.0)),
            lambda: worker.report_error("tb", ErrorInfo(time.time(), "c", 1, "h", 1, "forged")),
            lambda: worker.set_assignment(Assignment("ta", {(1, 1): ("evil", 1)}, {"evil": "10.9.9.9"}, {}, "d")),
            lambda: worker.set_assignment(Assignment("tb", {(1, 1): ("evil", 1)}, {"evil": "10.9.9.9"}, {}, "d")),
            lambda: worker.set_topology_status("ta", "inactive"),
            lambda: worker.remove_assignment("ta"),
            lambda: worker.teardown_topology("tb"),
            lambda: worker.assignment("tb"),
            lambda: worker.topology("tb"),
            lambda: worker.worker_beats("tb"),
            lambda: worker.topology_secrets("ta"),
            lambda: worker.topology_secrets("tb"),
            lambda: worker.supervisors(),
            lambda: worker.assignments(),
            # Each supervisor's parts of the assignments are the daemons' alone: a worker
            # reads its own topology's whole assignment, and nothing of what other topologies
            # run on its host.
            lambda: worker.node_assignments("n1"),
            lambda: worker.set_assignment(Assignment("ta", {(1, 1): ("n1", 6700)}, {"n1": "127.0.0.1"}, {}, "d")),
            # Turning the supervisors' endpoints open, or planting a token of its own.
            lambda: worker.set_api_tokens(PublishedTokens(False)),
            lambda: worker.set_api_tokens(PublishedTokens(True, ((token_hash("planted-token-xyz"), "x", "admin"),))),
        ]
        for i, attempt in enumerate(refused):
            with pytest.raises(ClusterStateError, match="not authorized"):
                attempt()
                pytest.fail(f"attempt {i} was allowed")
        # A raw client holding ta's credential cannot change ACLs of its own nodes either.
        raw = KazooClient(hosts=worker.hosts, timeout=10,
                          auth_data=[("digest", f"{topology_user('ta')}:{secrets['ta'].zk_password}")])
        raw.start(timeout=10)
        try:
            with pytest.raises(NoAuthError):
                raw.set_acls(f"{zk_root}/workerbeats/ta", list(OPEN_ACL_UNSAFE))
            with pytest.raises(NoAuthError):
                raw.create(f"{zk_root}/workerbeats/tb/n9-1", b"{}")
            with pytest.raises(NoAuthError):
                raw.get(f"{zk_root}/tokens")
        finally:
            raw.stop()
            raw.close()
        assert _snapshot(zk_client, zk_root) == before
    finally:
        worker.close()


@pytest.mark.cluster
def test_wrong_daemon_password_is_refused(daemons, cluster_conf) -> None:
    conf = build_config({**cluster_conf, "zookeeper.auth.password": "wrong"}, user_file=False)
    intruder = ClusterState(conf)
    try:
        with pytest.raises(ClusterStateError, match="not authorized"):
            intruder.start()
            intruder.assignment("ta")
    finally:
        intruder.close()


@pytest.mark.cluster
def test_a_restarted_daemon_recreates_nodes_with_the_topology_acl(daemons, cluster_conf) -> None:
    """A fresh daemon (no cached digests, e.g. a new nimbus leader) re-creating an assignment
    reads the topology's digest from its secrets: the topology's workers can still read it."""
    state, secrets = daemons
    fresh = ClusterState(cluster_conf).start()
    worker = _worker_state(cluster_conf, state, "ta", secrets)
    try:
        fresh.remove_assignment("ta")
        assert not worker.assignment_exists("ta")
        fresh.set_assignment(Assignment("ta", {(1, 1): ("n2", 6701)}, {"n2": "127.0.0.1"}, {(1, 1): 2.0}, "d"))
        assert worker.assignment("ta").executors == {(1, 1): ("n2", 6701)}
        with pytest.raises(ClusterStateError, match="not authorized"):
            worker.assignment("tb")
    finally:
        worker.close()
        fresh.close()


@pytest.mark.cluster
def test_a_tree_created_open_is_reported_at_start(cluster_conf, zk_client, zk_root) -> None:
    zk_client.ensure_path(zk_root)  # made open, as by a cluster before ACLs
    # Captured from structlog itself: another test may have pointed its output elsewhere.
    with structlog.testing.capture_logs() as logged:
        ClusterState(cluster_conf).start().close()
    assert any("created without ACLs" in e["event"] for e in logged), logged

