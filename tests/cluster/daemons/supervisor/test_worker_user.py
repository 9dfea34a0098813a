"""``supervisor.worker.user``: workers run as an unprivileged system user (made here with
useradd, removed afterwards) and their user code cannot read the daemons' secrets."""
from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import uuid

import psutil
import pytest

from squall.testing.cluster import ProcessCluster
from support.paths import WORKER_USER_TOPOLOGY
from support.worker_users import reachable_python

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None,
                       reason="needs root and useradd to make a system user"),
]

PROBE = WORKER_USER_TOPOLOGY / "probe.py"


@pytest.fixture
def system_user():
    name = f"sqw{uuid.uuid4().hex[:8]}"
    subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
                   check=True, capture_output=True, timeout=30)
    try:
        yield name
    finally:
        subprocess.run(["userdel", name], capture_output=True, timeout=30)


def test_workers_run_as_the_worker_user_and_cannot_read_daemon_secrets(zk_server, zk_root, system_user, open_tmp_path):
    base = open_tmp_path
    uid = pwd.getpwnam(system_user).pw_uid
    cluster = ProcessCluster(zk_server.port, zk_root, base / "cluster", supervisors=1, slots=1,
                             conf={"supervisor.worker.user": system_user},
                             supervisor_prefix=reachable_python(uid, pwd.getpwnam(system_user).pw_gid, base))
    os.chmod(base / "cluster", 0o711)
    secrets = [cluster.base / "supervisor-0.yaml", cluster.credentials.tokens_file]
    try:
        cluster.start()
        res = cluster.cli("submit", str(PROBE), "--name", "probe", "-c",
                          "test.probe.paths=[" + ",".join(str(p) for p in secrets) + "]")
        assert res.returncode == 0, res.stdout + res.stderr

        def probed() -> str | None:
            comps = cluster.client.topology("probe")["components"]
            err = next(c for c in comps if c["id"] == "probe").get("last_error")
            return err["error"] if err else None

        cluster.wait_for(lambda: probed() is not None, 60, "the probe's report")
        assert probed() == "probe: " + "; ".join(f"DENIED {p}" for p in secrets)
        pids = list(cluster.worker_pids().values())
        assert len(pids) == 1
        assert psutil.Process(pids[0]).uids().real == uid
        # What the worker falls back on without ZooKeeper is its own, and its alone.
        (handed,) = (cluster.supervisor_dir(0) / "workers").glob("*/assignment.json")
        assert (handed.stat().st_uid, handed.stat().st_mode & 0o777) == (uid, 0o600)
        cluster.wait_for(lambda: sum(c["emitted"] for c in cluster.client.topology("probe")["components"]) > 0,
                         60, "tuples emitted")
        # The supervisor itself is still root and kept its files to itself.
        assert (cluster.supervisor_dir(0) / "supervisor-id").stat().st_mode & 0o077 == 0
    finally:
        cluster.stop()
