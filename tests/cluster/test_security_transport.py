"""Worker traffic on a real secured cluster: CURVE between a topology's workers, a plain
ZeroMQ peer and a peer with another topology's keys refused and counted, the worker left
alone, and workers never holding the daemons' ZooKeeper credential."""
from __future__ import annotations

import json
from pathlib import Path

import psutil
import pytest
import zmq

from squall.config import build_config
from squall.daemons.nimbus.secrets import new_topology_secrets
from squall.daemons.state import ClusterState
from squall.messaging import codec
from squall.testing.cluster import ProcessCluster
from support.paths import CLUSTER_TOPOLOGIES

pytestmark = pytest.mark.cluster

TOPOLOGY = CLUSTER_TOPOLOGIES / "cluster_wordcount.py"
UNKNOWN_TASK = 99_999  # a frame for it, if delivered, would show as dropped_unknown_task


@pytest.fixture
def cluster(start_cluster):
    return start_cluster(supervisors=1, slots=2)


def _acked(out: Path) -> int:
    return sum(len(f.read_text().split()) for f in out.glob("acked-*.txt"))


def _workers_by_port(cluster: ProcessCluster) -> dict[int, int]:
    """port -> pid of the live workers, from their local heartbeats."""
    out = {}
    for wid, pid in cluster.worker_pids(0).items():
        hb = cluster.supervisor_dir(0) / "workers" / wid / "heartbeat.json"
        try:
            out[json.loads(hb.read_text())["port"]] = pid
        except (OSError, ValueError):
            continue
    return out


def _push(zctx: zmq.Context, port: int, keys=None, server_key: str | None = None) -> zmq.Socket:
    sock = zctx.socket(zmq.PUSH)
    sock.setsockopt(zmq.LINGER, 0)
    if keys is not None:
        sock.curve_secretkey = keys.curve_secret.encode()
        sock.curve_publickey = keys.curve_public.encode()
        sock.curve_serverkey = (server_key or keys.curve_public).encode()
    sock.setsockopt(zmq.SNDTIMEO, 10_000)  # queued once the pipe exists; never an endless wait
    sock.connect(f"tcp://127.0.0.1:{port}")
    sock.send(codec.encode_tasks([(UNKNOWN_TASK, b"injected")]))
    return sock


def test_plain_and_foreign_key_peers_are_refused_and_the_worker_runs_on(cluster, tmp_path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    res = cluster.cli("submit", str(TOPOLOGY), "--name", "sec", "-c", "topology.workers=2",
                      "-c", f"test.output.dir={out}", "-c", "test.sentences=100000", "-c", "test.rate=200")
    assert res.returncode == 0, res.stdout + res.stderr
    cluster.wait_for(lambda: len(_workers_by_port(cluster)) == 2 and _acked(out) > 20, 60,
                     "two workers exchanging tuples over CURVE")
    workers = _workers_by_port(cluster)
    port, pid = sorted(workers.items())[0]

    state = ClusterState(build_config(cluster.common, user_file=False)).start()
    try:
        topology_id = next(i for i, t in state.topologies().items() if t.name == "sec")
        own = state.topology_secrets(topology_id)
        other = new_topology_secrets()  # another topology's keys

        zctx = zmq.Context()
        socks = [_push(zctx, port),                                   # plain ZeroMQ
                 _push(zctx, port, other),                            # another topology's keys
                 _push(zctx, port, other, server_key=own.curve_public)]  # ... knowing our server key
        try:
            def transport() -> dict:  # what `squall status --json` shows of the worker
                return next(w for w in cluster.client.topology("sec")["workers"] if w["port"] == port)["transport"]

            cluster.wait_for(lambda: transport().get("refused_connections", 0) >= 3
                             and transport().get("refused_keys", 0) >= 1, 30,
                             "the refusals counted in the worker's stats")
        finally:
            for sock in socks:
                sock.close()
            zctx.term()
        stats = transport()
        assert stats["dropped_unknown_task"] == 0 and stats["bad_frames"] == 0  # nothing delivered
        acked_then = _acked(out)
        cluster.wait_for(lambda: _acked(out) > acked_then + 20, 30, "processing continuing")
        assert _workers_by_port(cluster) == workers  # same workers, same pids
        assert workers[port] == pid

        # Workers hold their topology's credential only, never the daemons'.
        password = cluster.common["zookeeper.auth.password"]
        worker_conf = cluster.supervisor_dir(0) / "supervisor-conf.yaml"
        assert password not in worker_conf.read_text()
        for wpid in workers.values():
            environ = Path(f"/proc/{wpid}/environ").read_bytes()
            assert password.encode() not in environ
        assert not list((cluster.supervisor_dir(0) / "workers").glob("*/credentials.json"))

        # The worker listens on the supervisor's advertised host only.
        proc = psutil.Process(pid)
        conns = getattr(proc, "net_connections", proc.connections)(kind="tcp")
        listening = {c.laddr for c in conns if c.status == psutil.CONN_LISTEN}
        assert ("127.0.0.1", port) in listening and {ip for ip, _ in listening} == {"127.0.0.1"}
    finally:
        state.close()
