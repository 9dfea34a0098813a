"""ZooKeeper ACLs: the ACL decisions as plain functions, and a real ZooKeeper refusing
clients without credentials and workers reaching past their own topology."""
from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest
import structlog
import structlog.testing
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import OPEN_ACL_UNSAFE, Permissions
from squall.daemons.credentials import (
    WorkerCredentials,
    read_credentials,
    without_daemon_secrets,
    write_credentials,
)
from squall.daemons.insecure import insecure_settings
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
from squall.daemons.state.acls import (
    PASSWORD_ENV,
    WORKER_RW,
    Credential,
    ZkAuth,
    node_acl,
    parts_of,
    topology_user,
)
from squall.daemons.worker.decisions import bind_host, merge_worker_conf

from squall.config import build_config

DAEMON = Credential("squall", "daemon-secret").digest_id
TOPO = Credential("topology-t1", "t1-secret").digest_id


# --- plain decisions -------------------------------------------------------------------

def _perms(acl) -> dict[str, int]:
    return {a.id.id: a.perms for a in acl}


def test_node_acl_daemon_only_by_default() -> None:
    for parts in [(), ("supervisors", "s1"), ("nimbus", "leader"), ("assignments",), ("credentials", "t1"),
                  ("workerbeats",)]:
        assert _perms(node_acl(parts, DAEMON, TOPO)) == {DAEMON: Permissions.ALL}, parts


def test_node_acl_topology_reads_its_node_and_assignment_only() -> None:
    for part in ("topologies", "assignments"):
        assert _perms(node_acl((part, "t1"), DAEMON, TOPO)) == {DAEMON: Permissions.ALL, TOPO: Permissions.READ}


def test_node_acl_topology_writes_beats_and_errors() -> None:
    for parts in [("workerbeats", "t1"), ("workerbeats", "t1", "n-1"), ("errors", "t1", "split")]:
        acl = _perms(node_acl(parts, DAEMON, TOPO))
        assert acl == {DAEMON: Permissions.ALL, TOPO: WORKER_RW}, parts
        assert not acl[TOPO] & Permissions.ADMIN  # a worker cannot change ACLs


def test_node_acl_unknown_topology_credential_is_daemon_only_and_off_is_open() -> None:
    assert _perms(node_acl(("workerbeats", "t1"), DAEMON, None)) == {DAEMON: Permissions.ALL}
    assert node_acl(("assignments", "t1"), None, TOPO) == list(OPEN_ACL_UNSAFE)


def test_parts_of() -> None:
    assert parts_of("/squall/assignments/t1", "/squall") == ("assignments", "t1")
    assert parts_of("/squall", "/squall") == ()
    assert parts_of("/a/b", "/") == ("a", "b")
    with pytest.raises(ValueError):
        parts_of("/other/x", "/squall")


def test_zk_auth_from_conf() -> None:
    assert not ZkAuth.for_daemons(None, None).enabled
    with pytest.raises(ValueError, match="together"):
        ZkAuth.for_daemons("squall", None)
    auth = ZkAuth.for_daemons("squall", "daemon-secret")
    assert auth.daemon_id == DAEMON and "daemon-secret" not in repr(auth)
    worker = ZkAuth.for_worker("t1", "t1-secret", DAEMON)
    assert worker.credential.user == topology_user("t1") and worker.daemon_id == DAEMON
    # The password from the environment (compose's env_file) when the config has none; the
    # config wins; the variable alone turns nothing on; a user without either is refused.
    env = {PASSWORD_ENV: "daemon-secret"}
    assert ZkAuth.from_conf({"zookeeper.auth.user": "squall"}, env).daemon_id == DAEMON
    assert ZkAuth.from_conf({"zookeeper.auth.user": "squall", "zookeeper.auth.password": "other"}, env).daemon_id \
        == Credential("squall", "other").digest_id
    assert not ZkAuth.from_conf({}, env).enabled
    with pytest.raises(ValueError, match=PASSWORD_ENV):
        ZkAuth.from_conf({"zookeeper.auth.user": "squall"}, {})


def test_worker_conf_has_no_daemon_secrets_and_topology_cannot_relax_transport() -> None:
    conf = {"zookeeper.auth.user": "squall", "zookeeper.auth.password": "x", "zookeeper.port": 1}
    assert without_daemon_secrets(conf) == {"zookeeper.port": 1}
    merged, ignored = merge_worker_conf({"zmq.curve": True}, {"zmq.curve": False, "zmq.bind.host": "0.0.0.0"})
    assert merged["zmq.curve"] is True and ignored == ["zmq.bind.host", "zmq.curve"]
    assert bind_host({"zmq.bind.host": None}, "10.0.0.5") == "10.0.0.5"
    assert bind_host({"zmq.bind.host": "0.0.0.0"}, "10.0.0.5") == "0.0.0.0"


def test_insecure_settings_name_what_is_off() -> None:
    assert insecure_settings({"zookeeper.auth.user": "u", "zookeeper.auth.password": "p", "zmq.curve": True}, {}) == []
    assert insecure_settings({"zookeeper.auth.user": "u"}, {PASSWORD_ENV: "p"}) == []
    off = insecure_settings({"zmq.curve": False, "zmq.bind.host": "0.0.0.0"}, {})
    assert len(off) == 3 and "ZooKeeper" in off[0] and "CurveZMQ" in off[1]
    (alone,) = insecure_settings({}, {PASSWORD_ENV: "p"})  # the variable without a user: said so
    assert "ZooKeeper authentication is OFF" in alone and f"${PASSWORD_ENV} is set" in alone


def test_credentials_file_is_private_and_checked(tmp_path: Path) -> None:
    creds = WorkerCredentials("t1", new_topology_secrets(), DAEMON)
    path = write_credentials(tmp_path, creds)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    with pytest.raises(ValueError, match="not 't2'"):
        read_credentials(path, "t2")
    os.chmod(path, 0o644)
    with pytest.raises(ValueError, match="mode 0600"):
        read_credentials(path, "t1")
    os.chmod(path, 0o600)
    got = read_credentials(path, "t1")
    assert got == creds and not path.exists()  # read once, then removed
    assert creds.secrets.zk_password not in repr(got)
    bad = tmp_path / "bad.json"
    fd = os.open(bad, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, b'{"v": 1, "topology": "t1"}')
    os.close(fd)
    with pytest.raises(ValueError, match="zk_password"):
        read_credentials(bad, "t1")


# --- a real ZooKeeper ------------------------------------------------------------------


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
        worker.worker_beat(WorkerBeat("ta", "n1", 6700, time.time(), [(1, 1)], 1.0, {}))
        worker.report_error("ta", ErrorInfo(time.time(), "c", 1, "127.0.0.1", 6700, "boom"))
        assert state.worker_beats("ta") and state.errors("ta")  # and daemons read what it wrote
        before = _snapshot(zk_client, zk_root)

        refused = [
            lambda: worker.worker_beat(WorkerBeat("tb", "n1", 6700, time.time(), [(1, 1)], 1.0, {})),
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


def test_half_a_daemon_credential_is_a_config_error() -> None:
    from squall.config import ConfigError

    with pytest.raises(ConfigError, match="zookeeper.auth.user' and 'zookeeper.auth.password'"):
        build_config({"zookeeper.auth.user": "squall"}, user_file=False)
    assert build_config({"zookeeper.auth.user": "u", "zookeeper.auth.password": "p"}, user_file=False)
