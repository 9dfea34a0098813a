"""Supervisors authenticate as themselves, against a real cluster: a report for a made-up
supervisor, or for a real one without its key, is refused; a replayed report is refused; so
is one whose counters run backwards or outrun any rate (one forged beat made a topology show
3,000,000,000,000 emitted); and a SIGSTOPped supervisor stops looking alive although someone
keeps posting reports for it. The attacker holds the supervisor API token (every supervisor
and nimbus do) but not a supervisor's own key."""
from __future__ import annotations

import hashlib
import http.client
import json
import os
import signal
import time
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from squall.daemons.nimbus.access import ApiAccess
from squall.daemons.reports import ReportedBeat, SupervisorReport
from squall.daemons.state import ClusterState, SupervisorInfo
from squall.testing.cluster import ProcessCluster
from support.paths import ISOLATION_TOPOLOGIES

pytestmark = pytest.mark.cluster

FORGED = 3_000_000_000_000


def post(cluster: ProcessCluster, supervisor_id: str, report: SupervisorReport) -> tuple[int, dict[str, Any]]:
    """POST a report with the supervisor API token, as a supervisor does."""
    access = ApiAccess.from_conf(cluster.credentials.client_conf(cluster.credentials.supervisor_token))
    conn = http.client.HTTPSConnection("127.0.0.1", int(cluster.common["nimbus.port"]), timeout=10,
                                       context=access.ssl_context)
    try:
        conn.request("POST", f"/api/v1/supervisors/{urllib.parse.quote(supervisor_id, safe='')}/report",
                     body=report.to_json(), headers={"Content-Type": "application/json", **access.headers()})
        reply = conn.getresponse()
        return reply.status, json.loads(reply.read() or b"{}")
    finally:
        conn.close()


def forged(supervisor_id: str, topology_id: str, port: int, counters: int, seq: int = 1, epoch: int = 0,
           key: str = "", uptime: float = 5.0) -> SupervisorReport:
    beat = ReportedBeat(topology_id=topology_id, node=supervisor_id, port=port, time=time.time(),
                        executors=[(1, 1)], uptime=uptime, counters={(1, 1): (counters, counters, 0, 0)})
    signed = {"epoch": epoch, "seq": seq, "key": key} if epoch else {}  # a forger has no key to sign with
    return SupervisorReport(supervisor_id, time.time(), [beat], **signed)


def emitted(cluster: ProcessCluster, name: str) -> int:
    return sum(c.get("emitted") or 0 for c in cluster.client.topology(name)["components"])


def test_reports_must_come_from_the_supervisor_they_name(zk_server, zk_root, tmp_path: Path):
    # ZooKeeper sessions that outlive a stopped supervisor by far: only its silence can tell.
    cluster = ProcessCluster(zk_server.port, zk_root, tmp_path / "cluster", supervisors=2, slots=2,
                             conf={"zookeeper.session.timeout.ms": 40000})
    with cluster:
        res = cluster.cli("submit", str(ISOLATION_TOPOLOGIES / "plain.py"), "--name", "plain", "-c",
                          "topology.workers=1")
        assert res.returncode == 0, res.stderr
        cluster.wait_for(lambda: emitted(cluster, "plain") > 0, 60, "the topology running")
        topology_id = cluster.client.topology("plain")["id"]
        (worker,) = cluster.client.topology("plain")["workers"]
        victim, port = worker["node"], worker["port"]

        # A made-up supervisor, and a real one without its key: refused, nothing counted.
        assert post(cluster, "made-up", forged("made-up", topology_id, port, FORGED))[0] == 403
        assert post(cluster, victim, forged(victim, topology_id, port, FORGED, seq=10 ** 9))[0] == 403
        assert emitted(cluster, "plain") < FORGED

        # A supervisor registered with its own key (as the daemons' credential can): its
        # reports go through once each; a replay, or counters beyond any rate, do not.
        key = "k" * 64
        started = time.time()
        with ClusterState(cluster.common) as state:
            state.register_supervisor(SupervisorInfo(
                id="fake", host="127.0.0.1", ports=[7000], started_at=started, time=started,
                report_key=hashlib.sha256(key.encode()).hexdigest()))
            epoch = int(started * 1000)
            first = forged("fake", topology_id, 7000, 10, seq=1, epoch=epoch, key=key)
            assert post(cluster, "fake", first)[0] == 200
            assert post(cluster, "fake", first)[0] == 409  # the same report again
            status, reply = post(cluster, "fake", forged("fake", topology_id, 7000, FORGED, seq=2, epoch=epoch,
                                                          key=key))
            assert status == 400 and "more than" in reply["error"], reply
            status, reply = post(cluster, "fake", forged("fake", topology_id, 7000, 5, seq=3, epoch=epoch, key=key))
            assert status == 400 and "backwards" in reply["error"], reply
            state.unregister_supervisor("fake")
        assert emitted(cluster, "plain") < FORGED
        assert cluster.client.cluster()["api"]["refused"].get("forbidden", 0) >= 2

        # The victim supervisor stopped: posting for it keeps nothing alive; it goes silent
        # (while its ZooKeeper node lives on) and its worker moves to the other supervisor.
        index = next(i for i, p in enumerate(cluster.supervisors)
                     if p is not None and victim in (cluster.supervisor_dir(i) / "supervisor-id").read_text())
        pid = cluster.supervisors[index].pid
        os.kill(pid, signal.SIGSTOP)
        try:
            deadline = time.monotonic() + 40
            while time.monotonic() < deadline:
                post(cluster, victim, forged(victim, topology_id, port, 1, seq=int(time.time() * 1000)))
                rows = {s["id"]: s for s in cluster.client.cluster()["supervisors"]}
                age = rows.get(victim, {}).get("heartbeat_age")
                if age is not None and age > float(cluster.common["nimbus.supervisor.timeout.secs"]) + 1:
                    break
                time.sleep(0.5)
            assert age is not None and age > float(cluster.common["nimbus.supervisor.timeout.secs"]), rows
            cluster.wait_for(lambda: [w["node"] for w in cluster.client.topology("plain")["workers"]] not in
                             ([], [victim]), 40, "the worker moved off the stopped supervisor")
        finally:
            os.kill(pid, signal.SIGCONT)
