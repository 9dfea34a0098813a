"""Real servers for the tiers that need them (cluster, spark, ui), as pytest fixtures.

A tier's conftest.py imports the fixtures it uses from here; the unit tier imports none, so a
unit test that asks for a server fails at once with "fixture not found". ZooKeeper and Redis
are started by the first test that asks for them and shared by the rest of the run, whichever
tiers it covers; they stop when the run ends.
"""
from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException

from squall.config import build_config
from squall.testing.cluster import ProcessCluster
from squall.testing.redis import RedisServer
from squall.testing.zookeeper import (
    ZooKeeperServer,
    authenticated_client,
    daemon_auth_conf,
    ensure_zookeeper_installed,
)

# Short ticks so that session expiry and ephemeral cleanup happen within a test's patience.
ZK_TICK_MS = 500
ZK_MIN_SESSION_MS = 1000
# Session timeout daemons use in tests: a dead process's ephemeral nodes vanish this fast.
TEST_SESSION_TIMEOUT_MS = 6000
# The daemons' ZooKeeper credential of this test run: tests run secured, as clusters do.
ZK_AUTH = daemon_auth_conf()

S = TypeVar("S")
_RUNNING: pytest.StashKey[dict[str, Any]] = pytest.StashKey()


def _one_per_run(config: pytest.Config, name: str, start: Callable[[], S], stop: Callable[[S], Any]) -> S:
    """The run's one server called ``name``: started now if no tier has started it yet, and
    stopped when the run ends (a session fixture defined in several conftest files would
    otherwise start one per tier)."""
    running = config.stash.setdefault(_RUNNING, {})
    if name not in running:
        server = start()
        running[name] = server
        config.add_cleanup(lambda: stop(server))
    return running[name]


def _start_zookeeper() -> ZooKeeperServer:
    ensure_zookeeper_installed()
    server = ZooKeeperServer(tick_time=ZK_TICK_MS, min_session_timeout=ZK_MIN_SESSION_MS)
    server.start(timeout=60)
    return server


@pytest.fixture
def own_zk_server() -> Iterator[ZooKeeperServer]:
    """A ZooKeeper of this test's own, as it comes, for a test that locks it (the shared
    one's root must stay open to the other tests)."""
    server = ZooKeeperServer(tick_time=ZK_TICK_MS, min_session_timeout=ZK_MIN_SESSION_MS)
    server.start(timeout=60)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def zk_server(pytestconfig: pytest.Config) -> ZooKeeperServer:
    """A standalone ZooKeeper on a free 127.0.0.1 port, shared by the whole run."""
    return _one_per_run(pytestconfig, "zookeeper", _start_zookeeper, lambda server: server.stop())


@pytest.fixture(scope="session")
def redis_server(pytestconfig: pytest.Config) -> RedisServer:
    """A real redis-server on a free 127.0.0.1 port, shared by the whole run."""
    return _one_per_run(pytestconfig, "redis", lambda: RedisServer().start(), lambda server: server.stop())


@pytest.fixture
def zk_client(zk_server: ZooKeeperServer) -> Iterator[KazooClient]:
    """A raw kazoo client (no chroot) for poking at nodes directly, holding the daemons'
    credential (nodes it creates itself are open)."""
    client = authenticated_client(zk_server.hosts, ZK_AUTH)
    try:
        yield client
    finally:
        client.stop()
        client.close()


@pytest.fixture
def zk_root(zk_server: ZooKeeperServer) -> Iterator[str]:
    """A root path of this test's own ("/t-<hex>"), deleted afterwards."""
    root = f"/t-{uuid.uuid4().hex[:12]}"
    yield root
    client = authenticated_client(zk_server.hosts, ZK_AUTH)
    try:
        client.delete(root, recursive=True)
    except KazooException:
        pass  # best effort (a daemon may still be writing); the root is unique anyway
    finally:
        client.stop()
        client.close()


@pytest.fixture
def cluster_conf(zk_server: ZooKeeperServer, zk_root: str) -> dict[str, Any]:
    """A full squall conf pointing at the test server under this test's root."""
    return build_config({
        "zookeeper.servers": [zk_server.host],
        "zookeeper.port": zk_server.port,
        "zookeeper.root": zk_root,
        "zookeeper.session.timeout.ms": TEST_SESSION_TIMEOUT_MS,
        "zookeeper.connection.timeout.ms": 10000,
        **ZK_AUTH,
    }, user_file=False)


@pytest.fixture
def start_cluster(zk_server: ZooKeeperServer, zk_root: str, tmp_path) -> Iterator[Any]:
    """``start_cluster(supervisors, slots)``: a started ProcessCluster (nimbus, supervisors,
    their workers) under this test's root, stopped by PID afterwards."""
    made: list[ProcessCluster] = []

    def start(supervisors: int = 2, slots: int = 2) -> ProcessCluster:
        cluster = ProcessCluster(zk_server.port, zk_root, tmp_path / f"cluster-{len(made)}",
                                 supervisors=supervisors, slots=slots)
        made.append(cluster)
        return cluster.start()

    try:
        yield start
    finally:
        for cluster in made:
            cluster.stop()
