"""Outside squall's root, on a ZooKeeper of this test's own: daemons say at start that a
client without credentials can write there, and ``squall lock-zookeeper`` closes it without
first printing that warning itself (it is about to make it untrue)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import structlog.testing
import yaml
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from squall.daemons.state import ClusterState
from squall.testing.zookeeper import daemon_auth_conf

pytestmark = pytest.mark.cluster

WARNING = "SECURITY OFF: ZooKeeper lets clients without credentials write outside squall's root"


def warnings_at_start(conf) -> list[dict]:
    with structlog.testing.capture_logs() as logs, ClusterState(conf):
        pass
    return [e for e in logs if e["event"].startswith(WARNING)]


def test_daemons_warn_until_lock_zookeeper_closes_whats_outside_the_root(own_zk_server, tmp_path: Path):
    zk = own_zk_server
    conf = {"zookeeper.servers": [zk.host], "zookeeper.port": zk.port, "zookeeper.root": "/apps/squall",
            **daemon_auth_conf()}
    other = KazooClient(hosts=own_zk_server.hosts, timeout=10)  # another application made /apps, open
    other.start(timeout=10)
    other.create("/apps")
    other.stop()
    other.close()
    (said,) = warnings_at_start(conf)
    assert said["open_nodes"] == ["/", "/apps", "/zookeeper", "/zookeeper/quota"]

    conf_file = tmp_path / "squall.yaml"
    conf_file.write_text(yaml.safe_dump(conf))
    env = {**os.environ, "SQUALL_CONF": str(conf_file)}

    def lock() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "squall.cli", "lock-zookeeper"], env=env, capture_output=True,
                              text=True, timeout=60)

    first = lock()
    assert first.returncode == 0, first.stderr
    assert "locked /, /apps, /zookeeper, /zookeeper/quota" in first.stdout
    assert WARNING not in first.stdout + first.stderr
    assert "nothing to lock" in lock().stdout  # again: nothing changes
    assert warnings_at_start(conf) == []

    anon = KazooClient(hosts=own_zk_server.hosts, timeout=10)
    anon.start(timeout=10)
    try:
        for path in ("/flood", "/apps/flood", "/zookeeper/flood", "/zookeeper/quota/flood", "/apps/squall/flood"):
            with pytest.raises(NoAuthError):
                anon.create(path, b"x" * 1000)
        assert sorted(anon.get_children("/")) == ["apps", "zookeeper"]  # reading stays open
    finally:
        anon.stop()
        anon.close()


def test_lock_zookeeper_needs_the_daemons_credential(own_zk_server, tmp_path: Path):
    conf_file = tmp_path / "squall.yaml"
    zk = own_zk_server
    conf_file.write_text(yaml.safe_dump({"zookeeper.servers": [zk.host], "zookeeper.port": zk.port}))
    env = {k: v for k, v in os.environ.items() if k != "SQUALL_ZOOKEEPER_PASSWORD"}
    result = subprocess.run([sys.executable, "-m", "squall.cli", "lock-zookeeper"], capture_output=True, text=True,
                            env={**env, "SQUALL_CONF": str(conf_file)}, timeout=60)
    assert result.returncode == 1 and "needs the daemons' credential" in result.stderr, result.stderr
