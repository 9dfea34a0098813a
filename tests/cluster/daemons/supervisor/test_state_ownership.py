"""Checkpointed state belongs to a topology instance and its owner, not to a name: alice's
stateful ``ledger`` is killed, bob submits his own ``ledger``: it starts empty, its workers
run as another user than alice's did, and cannot read her state files (0600, hers). Asked
to (``--carry-state``), an owner gets their own earlier state back, and only their own.
Embedded state, workers as users of their own (a supervisor running as root)."""
from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from squall.testing.cluster import ProcessCluster
from support.paths import ISOLATION_TOPOLOGIES
from support.worker_users import reachable_python

pytestmark = pytest.mark.cluster

FIRST_UID = 1900000000


def squall(cluster: ProcessCluster, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SQUALL_CONF": str(cluster.client_conf), "SQUALL_TOKEN": token}
    return subprocess.run([sys.executable, "-m", "squall.cli", *args], env=env, capture_output=True, text=True,
                          timeout=60)


def found(cluster: ProcessCluster) -> list[str]:
    """What the running ``ledger``'s init_state found."""
    errs = cluster.client.topology_errors("ledger")["errors"]
    return [e["error"] for e in errs if e["error"].startswith("found ")]


def run_ledger(cluster: ProcessCluster, token: str, tag: str, *extra: str) -> str:
    """Submit ``ledger`` as the owner of ``token``; what its init_state found."""
    out = squall(cluster, token, "submit", str(ISOLATION_TOPOLOGIES / "ledger.py"), "-c", f"test.ledger.tag={tag}",
                 "-c", "topology.state.checkpoint.interval.ms=200", *extra)
    assert out.returncode == 0, out.stdout + out.stderr
    return cluster.wait_for(lambda: found(cluster), 90, f"{tag}'s ledger starting")[0]


def committed_keys(path: Path) -> int:
    """Keys of a state file with a committed checkpoint (0 before the first commit)."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        committed = db.execute("SELECT value FROM meta WHERE name = 'committed'").fetchone()
        return db.execute("SELECT count(*) FROM kv").fetchone()[0] if committed else 0


def kill_ledger(cluster: ProcessCluster, token: str) -> None:
    assert squall(cluster, token, "kill", "ledger", "--wait", "0").returncode == 0
    cluster.wait_for(lambda: not [t for t in cluster.client.topologies() if t["name"] == "ledger"], 60,
                     "ledger gone")


def test_a_reused_name_starts_empty_and_state_stays_its_owners(zk_server, zk_root, open_tmp_path: Path):
    base = open_tmp_path
    cluster = ProcessCluster(zk_server.port, zk_root, base / "cluster", supervisors=1, slots=2,
                             conf={"supervisor.worker.user": None},
                             supervisor_prefix=reachable_python(FIRST_UID, FIRST_UID, base))
    os.chmod(base / "cluster", 0o711)
    state_root = cluster.supervisor_dir(0) / "state"
    alice, bob, carol = (cluster.credentials.add_user(u, "user") for u in ("alice", "bob", "carol"))
    with cluster:
        assert run_ledger(cluster, alice, "alice") == "found []"
        cluster.wait_for(lambda: len(list(state_root.glob("*/ledger.0.sqlite"))) == 1, 60, "alice's state file")
        (alice_file,) = state_root.glob("*/ledger.0.sqlite")
        cluster.wait_for(lambda: committed_keys(alice_file), 60, "alice's state committed")
        kill_ledger(cluster, alice)

        # bob's ledger: empty, another user, alice's files out of his reach
        assert run_ledger(cluster, bob, "bob") == "found []"
        files = {p: p.stat() for p in state_root.glob("*/*.sqlite")}
        assert len({p.parent for p in files}) == 2  # a directory per topology instance
        alice_uid = files[alice_file].st_uid
        bob_files = [p for p in files if p.parent != alice_file.parent]
        assert {files[p].st_uid for p in bob_files} != {alice_uid} and alice_uid >= FIRST_UID
        for path, info in files.items():
            assert info.st_mode & 0o777 == 0o600, path
            assert path.parent.stat().st_mode & 0o777 == 0o700 and path.parent.stat().st_uid == info.st_uid
        kill_ledger(cluster, bob)

        # carol asks for state she never had: refused; alice asks for hers: hers, not bob's
        refused = squall(cluster, carol, "submit", str(ISOLATION_TOPOLOGIES / "ledger.py"), "--carry-state")
        assert refused.returncode == 1 and "only one's own state" in refused.stderr, refused.stderr
        carried = run_ledger(cluster, alice, "alice", "--carry-state")
        assert "alice-" in carried and "bob-" not in carried, carried
