"""Hostile tenants against real daemons: a topology that snoops for secrets, one whose child
ignores SIGTERM and leaves its session, one that hogs memory, one stuck in prepare().

Each asserts what a user would notice: the snooper finds nothing, the slot is free for the
next topology at once, the memory limit holds and the violation shows in ``squall status``,
the stuck worker is reported and relaunched.
"""
from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from squall.daemons.state.records import WORKER_COMPONENT
from squall.state.stores import embedded_path, namespace
from squall.testing.cluster import ProcessCluster
from support.daemon_logs import log_events
from support.paths import ISOLATION_TOPOLOGIES
from support.worker_users import reachable_python

pytestmark = pytest.mark.cluster

FIRST_UID = 1900000000  # supervisor.worker.uids' default first id


def events(cluster: ProcessCluster, name: str) -> list[dict[str, Any]]:
    """The supervisor's log events called ``name``."""
    return log_events(cluster.base / "supervisor-0.log", name)


def launches(cluster: ProcessCluster, topology_id: str) -> list[dict[str, Any]]:
    """The supervisor's "worker launched" events for one topology."""
    return [e for e in events(cluster, "worker launched") if e.get("topology") == topology_id]


def emitted(cluster: ProcessCluster, name: str) -> int:
    return sum(c["emitted"] for c in cluster.client.topology(name)["components"])


def errors_of(cluster: ProcessCluster, name: str, component: str) -> list[str]:
    """Error texts of one component, oldest first (what `squall errors` and the UI read)."""
    errs = cluster.client.topology_errors(name)["errors"]
    return [e["error"] for e in reversed(errs) if e["component"] == component]


def submit(cluster: ProcessCluster, file: str, name: str, *conf: str) -> str:
    args = ["submit", str(ISOLATION_TOPOLOGIES / file), "--name", name]
    for pair in conf:
        args += ["-c", pair]
    res = cluster.cli(*args)
    assert res.returncode == 0, res.stdout + res.stderr
    return cluster.client.topology(name)["id"]


# --- secrets ---------------------------------------------------------------------------------

def test_a_topology_finds_none_of_the_daemons_secrets_nor_another_topologys_files(zk_server, zk_root, open_tmp_path):
    base = open_tmp_path
    # The supervisor as an operator runs it: root, supervisor.worker.user unset.
    cluster = ProcessCluster(zk_server.port, zk_root, base / "cluster", supervisors=1, slots=2,
                             conf={"supervisor.worker.user": None},
                             supervisor_prefix=reachable_python(FIRST_UID, FIRST_UID, base))
    os.chmod(base / "cluster", 0o711)
    local = cluster.supervisor_dir(0)
    try:
        cluster.start()
        victim_id = submit(cluster, "victim.py", "victim")
        secret_files = cluster.wait_for(lambda: list(local.glob("workers/*/victim-secret.txt")), 60,
                                        "the victim's secret file")
        # state goes by the namespace nimbus gave it: the topology's id
        state_dir = embedded_path(local / "state", namespace(victim_id, "x", 0)).parent
        state_files = cluster.wait_for(lambda: list(state_dir.glob("*.sqlite")), 60, "the victim's state")
        victim_dir = secret_files[0].parent
        (victim_pid,) = cluster.worker_pids().values()
        sec = cluster.credentials.directory
        zk_data = sorted(p for p in (zk_server.work_dir / "data").rglob("*") if p.is_file())
        paths = [
            cluster.client_conf,  # the admin token
            cluster.base / "supervisor-0.yaml",  # the supervisor token, the ZooKeeper password
            cluster.base / "nimbus.yaml",
            sec / "tokens.yaml", sec / "ca.key", sec / "nimbus.key", sec / "supervisor.key",
            local / "supervisor-conf.yaml", local / "supervisor-state.json",
            *zk_data,  # every topology's ZooKeeper password and CURVE key
            victim_dir / "victim-secret.txt", victim_dir / "squall.yaml", victim_dir / "worker.log",
            local / "topologies" / victim_id / "topology.bin", local / "topologies" / victim_id / "conf.json",
            *state_files,
            Path(f"/proc/{victim_pid}/environ"),
            Path(f"/proc/{cluster.supervisors[0].pid}/environ"),
            Path(f"/proc/{cluster.nimbus.pid}/environ"),
        ]
        assert zk_data and all(p.exists() for p in paths)
        dirs = [local, local / "workers", local / "topologies", local / "state", sec, zk_server.work_dir]
        submit(cluster, "snoop.py", "snoop", "test.snoop.paths=[" + ", ".join(map(str, paths)) + "]",
               "test.snoop.dirs=[" + ", ".join(map(str, dirs)) + "]", f"test.snoop.link_target={sec / 'ca.key'}")
        report = cluster.wait_for(lambda: errors_of(cluster, "snoop", "snoop"), 90, "the snooper's report")[-1]
        lines = report.splitlines()[1:]
        assert len(lines) == len(paths) + len(dirs) + 1, report
        found = [line for line in lines if not line.startswith(("DENIED ", "LINKED "))]
        assert found == [], "the snooping topology found:\n" + "\n".join(found)
        # It ran (as a user of its own, not the victim's, not root) and could only fail to read.
        cluster.wait_for(lambda: emitted(cluster, "snoop") > 0, 60, "the snooper running")
        uids = {psutil.Process(pid).uids().real for pid in cluster.worker_pids().values()}
        assert len(uids) == 2 and min(uids) >= FIRST_UID, uids
        # Its worker log is now a link to the CA key: `squall logs` must not serve the key.
        assert "LINKED " in lines[-1], report
        logs = cluster.cli("logs", "snoop", "-n", "50")
        assert "PRIVATE KEY" not in logs.stdout + logs.stderr
    finally:
        cluster.stop()


# --- processes that outlive their worker --------------------------------------------------------

@pytest.mark.parametrize("cgroups", ["auto", "off"])  # off: the process tree, the supervisor as subreaper
def test_a_child_that_ignores_sigterm_and_leaves_its_session_ends_with_the_topology(zk_server, zk_root,
                                                                                    tmp_path, cgroups):
    cluster = ProcessCluster(zk_server.port, zk_root, tmp_path / "cluster", supervisors=1, slots=1,
                             conf={"supervisor.cgroup.dir": cgroups})
    try:
        cluster.start()
        submit(cluster, "forker.py", "forker")
        said = cluster.wait_for(lambda: errors_of(cluster, "forker", "forker"), 60, "the fork reported")
        child = psutil.Process(int(said[-1].split()[-1]))
        assert child.is_running() and os.getsid(child.pid) == child.pid  # its own session
        killed = time.monotonic()
        res = cluster.cli("kill", "forker", "--wait", "0")
        assert res.returncode == 0, res.stderr
        cluster.wait_for(lambda: not child.is_running() or child.status() == psutil.STATUS_ZOMBIE, 20,
                         "the forked child to end")
        # The one slot (and its port, which the child held) takes the next topology at once.
        submit(cluster, "plain.py", "plain")
        cluster.wait_for(lambda: emitted(cluster, "plain") > 0, 30, "the next topology running on the slot")
        took = time.monotonic() - killed
        assert took < 30, took
        (started,) = events(cluster, "supervisor starting")
        assert started["containment"].startswith("process tree" if cgroups == "off" else "cgroup"), started
        ended = [e for e in events(cluster, "worker signalled") if e["reason"] == "processes the worker left behind"]
        assert ended and ended[0]["signal"] == "SIGKILL", events(cluster, "worker signalled")
    finally:
        cluster.stop()


# --- memory -----------------------------------------------------------------------------------

def test_a_worker_over_its_memory_limit_is_killed_and_the_violation_is_shown(zk_server, zk_root, tmp_path):
    limit = 200
    cluster = ProcessCluster(zk_server.port, zk_root, tmp_path / "cluster", supervisors=1, slots=1,
                             conf={"worker.memory.max.mb": limit})
    try:
        cluster.start()
        hog_id = submit(cluster, "hog.py", "hog", "test.hog.max.mb=600")
        violations = cluster.wait_for(lambda: errors_of(cluster, "hog", WORKER_COMPONENT), 90,
                                      "a memory violation reported")
        text = violations[-1]
        assert text.startswith("memory violation:"), text
        used = int(re.search(r"used (\d+) MB", text).group(1))
        assert limit < used < 2 * limit, text  # caught within a second of growth (100 MB/s)
        status = cluster.cli("status", "hog")  # a young topology, but the error is the news: no wait for rates
        assert "memory violation" in status.stdout, status.stdout
        assert "waiting up to" not in status.stderr, status.stderr
        # What the web UI shows under Workers (the hog may have been ended again since).
        assert cluster.client.topology("hog")["worker_error"]["error"].startswith("memory violation:")
        cluster.wait_for(lambda: len(launches(cluster, hog_id)) >= 2, 60, "the worker relaunched")
    finally:
        cluster.stop()


# --- a start that never ends ----------------------------------------------------------------------

def test_a_worker_stuck_in_prepare_is_reported_and_relaunched(zk_server, zk_root, tmp_path):
    cluster = ProcessCluster(zk_server.port, zk_root, tmp_path / "cluster", supervisors=1, slots=1,
                             conf={"supervisor.worker.start.timeout.secs": 8})
    try:
        cluster.start()
        stuck_id = submit(cluster, "stuck.py", "stuck")
        said = cluster.wait_for(lambda: errors_of(cluster, "stuck", WORKER_COMPONENT), 60,
                                "the stuck start reported")
        assert said[-1].startswith("start timeout:") and "prepare()" in said[-1], said
        cluster.wait_for(lambda: len(launches(cluster, stuck_id)) >= 2, 30, "the worker relaunched")
        assert "start timeout" in cluster.cli("status", "stuck").stdout
    finally:
        cluster.stop()
