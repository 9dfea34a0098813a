"""The compose setup (docker-compose.yml, conf/compose.yaml, `squall secure-init`) is secure by
default: daemons configured the way compose configures them (no Docker engine here: real
processes on loopback) run a topology with ZooKeeper locked, while their workers never see
the daemons' token or ZooKeeper password. That the files agree with each other is tested in
tests/unit/test_compose_files.py."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml
from click.testing import CliRunner
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from squall.cli import main
from squall.cli.security import DAEMON_ENV_FILE, read_env_file
from squall.config import read_yaml_file
from squall.daemons.nimbus.access import TOKEN_ENV
from squall.daemons.nimbus.credentials import DAEMON_USER
from squall.daemons.state.acls import PASSWORD_ENV
from squall.testing.cluster import ProcessCluster
from squall.testing.zookeeper import authenticated_client
from support.paths import CLUSTER_TOPOLOGIES, COMPOSE_CONF, COMPOSE_FILE, docker_compose
from support.worker_users import reachable_python

MOUNT = "/etc/squall/security"  # where docker-compose.yml mounts ./secrets
TOPOLOGY = CLUSTER_TOPOLOGIES / "cluster_wordcount.py"
FIRST_WORKER_UID = 1900000000  # supervisor.worker.uids' first
DAEMONS = ("nimbus", "supervisor-1", "supervisor-2", "zookeeper-lock")  # what gets supervisor.env


def test_docker_compose_hands_the_secure_init_env_to_the_daemons_only(tmp_path: Path) -> None:
    """docker-compose itself resolves the file: nimbus and both supervisors get the token and
    the ZooKeeper password from secrets/supervisor.env, ZooKeeper and Prometheus get neither."""
    shutil.copy(COMPOSE_FILE, tmp_path / COMPOSE_FILE.name)
    result = CliRunner().invoke(main, ["secure-init", str(tmp_path / "secrets"), "--host", "nimbus"])
    assert result.exit_code == 0, result.output
    env = read_env_file(tmp_path / "secrets" / DAEMON_ENV_FILE)
    assert set(env) == {TOKEN_ENV, PASSWORD_ENV}
    resolved = subprocess.run([docker_compose(), "config"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert resolved.returncode == 0, resolved.stderr
    services = yaml.safe_load(resolved.stdout)["services"]
    for name, service in services.items():
        got = {k: v for k, v in service.get("environment", {}).items() if k in env}
        assert got == (env if name in DAEMONS else {}), name


def _compose_conf_here(secrets: Path) -> dict[str, Any]:
    """conf/compose.yaml as this machine runs it: the security files from ``secrets`` (the
    mount's source); the harness's loopback hosts, free ports and dirs instead of the compose
    network's names."""
    conf = read_yaml_file(COMPOSE_CONF)
    for key in ("zookeeper.servers", "nimbus.host", "squall.local.dir", "supervisor.slots.ports"):
        conf.pop(key)
    return {k: v.replace(MOUNT, str(secrets)) if isinstance(v, str) else v for k, v in conf.items()}


def services_command(name: str) -> list[str]:
    """The command docker-compose.yml runs a service with (the image's entrypoint is squall)."""
    return list(yaml.safe_load(COMPOSE_FILE.read_text())["services"][name]["command"])


def _environ(pid: int) -> dict[bytes, bytes]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.partition(b"=")[::2] for item in raw.split(b"\0") if item)


def _acked(out: Path) -> int:
    return sum(len(f.read_text().split()) for f in out.glob("acked-*.txt"))


@pytest.mark.cluster
def test_secure_init_then_daemons_configured_as_compose_does(own_zk_server, zk_root, open_tmp_path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    zk_server = own_zk_server  # compose's own ZooKeeper, which its zookeeper-lock step locks
    tmp_path = open_tmp_path  # supervisors run as root, workers as users of their own: they pass through
    monkeypatch.delenv(PASSWORD_ENV, raising=False)
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    secrets = tmp_path / "secrets"
    result = CliRunner().invoke(main, ["secure-init", str(secrets), "--host", "127.0.0.1", "--host", "nimbus"])
    assert result.exit_code == 0, result.output
    env = read_env_file(secrets / DAEMON_ENV_FILE)
    password, token = env[PASSWORD_ENV], env[TOKEN_ENV]
    out = tmp_path / "out"
    out.mkdir()
    os.chmod(out, 0o1777)  # where the topology's workers write what they acked
    cluster = ProcessCluster(zk_server.port, zk_root, tmp_path / "cluster", supervisors=1, slots=1,
                             conf={**_compose_conf_here(secrets), "supervisor.worker.user": None},
                             secure_init_dir=secrets,
                             supervisor_prefix=reachable_python(FIRST_WORKER_UID, FIRST_WORKER_UID, tmp_path))
    # The zookeeper-lock service: `squall lock-zookeeper` with the compose config and env file.
    lock_conf = tmp_path / "lock.yaml"
    lock_conf.write_text(yaml.safe_dump({**_compose_conf_here(secrets), "zookeeper.servers": ["127.0.0.1"],
                                         "zookeeper.port": zk_server.port, "zookeeper.root": zk_root}))
    locked = subprocess.run([sys.executable, "-m", "squall.cli", *services_command("zookeeper-lock")],
                            env={**os.environ, **env, "SQUALL_CONF": str(lock_conf)}, capture_output=True,
                            text=True, timeout=60)
    assert locked.returncode == 0 and "locked /, /zookeeper, /zookeeper/quota" in locked.stdout, locked.stderr
    daemon_zk = authenticated_client(zk_server.hosts, {"zookeeper.auth.user": DAEMON_USER,
                                                       "zookeeper.auth.password": password})
    anonymous = KazooClient(hosts=zk_server.hosts)
    anonymous.start(timeout=10)
    try:
        os.chmod(tmp_path / "cluster", 0o711)
        cluster.start()
        for name in ("nimbus", "supervisor-0"):  # neither secret sits in a daemon's config file
            text = (cluster.base / f"{name}.yaml").read_text()
            assert password not in text and token not in text
        assert PASSWORD_ENV.encode() in _environ(cluster.supervisors[0].pid)  # the supervisor has it ...
        res = cluster.cli("submit", str(TOPOLOGY), "--name", "composed", "-c", f"test.output.dir={out}",
                          "-c", "test.sentences=100000", "-c", "test.rate=100")
        assert res.returncode == 0, res.stdout + res.stderr
        cluster.wait_for(lambda: cluster.worker_pids() and _acked(out) > 10, 60, "the worker acking tuples")
        for pid in cluster.worker_pids().values():  # ... its workers do not
            assert psutil.Process(pid).uids().real >= FIRST_WORKER_UID  # a user of their own
            environ = _environ(pid)
            assert not {PASSWORD_ENV.encode(), TOKEN_ENV.encode()} & environ.keys()
            assert not any(password.encode() in v or token.encode() in v for v in environ.values())

        # The nodes carry ACLs naming the password from supervisor.env: the daemons' credential
        # reads them, a client without credentials reads and writes nothing.
        (topology_id,) = daemon_zk.get_children(f"{zk_root}/assignments")
        assert daemon_zk.get(f"{zk_root}/assignments/{topology_id}")[0]
        with pytest.raises(NoAuthError):
            anonymous.get(f"{zk_root}/assignments/{topology_id}")
        with pytest.raises(NoAuthError):
            anonymous.create(f"{zk_root}/planted", b"x")
        with pytest.raises(NoAuthError):
            anonymous.set(f"{zk_root}/assignments/{topology_id}", b"{}")
    finally:
        cluster.stop()
        anonymous.stop()
        anonymous.close()
        try:
            daemon_zk.delete(zk_root, recursive=True)  # the conftest's credential cannot: not its ACLs
        finally:
            daemon_zk.stop()
            daemon_zk.close()
    for name in ("nimbus", "supervisor-0"):
        events = [json.loads(line) for line in (cluster.base / f"{name}.log").read_text().splitlines()
                  if line.startswith("{")]
        assert not [e for e in events if "SECURITY OFF" in e["event"] and "ZooKeeper" in e["event"]], name
        connected = [e for e in events if e["event"] == "connected to ZooKeeper"]
        assert connected and all(e["auth"] == DAEMON_USER for e in connected), name
