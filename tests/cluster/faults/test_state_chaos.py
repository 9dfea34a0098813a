"""Exactly-once state under faults: a stateful count of N keyed events on a real cluster
(ZooKeeper, nimbus, two supervisors, three worker processes), with workers SIGKILLed
while it runs. The committed counts must equal the input's exact counts.

The default run takes about half a minute; ``--state-chaos-long`` runs more events, more
kills, and Redis as well as the embedded store.
"""
import collections
import os
import random
import signal
import time

import pytest

from squall.state.inspect import read_record
from squall.testing.cluster import ProcessCluster
from squall.testing.state import committed_component, wait_committed
from support.paths import CLUSTER_TOPOLOGIES

pytestmark = pytest.mark.cluster

TOPOLOGY = CLUSTER_TOPOLOGIES / "keyed_count.py"


def load_reference():
    from squall.loader import load_module

    return load_module(TOPOLOGY).reference


def chaos_cases(config):
    long = config.getoption("--state-chaos-long")
    providers = ["embedded", "redis"] if long else ["embedded"]
    return [(p, 60_000 if long else 12_000, 8 if long else 3) for p in providers]


def pytest_generate_tests(metafunc):
    if "chaos_case" in metafunc.fixturenames:
        cases = chaos_cases(metafunc.config)
        metafunc.parametrize("chaos_case", cases, ids=[c[0] for c in cases])


@pytest.fixture
def state_conf(chaos_case, tmp_path, request):
    provider = chaos_case[0]
    conf = {"topology.state.provider": provider}
    if provider == "redis":
        conf["topology.state.redis.url"] = request.getfixturevalue("redis_server").url
    else:
        # Both supervisors run on this one host: they share its state directory.
        conf["supervisor.state.dir"] = str(tmp_path / "host-state")
    return conf


def test_state_chaos(chaos_case, state_conf, zk_server, zk_root, tmp_path):
    provider, n, kills = chaos_case
    keys, rate = 37, 600  # events/s per spout task (two tasks)
    name = f"chaos-{provider}"
    rng = random.Random(int(os.environ.get("SQUALL_CHAOS_SEED", "13")))
    cluster = ProcessCluster(zk_server.port, zk_root, tmp_path / "cluster", supervisors=2, slots=2,
                             conf={k: v for k, v in state_conf.items() if k.startswith("supervisor.")})
    try:
        cluster.start()
        extra = [f"{k}={v}" for k, v in state_conf.items() if not k.startswith("supervisor.")]
        res = cluster.cli("submit", str(TOPOLOGY), "--name", name, "-c", "topology.workers=3",
                          "-c", f"keyed.events={n}", "-c", f"keyed.keys={keys}", "-c", f"keyed.rate={rate}",
                          "-c", "topology.state.checkpoint.timeout.secs=3",
                          *[a for kv in extra for a in ("-c", kv)])
        assert res.returncode == 0, res.stdout + res.stderr
        cluster.wait_for(lambda: len(cluster.worker_pids()) == 3, 60, "three workers")
        reader = {**state_conf}
        state = cluster.state_namespace(name)  # nimbus's choice: the topology's own id
        cluster.wait_for(lambda: (read_record(reader, state) or None) and read_record(reader, state).txid >= 2,
                         60, "checkpoints committing")
        # Kill a random worker every few seconds while events flow.
        killed = []
        for _ in range(kills):
            time.sleep(rng.uniform(2.0, 4.0))
            pids = cluster.worker_pids()
            victim = rng.choice(sorted(pids.values()))
            os.kill(victim, signal.SIGKILL)
            killed.append(victim)
            cluster.wait_for(lambda: len(cluster.worker_pids()) == 3 and victim not in cluster.worker_pids().values(),
                             60, "the killed worker relaunched")

        def all_emitted(txid):
            spouts = committed_component(reader, state, "events", 2, txid)
            return all(s.get("offset", 0) >= n for s in spouts)
        record = wait_committed(reader, state, all_emitted, 180, f"all {n} events committed")
        counts = collections.Counter()
        for part in committed_component(reader, state, "count", 3, record.restore_point()):
            counts.update(part)
    finally:
        cluster.stop()
    want = load_reference()(n, keys)
    wrong = sum(1 for k in set(want) | set(counts) if counts.get(k) != want.get(k))
    restores = record.recoveries - 1  # every restore after the first start
    print(f"\nstate-chaos: events={n} keys={keys} wrong={wrong} restores={restores} "
          f"(provider={provider}, workers killed={len(killed)}, txid={record.txid})")
    assert wrong == 0, {k: (counts.get(k), want.get(k))
                        for k in set(want) | set(counts) if counts.get(k) != want.get(k)}
    assert sum(counts.values()) == n
    assert restores >= 1
