"""Whole clusters: ZooKeeper, a nimbus, two supervisors and their worker processes.

Each test starts real daemon processes (squall.testing.cluster.ProcessCluster) against the
session's ZooKeeper and stops every one of them by PID at the end.
"""
import collections
import json
import os
import signal
import time

import pytest

from squall.daemons.state import ClusterState
from squall.testing.cluster import FAST
from support.paths import CLUSTER_TOPOLOGIES

pytestmark = pytest.mark.cluster

TOPOLOGY = CLUSTER_TOPOLOGIES / "cluster_wordcount.py"


def load_sentences():
    import importlib.util

    spec = importlib.util.spec_from_file_location("cwc_ref", TOPOLOGY)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.sentences


@pytest.fixture
def cluster(start_cluster):
    return start_cluster(supervisors=2, slots=2)


# After nimbus has noticed a lost supervisor: moving its executors and starting their worker.
RESUME_SECS = 15


@pytest.fixture
def out(tmp_path):
    d = tmp_path / "out"
    d.mkdir()
    return d


def submit(cluster, out, name, n, workers, rate=400, extra=()):
    res = cluster.cli("submit", str(TOPOLOGY), "--name", name, "-c", f"topology.workers={workers}",
                      "-c", f"test.output.dir={out}", "-c", f"test.sentences={n}", "-c", f"test.rate={rate}",
                      *extra)
    assert res.returncode == 0, res.stdout + res.stderr
    return res


def acked(out):
    ids = set()
    for f in out.glob("acked-*.txt"):
        ids.update(int(x) for x in f.read_text().split())
    return ids


def counts(out):
    seen = {}
    for f in out.glob("words-*.txt"):
        for line in f.read_text().splitlines():
            sid, idx, word = line.split()
            seen[(int(sid), int(idx))] = word  # at-least-once: dedupe replays
    return collections.Counter(seen.values())


def reference(n):
    return collections.Counter(w for s in load_sentences()(n) for w in s.split())


def status(cluster, name):
    res = cluster.cli("status", name, "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    return json.loads(res.stdout)


def worker_slots(cluster, name):
    return {(w["node"], w["port"]) for w in status(cluster, name)["workers"]}


def test_wordcount_on_three_workers_list_status_and_kill(cluster, out, zk_server, zk_root):
    n = 400
    submit(cluster, out, "wc3", n, workers=3, rate=1000)
    cluster.wait_for(lambda: len(cluster.worker_pids()) == 3, 60, "three worker processes")
    cluster.wait_for(lambda: acked(out) == set(range(n)), 60, "every sentence acked")
    assert counts(out) == reference(n)

    listing = cluster.cli("list")
    assert listing.returncode == 0 and "wc3" in listing.stdout and "active" in listing.stdout
    st = status(cluster, "wc3")
    assert st["status"] == "active" and len(st["workers"]) == 3
    assert {c["id"] for c in st["components"]} >= {"sentences", "split", "count", "__acker"}
    ports = {e["port"] for c in st["components"] for e in c["executors"]}
    assert len(ports) == 3
    cluster.wait_for(lambda: next(c for c in status(cluster, "wc3")["components"]
                                  if c["id"] == "sentences")["acked"] == n, 30, "acked count in status")
    human = cluster.cli("status", "wc3")
    assert human.returncode == 0 and "split" in human.stdout and "127.0.0.1" in human.stdout

    topology_id = st["id"]
    res = cluster.cli("kill", "wc3", "--wait", "0")
    assert res.returncode == 0, res.stderr
    cluster.wait_for(lambda: cluster.worker_pids() == {}, 30, "workers gone")
    conf = {**cluster.common}
    from squall.config import build_config
    with ClusterState(build_config(conf, user_file=False)) as state:
        cluster.wait_for(lambda: state.topology(topology_id) is None and state.assignment(topology_id) is None
                         and state.worker_beats(topology_id) == {}
                         and state.topology_secrets(topology_id) is None, 30, "ZooKeeper state removed")
    assert cluster.cli("status", "wc3").returncode == 1


def test_kill_9_worker_is_relaunched_and_every_message_completes(cluster, out):
    n = 1500
    submit(cluster, out, "wckill", n, workers=3, rate=300)
    cluster.wait_for(lambda: len(acked(out)) > 100, 60, "processing under way")
    st = status(cluster, "wckill")
    spout_slot = next((e["node"], e["port"]) for c in st["components"] if c["id"] == "sentences"
                      for e in c["executors"])
    # kill -9 a worker that does not run the spout: its in-flight tuples time out and replay
    victims = {}
    for i in range(cluster.n_supervisors):
        for wid, pid in cluster.worker_pids(i).items():
            hb = json.loads((cluster.supervisor_dir(i) / "workers" / wid / "heartbeat.json").read_text())
            if hb["port"] != spout_slot[1]:
                victims[pid] = (i, hb["port"])
    pid, (sup, port) = next(iter(victims.items()))
    os.kill(pid, signal.SIGKILL)

    def relaunched():
        for wid, p in cluster.worker_pids(sup).items():
            hb_file = cluster.supervisor_dir(sup) / "workers" / wid / "heartbeat.json"
            if p != pid and hb_file.exists() and json.loads(hb_file.read_text())["port"] == port:
                return True
        return False

    # The supervisor sees the dead pid within a second; the new worker's first heartbeat waits on its
    # interpreter start, which took over 30 s once at load 17 on 2 cores.
    cluster.wait_for(relaunched, 60, "the supervisor relaunching the worker")
    cluster.wait_for(lambda: acked(out) == set(range(n)), 90, "every sentence acked after the kill")
    assert counts(out) == reference(n)


def test_kill_9_supervisor_moves_executors_and_processing_resumes(cluster, out):
    n = 5000  # 20 s at 250/s: a kill that comes late on a loaded host still finds work left
    submit(cluster, out, "wcsup", n, workers=2, rate=250)
    cluster.wait_for(lambda: len(acked(out)) > 100, 60, "processing under way")
    cluster.wait_for(lambda: {node for node, _ in worker_slots(cluster, "wcsup")} and
                     len(cluster.worker_pids()) >= 2, 30, "workers up")
    victim_node = sorted(worker_slots(cluster, "wcsup"))[0][0]
    sup_ids = [(cluster.supervisor_dir(i) / "supervisor-id").read_text().strip() for i in range(2)]
    victim = sup_ids.index(victim_node)
    assert len(acked(out)) < n - 1000, "the workers came up so late that too little work was left to see it resume"
    killed_at = time.monotonic()
    cluster.kill_supervisor(victim)
    # Nimbus notices the silence after its supervisor timeout (5 s here); then a worker starts
    # on the survivor, which takes a few seconds on a loaded 2-core host.
    budget = FAST["nimbus.supervisor.timeout.secs"] + RESUME_SECS
    cluster.wait_for(lambda: {node for node, _ in worker_slots(cluster, "wcsup")} == {sup_ids[1 - victim]},
                     budget, "executors moved to the surviving supervisor")
    before = len(acked(out))
    cluster.wait_for(lambda: len(acked(out)) > before + 20, max(1.0, budget - (time.monotonic() - killed_at)),
                     f"processing resumed within {budget} s of the kill")
    resumed_after = time.monotonic() - killed_at
    assert resumed_after <= budget, resumed_after
    cluster.wait_for(lambda: acked(out) == set(range(n)), 120, "every sentence acked")
    assert counts(out) == reference(n)


def test_rebalance_two_to_three_workers_and_deactivate_activate(cluster, out):
    n = 100000
    submit(cluster, out, "wcreb", n, workers=2, rate=200)
    cluster.wait_for(lambda: len(worker_slots(cluster, "wcreb")) == 2 and len(acked(out)) > 50, 60, "2 workers running")
    res = cluster.cli("rebalance", "wcreb", "-n", "3", "--wait", "0")
    assert res.returncode == 0, res.stderr
    cluster.wait_for(lambda: len(worker_slots(cluster, "wcreb")) == 3, 30, "3 workers assigned")
    cluster.wait_for(lambda: len(cluster.worker_pids()) == 3, 60, "3 worker processes")
    mark = len(acked(out))
    cluster.wait_for(lambda: len(acked(out)) > mark + 50, 60, "processing after rebalance")
    assert status(cluster, "wcreb")["status"] == "active"

    assert cluster.cli("deactivate", "wcreb").returncode == 0
    cluster.wait_for(lambda: status(cluster, "wcreb")["status"] == "inactive", 10, "inactive")
    time.sleep(3)  # refresh-active, then in-flight tuples drain
    stopped = len(acked(out))
    time.sleep(2)
    assert len(acked(out)) == stopped, "an inactive topology's spouts emit nothing"
    assert cluster.cli("activate", "wcreb").returncode == 0
    cluster.wait_for(lambda: len(acked(out)) > stopped + 50, 30, "processing after activate")
