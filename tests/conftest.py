"""Shared fixtures: one real ZooKeeper per test session, a private root per test."""
from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException

from squall.config import build_config
from squall.testing.redis import RedisServer
from squall.testing.cluster import ProcessCluster
from squall.testing.zookeeper import (
    ZooKeeperServer,
    authenticated_client,
    daemon_auth_conf,
    ensure_zookeeper_installed,
)



def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--chaos-long", action="store_true", default=False,
                     help="run the long chaos suite (more ids, a 60 s ZooKeeper outage; several minutes)")
    parser.addoption("--state-chaos-long", action="store_true", default=False,
                     help="run the state chaos test with more events and kills (minutes)")


@pytest.fixture(autouse=True)
def _structlog_config_per_test() -> Iterator[None]:
    """Each test starts from the same logging set-up: a CLI run in-process (CliRunner)
    configures structlog for the whole process, e.g. with a WARNING filter that would hide
    later tests' info lines from ``capture_logs``."""
    saved = structlog.get_config()
    try:
        yield
    finally:
        structlog.configure(**saved)


# Short ticks so that session expiry and ephemeral cleanup happen within a test's patience.
ZK_TICK_MS = 500
ZK_MIN_SESSION_MS = 1000
# Session timeout daemons use in tests: a dead process's ephemeral nodes vanish this fast.
TEST_SESSION_TIMEOUT_MS = 6000
# The daemons' ZooKeeper credential of this test session: tests run secured, as clusters do.
ZK_AUTH = daemon_auth_conf()


@pytest.fixture(scope="session")
def zk_server() -> Iterator[ZooKeeperServer]:
    """A standalone ZooKeeper on a free 127.0.0.1 port, shared by the whole session."""
    ensure_zookeeper_installed()
    server = ZooKeeperServer(tick_time=ZK_TICK_MS, min_session_timeout=ZK_MIN_SESSION_MS)
    server.start(timeout=60)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """A real redis-server on a free 127.0.0.1 port, shared by the whole session."""
    server = RedisServer().start()
    try:
        yield server
    finally:
        server.stop()




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


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local[2] SparkSession (UI off, bound to 127.0.0.1) for the whole test session;
    its Python workers run this interpreter, which has squall."""
    import os
    import sys

    pytest.importorskip("pyspark")
    from pyspark.sql import SparkSession

    saved = {k: os.environ.get(k) for k in ("SPARK_LOCAL_IP", "PYSPARK_PYTHON")}
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (SparkSession.builder.master("local[2]").appName("squall-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "4")
               .config("spark.default.parallelism", "2")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
