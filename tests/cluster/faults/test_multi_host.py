"""Three hosts on one machine (network namespaces on a bridge, tests/support/netns.py):
ZooKeeper and nimbus on host a, a supervisor on each of hosts b and c, every daemon and
worker talking over 10.231.0.x addresses that exist only inside those namespaces.

Word count runs across the hosts with exact counts. Then the chaos topology (a durable
spout, a relay and a store: tests/support/chaos.py) carries ids across them, host c's link
goes down, its executors move to host b, and every id is stored: nothing was lost. Needs
root (as this suite runs locally and in CI); skipped with the reason otherwise. Namespaces
and every process are removed whatever happens.
"""
from __future__ import annotations

import collections
import importlib.util
import time
from pathlib import Path

import pytest

from squall.testing.cluster import FAST, ProcessCluster
from squall.testing.zookeeper import ZooKeeperServer
from support import netns
from support.chaos import ChaosCluster, chaos_line
from support.paths import CLUSTER_TOPOLOGIES

pytestmark = pytest.mark.cluster

WORDCOUNT = CLUSTER_TOPOLOGIES / "cluster_wordcount.py"
SENTENCES = 400


@pytest.fixture
def hosts():
    reason = netns.unavailable()
    if reason:
        pytest.skip(reason)
    with netns.Hosts(["a", "b", "c"]) as made:
        yield made


def supervisor_hosts(hosts: netns.Hosts) -> list[tuple[str, list[str]]]:
    return [(hosts.address[h], hosts.prefix(h)) for h in ("b", "c")]


@pytest.mark.timeout(600)
def test_word_count_across_hosts_then_a_host_drops_off_and_nothing_is_lost(hosts, tmp_path, capsys):
    hosts.run_in("a", lambda: word_count_across_hosts(hosts, tmp_path / "wc"), timeout=300)
    line = hosts.run_in("a", lambda: a_host_drops_off(hosts, tmp_path / "chaos"), timeout=400)
    with capsys.disabled():
        print(f"\nmulti-host {line}")


def word_count_across_hosts(hosts: netns.Hosts, base: Path) -> None:
    """Runs on host a: ZooKeeper and nimbus here, a supervisor on b and one on c."""
    a = hosts.address["a"]
    with ZooKeeperServer(host=a, tick_time=500, min_session_timeout=1000, work_dir=base / "zk") as zk:
        cluster = ProcessCluster(zk.port, "/squall", base / "cluster", supervisors=2, slots=2,
                                 conf={"zookeeper.servers": [a], "nimbus.host": a},
                                 supervisor_hosts=supervisor_hosts(hosts))
        with cluster:
            out = base / "out"
            out.mkdir()
            res = cluster.cli("submit", str(WORDCOUNT), "--name", "wc", "-c", "topology.workers=2",
                              "-c", f"test.output.dir={out}", "-c", f"test.sentences={SENTENCES}",
                              "-c", "test.rate=200")
            assert res.returncode == 0, res.stdout + res.stderr
            st = cluster.wait_for(lambda: (s := cluster.client.topology("wc")) and len(s["workers"]) == 2 and s,
                                  60, "two workers")
            assert {w["host"] for w in st["workers"]} == {hosts.address["b"], hosts.address["c"]}
            cluster.wait_for(lambda: len(_acked(out)) == SENTENCES, 120, "every sentence acked")
            assert _counts(out) == _reference(SENTENCES)


def a_host_drops_off(hosts: netns.Hosts, base: Path) -> str:
    """Runs on host a: the chaos topology over b and c; c's link goes down."""
    with ChaosCluster(base, ids=30_000, rate=600, supervisors=2, slots=3, host=hosts.address["a"],
                      supervisor_hosts=supervisor_hosts(hosts)) as chaos:
        started = time.monotonic()
        chaos.submit(workers=3)
        chaos.wait_until(lambda: {w.supervisor for w in chaos.workers()} == {0, 1}, 90, "workers on both hosts")
        chaos.wait_progress(2000, 90, "ids flowing across the hosts")
        b_node, c_node = _node_of(chaos, 0), _node_of(chaos, 1)
        assert {n for n, _ in chaos.assignment().slots()} == {b_node, c_node}

        hosts.link_down("c")
        chaos.wait_until(lambda: {n for n, _ in chaos.assignment().slots()} == {b_node}, 60,
                         "host c's executors moved to host b")
        chaos.wait_until(lambda: sum(1 for w in chaos.workers() if w.supervisor == 0) == 3, 60,
                         "three workers on host b")
        chaos.wait_until(lambda: chaos.acked() >= chaos.ids, 240, "every id acked")
        chaos.wait_until(lambda: chaos.tally().missing == 0, 60, "every id stored")
        tally = chaos.tally()
        assert tally.missing == 0 and tally.acked == chaos.ids
        return chaos_line(chaos.ids, tally, chaos.launches(), time.monotonic() - started)


def _node_of(chaos: ChaosCluster, i: int) -> str:
    return (chaos.c.supervisor_dir(i) / "supervisor-id").read_text().strip()


def _acked(out: Path) -> set[int]:
    ids: set[int] = set()
    for f in out.glob("acked-*.txt"):
        ids.update(int(x) for x in f.read_text().split())
    return ids


def _counts(out: Path) -> collections.Counter:
    seen = {}
    for f in out.glob("words-*.txt"):
        for line in f.read_text().splitlines():
            sid, idx, word = line.split()
            seen[(int(sid), int(idx))] = word  # at-least-once: a replay writes a line again
    return collections.Counter(seen.values())


def _reference(n: int) -> collections.Counter:
    spec = importlib.util.spec_from_file_location("cwc_ref", WORDCOUNT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return collections.Counter(w for s in module.sentences(n) for w in s.split())


assert FAST["nimbus.supervisor.timeout.secs"] < 30  # host c is given up within the waits above
