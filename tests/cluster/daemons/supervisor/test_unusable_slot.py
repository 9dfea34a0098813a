"""A slot whose port another process holds: its worker cannot bind, the supervisor (having
looked at the port itself) reports the slot unusable, nimbus moves the executors to another
slot within nimbus.supervisor.timeout.secs, `squall status` and /cluster say which slot and
why, and the slot comes back once the port is free."""
from __future__ import annotations

import subprocess
import sys
from datetime import datetime

import pytest
import yaml

from squall.testing.cluster import FAST, ProcessCluster
from support.daemon_logs import log_events
from support.paths import ISOLATION_TOPOLOGIES

pytestmark = pytest.mark.cluster

HOLD = "import socket, sys, time; s = socket.socket(); s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(); " \
       "print('held', flush=True); time.sleep(600)"


def when(entry):
    return datetime.fromisoformat(entry["timestamp"]).timestamp()


def placed(cluster, name):
    """The (port of every executor of the topology), once it runs somewhere."""
    st = cluster.client.topology(name)
    return {ex["port"] for c in st["components"] for ex in c["executors"]}


@pytest.mark.timeout(300)
def test_a_slot_held_by_another_process_is_left_until_free_and_its_executors_move(zk_server, zk_root, tmp_path):
    cluster = ProcessCluster(zk_server.port, zk_root, tmp_path / "cluster", supervisors=1, slots=2)
    holder = None
    try:
        cluster.start()
        held, spare = sorted(yaml.safe_load((cluster.base / "supervisor-0.yaml").read_text())["supervisor.slots.ports"])
        holder = subprocess.Popen([sys.executable, "-c", HOLD, str(held)], stdout=subprocess.PIPE, text=True)
        assert holder.stdout.readline().strip() == "held"
        res = cluster.cli("submit", str(ISOLATION_TOPOLOGIES / "plain.py"), "--name", "plain", "-c",
                          "topology.workers=1")
        assert res.returncode == 0, res.stdout + res.stderr
        cluster.wait_for(lambda: placed(cluster, "plain") == {spare} and
                         cluster.client.topology("plain")["components"][0].get("emitted", 0) > 0,
                         120, "the executors moved to the free slot and running")
        sup_log, nimbus_log = cluster.base / "supervisor-0.log", cluster.base / "nimbus.log"
        (unusable,) = [e for e in log_events(sup_log, "slot state changed") if e["state"] == "UNUSABLE"]
        assert unusable["port"] == held
        moved = [e for e in log_events(nimbus_log, "assignment written") if e["moved"] > 0]
        assert moved and 0 <= when(moved[0]) - when(unusable) <= FAST["nimbus.supervisor.timeout.secs"], \
            (unusable, moved)
        (row,) = cluster.client.cluster()["supervisors"]
        assert set(row["unusable"]) == {str(held)} and "held by another process" in row["unusable"][str(held)]
        assert row["free"] == 0  # the unusable port is not free
        status = cluster.cli("status", "plain")
        assert "unusable slots" in status.stdout and f"127.0.0.1:{held}" in status.stdout, status.stdout
        assert "is held by another process" in status.stdout, status.stdout

        holder.kill()
        holder.wait()
        holder = None
        cluster.wait_for(lambda: cluster.client.cluster()["supervisors"][0]["unusable"] == {}, 30,
                         "the slot back once its port is free")
        assert cluster.client.cluster()["supervisors"][0]["free"] == 1
        assert placed(cluster, "plain") == {spare}  # a healthy topology stays where it is
    finally:
        if holder is not None:
            holder.kill()
            holder.wait()
        cluster.stop()
