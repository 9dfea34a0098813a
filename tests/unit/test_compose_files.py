"""The compose setup's files agree with each other and are secure by default: conf/compose.yaml
names no secret and needs the daemons' password from the environment, and docker-compose.yml
mounts each daemon only the TLS files and env file it needs."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from squall.cli import dev_zookeeper
from squall.cli.security import DAEMON_ENV_FILE
from squall.config import ConfigError, build_config, read_yaml_file
from squall.daemons.insecure import insecure_settings
from squall.daemons.nimbus.credentials import (
    CA_CERT,
    DAEMON_USER,
    NIMBUS_CERT,
    NIMBUS_KEY,
    SUPERVISOR_CERT,
    SUPERVISOR_KEY,
    TOKENS_FILE,
)
from squall.daemons.state.acls import PASSWORD_ENV, ZkAuth
from support.paths import COMPOSE_CONF, COMPOSE_FILE

MOUNT = "/etc/squall/security"  # where docker-compose.yml mounts ./secrets
DAEMONS = ("nimbus", "supervisor-1", "supervisor-2")


def _mounts(service: dict[str, Any]) -> dict[str, str]:
    """container path -> host path of a service's bind mounts."""
    out = {}
    for volume in service.get("volumes", []):
        source, target, *_ = volume.split(":")
        out[target] = source
    return out


def _source(mounts: dict[str, str], path: str) -> str | None:
    """The host path a container path comes from (a mounted file, or one under a mounted dir)."""
    for target, source in mounts.items():
        if path == target:
            return source
        if path.startswith(target + "/"):
            return source + path[len(target):]
    return None


def test_compose_conf_and_compose_file_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    conf = read_yaml_file(COMPOSE_CONF)  # validated: known keys, right types
    assert conf["zookeeper.auth.user"] == DAEMON_USER
    assert not {"zookeeper.auth.password", "squall.token"} & conf.keys()  # no secret in the repository
    monkeypatch.delenv(PASSWORD_ENV, raising=False)
    with pytest.raises(ConfigError, match=PASSWORD_ENV):  # a user without a password is refused
        build_config(conf, user_file=False)
    monkeypatch.setenv(PASSWORD_ENV, "from-the-env-file-" + "x" * 24)
    full = build_config(conf, user_file=False)
    assert ZkAuth.from_conf(full).credential.user == DAEMON_USER
    assert insecure_settings(full) == []  # nothing announced as off

    services = yaml.safe_load(COMPOSE_FILE.read_text())["services"]
    files = {k: v for k, v in conf.items() if isinstance(v, str) and v.startswith(MOUNT + "/")}
    assert sorted(Path(v).name for v in files.values()) == sorted(
        [TOKENS_FILE, NIMBUS_CERT, NIMBUS_KEY, CA_CERT, SUPERVISOR_CERT, SUPERVISOR_KEY])
    for name in DAEMONS:
        service, mounts = services[name], _mounts(services[name])
        assert mounts["/etc/squall/squall.yaml"] == "./conf/compose.yaml"
        assert service["env_file"] == f"./secrets/{DAEMON_ENV_FILE}"  # token and ZooKeeper password
        assert "environment" not in service  # nothing secret inline
        for key, path in files.items():
            source = _source(mounts, path)
            if name == "nimbus" or key == "nimbus.tls.ca.file" or key.startswith("supervisor.tls."):
                assert source == f"./secrets/{Path(path).name}", (name, key)
            else:
                assert source is None, (name, key)  # supervisors: the CA and their own certificate
    assert "ports" not in services["zookeeper"]  # ZooKeeper stays on the compose network


def test_compose_locks_and_bounds_zookeeper_and_runs_workers_apart() -> None:
    services = yaml.safe_load(COMPOSE_FILE.read_text())["services"]
    zk = services["zookeeper"]["environment"]
    assert zk["ZOO_MAX_CLIENT_CNXNS"] == str(dev_zookeeper.MAX_CLIENT_CONNECTIONS)
    assert zk["ZOO_CFG_EXTRA"] == f"globalOutstandingLimit={dev_zookeeper.OUTSTANDING_LIMIT}"
    assert zk["JVMFLAGS"].split() == [f"-Xmx{dev_zookeeper.HEAP_MB}m",
                                      f"-Djute.maxbuffer={dev_zookeeper.MAX_REQUEST_BYTES}"]
    lock = services["zookeeper-lock"]
    assert lock["command"] == ["lock-zookeeper"] and lock["env_file"] == f"./secrets/{DAEMON_ENV_FILE}"
    assert _mounts(lock) == {"/etc/squall/squall.yaml": "./conf/compose.yaml"}  # no key, no token file
    assert services["nimbus"]["depends_on"] == {"zookeeper-lock": {"condition": "service_completed_successfully"}}
    # Supervisors run as root, and so start workers as users of their own (the default).
    conf = read_yaml_file(COMPOSE_CONF)
    assert services["supervisor-1"]["user"] == "root" and "supervisor.worker.user" not in conf
