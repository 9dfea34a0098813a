"""ZooKeeper ACLs and credentials as plain functions: which identity may do what on which node,
the daemons' and workers' credentials, and settings that turn protection off."""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from kazoo.security import OPEN_ACL_UNSAFE, Permissions

from squall.config import build_config
from squall.daemons.credentials import WorkerCredentials, read_credentials, without_daemon_secrets, write_credentials
from squall.daemons.insecure import insecure_settings
from squall.daemons.nimbus.secrets import new_topology_secrets
from squall.daemons.state.acls import (
    PASSWORD_ENV,
    WORKER_RW,
    Credential,
    ZkAuth,
    node_acl,
    open_to_anyone,
    outside_acl,
    outside_nodes,
    parts_of,
    topology_user,
)
from squall.daemons.worker.decisions import bind_host, merge_worker_conf

DAEMON = Credential("squall", "daemon-secret").digest_id
TOPO = Credential("topology-t1", "t1-secret").digest_id


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


def test_half_a_daemon_credential_is_a_config_error() -> None:
    from squall.config import ConfigError

    with pytest.raises(ConfigError, match="zookeeper.auth.user' and 'zookeeper.auth.password'"):
        build_config({"zookeeper.auth.user": "squall"}, user_file=False)
    assert build_config({"zookeeper.auth.user": "u", "zookeeper.auth.password": "p"}, user_file=False)


def test_outside_the_root_every_node_zookeeper_makes_open_is_listed():
    assert outside_nodes("/squall") == ["/", "/zookeeper", "/zookeeper/quota"]
    assert outside_nodes("/apps/team/squall") == ["/", "/apps", "/apps/team", "/zookeeper", "/zookeeper/quota"]
    assert outside_nodes("/") == ["/", "/zookeeper", "/zookeeper/quota"]


def test_the_outside_acl_lets_only_the_daemons_write_and_anyone_read():
    acl = outside_acl(DAEMON)
    assert _perms(acl) == {DAEMON: Permissions.ALL, "anyone": Permissions.READ}
    assert not open_to_anyone(acl)
    assert open_to_anyone(OPEN_ACL_UNSAFE)
    assert not open_to_anyone(node_acl((), DAEMON))
