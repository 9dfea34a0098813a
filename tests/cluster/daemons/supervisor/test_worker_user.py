"""``supervisor.worker.user``: workers run as an unprivileged system user (made here with
useradd, removed afterwards) and their user code cannot read the daemons' secrets."""
from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import psutil
import pytest

from squall.testing.cluster import ProcessCluster
from support.paths import WORKER_USER_TOPOLOGY

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


@pytest.fixture
def base():
    # pytest's tmp_path is 0700 root: the worker user could not even reach its own directory.
    path = Path(tempfile.mkdtemp(prefix="squall-worker-user-"))
    os.chmod(path, 0o711)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def reachable_python(user: str, base: Path) -> list[str]:
    """A command prefix under which ``user`` can run this interpreter: none, or (when the
    interpreter lives in a directory closed to others, such as /root on a dev box) a private
    mount namespace where that directory is an open tmpfs holding only the interpreter's tree."""
    probe = ["runuser", "-u", user, "--", sys.executable, "-c", "import squall"]
    if subprocess.run(probe, capture_output=True, timeout=60).returncode == 0:
        return []
    real = Path(os.path.realpath(sys.executable))
    closed = next((p for p in reversed(real.parents) if p != Path("/") and not p.stat().st_mode & 0o001), None)
    if closed is None or shutil.which("unshare") is None:
        pytest.skip(f"{user} cannot run {sys.executable}")
    keep = closed / real.relative_to(closed).parts[0]
    stash = base / "stash"
    stash.mkdir()
    script = ('set -e; mount --bind "$1" "$2"; mount -t tmpfs -o mode=755,size=1m tmpfs "$3"; '
              'mkdir -p "$1"; mount --bind "$2" "$1"; shift 3; exec "$@"')
    return ["unshare", "--mount", "sh", "-c", script, "sh", str(keep), str(stash), str(closed)]


def test_workers_run_as_the_worker_user_and_cannot_read_daemon_secrets(zk_server, zk_root, system_user, base):
    uid = pwd.getpwnam(system_user).pw_uid
    cluster = ProcessCluster(zk_server.port, zk_root, base / "cluster", supervisors=1, slots=1,
                             conf={"supervisor.worker.user": system_user},
                             supervisor_prefix=reachable_python(system_user, base))
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
