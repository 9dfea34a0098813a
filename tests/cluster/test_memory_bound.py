"""Bounded memory, small by default: a spout flooding a bolt about ten times slower, in two
worker processes of a real cluster, keeps every worker under 150 MB and loses nothing (and
hostile frames sent to both slot ports meanwhile are counted in ``squall status`` and end
neither worker). A peer that ignores backpressure is tested in tests/unit/runtime/test_receive_bound.py."""
import json
import time

import msgpack
import psutil
import pytest

from squall.config import build_config
from squall.daemons.state import ClusterState
from squall.messaging import codec
from squall.messaging.curve import CurveKeys
from squall.testing.wire import raw_sender
from support.paths import CLUSTER_TOPOLOGIES

TOPOLOGY = CLUSTER_TOPOLOGIES / "slow_sink.py"
LIMIT_MB = 150
RUN_SECS = 30


def _status(cluster):
    res = cluster.cli("status", "probe", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    return json.loads(res.stdout)


def _components(cluster):
    return {c["id"]: c for c in _status(cluster)["components"]}


def _group(*group):
    return msgpack.packb([list(group)], use_bin_type=True)


# Task ids of the probe: flood (the spout) 1, slow (the bolt) 2; no ackers. None of these
# may reach a component; each is dropped and counted.
FLOOD, SLOW = 1, 2
HOSTILE = [
    b"", b"\x00", b"\x07garbage", bytes((codec.VERSION, 99)) + b"\x90",
    bytes((codec.VERSION, codec.KIND_TASKS)) + b"\x91" * 5000 + b"\xc0",
    codec.encode_tasks([(999, _group(FLOOD, "default", [[1, "x"]], None))]),
    codec.encode_tasks([(SLOW, b"\xc1 not msgpack")]),
    codec.encode_tasks([(SLOW, _group(77, "default", [[1, "x"]], None))]),
    codec.encode_tasks([(SLOW, _group(SLOW, "default", [[1]], None))]),
    codec.encode_tasks([(SLOW, _group(FLOOD, "default", [[1]], None))]),
    codec.encode_tasks([(SLOW, _group(FLOOD, "default", [[1, "x"]], [{"a": 1}]))]),
    codec.encode_tasks([(SLOW, _group(FLOOD, "__ack_ack", [[[1, 2]]], None))]),
    codec.encode_tasks([(FLOOD, _group(SLOW, "__ack_ack", [[[1, 2]]], None))]),
    codec.encode_tasks([(FLOOD, _group(SLOW, "__ack_ack", [[[[1]]]], None))]),  # unhashable roots
    codec.encode_tasks([(FLOOD, _group(FLOOD, "__ack_fail", [[["x"]]], None))]),
    codec.encode_control(codec.KIND_BACKPRESSURE, {FLOOD: True, SLOW: True}),
    bytes((codec.VERSION, codec.KIND_BACKPRESSURE)) + msgpack.packb({1: "yes"}),
]


def _topology_keys(cluster):
    """The probe's CURVE keys: hostile frames come from an insider (anyone else is refused
    at the handshake; see test_security_transport)."""
    with ClusterState(build_config(cluster.common, user_file=False)) as state:
        topology_id = next(i for i, t in state.topologies().items() if t.name == "probe")
        secrets = state.topology_secrets(topology_id)
    return CurveKeys(secrets.curve_public, secrets.curve_secret)


def _send_hostile(ports, rounds, keys):
    for port in ports:
        with raw_sender(port, curve=keys) as push:
            for _ in range(rounds):
                for frame in HOSTILE:
                    push.send(frame)


@pytest.mark.cluster
def test_slow_bolt_keeps_every_worker_under_150_mb(start_cluster):
    cluster = start_cluster(supervisors=1, slots=2)
    res = cluster.cli("submit", str(TOPOLOGY), "--name", "probe")
    assert res.returncode == 0, res.stdout + res.stderr
    cluster.wait_for(lambda: len(cluster.worker_pids()) == 2, 60, "two workers")
    cluster.wait_for(lambda: _components(cluster)["slow"]["executed"] > 0, 60, "the bolt at work")
    procs = [psutil.Process(pid) for pid in cluster.worker_pids().values()]
    peak = {p.pid: 0 for p in procs}
    deadline, sent = time.monotonic() + RUN_SECS, False
    while time.monotonic() < deadline:
        for p in procs:
            peak[p.pid] = max(peak[p.pid], p.memory_info().rss)
        time.sleep(0.25)
        if time.monotonic() > deadline - RUN_SECS / 2 and not sent:
            sent = True
            _send_hostile([w["port"] for w in _status(cluster)["workers"]], 20, _topology_keys(cluster))
    comps = _components(cluster)
    print("probe: peak rss MB", {pid: round(rss / 2**20, 1) for pid, rss in peak.items()},
          "emitted", comps["flood"]["emitted"], "executed", comps["slow"]["executed"])
    assert all(p.is_running() for p in procs), "a worker died"
    assert sorted(cluster.worker_pids().values()) == sorted(p.pid for p in procs), "a worker was replaced"
    assert max(peak.values()) < LIMIT_MB * 2**20, f"peak RSS {max(peak.values()) / 2**20:.0f} MB"
    assert comps["slow"]["executed"] > RUN_SECS * 1000  # the bolt kept working throughout

    def counted():
        st = _status(cluster)
        by_worker = [w["dropped_by_cause"] for w in st["workers"]]
        slow = next(c for c in st["components"] if c["id"] == "slow")
        return all(d.get("bad_frame", 0) >= 20 * 6 for d in by_worker) and slow["dropped"] >= 20 * 6
    cluster.wait_for(counted, 20, "hostile frames counted in squall status", interval=1.0)
    human = cluster.cli("status", "probe").stdout
    assert "input dropped" in human and "bad_frame" in human and "acker_stream" in human
    # Nothing lost: once the spout stops, the bolt catches up with every tuple emitted.
    assert cluster.cli("deactivate", "probe").returncode == 0

    def drained():
        c = _components(cluster)
        return c["flood"]["emitted"] > 0 and c["slow"]["executed"] == c["flood"]["emitted"]
    cluster.wait_for(drained, 60, "the bolt to process every emitted tuple", interval=1.0)

