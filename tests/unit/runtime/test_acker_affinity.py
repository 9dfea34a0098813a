"""Local-acker affinity: a spout's trees are tracked by an acker in its own worker."""
import threading

import pytest

from squall import Bolt, LocalCluster, TopologyBuilder
from squall.runtime.acker import ROOT_RANDOM_BITS, draw_root, root_layout, spout_task
from squall.testing.components import EchoBolt, FixedTupleSpout, Recorder
from squall.testing.waiting import wait_for


@pytest.mark.parametrize("ackers, near, task, home", [
    ((4, 5, 6), {5}, 9, 1),          # one acker in the worker: every root picks it
    ((1, 2, 3, 4), {2, 4}, 7, 3),    # two: the task id chooses between them (7 % 2 -> the second)
    ((1, 2, 3, 4), {2, 4}, 8, 1),
    ((10, 11), {11}, (1 << 20) - 1, 1),  # the highest task id a root can name
])
def test_roots_pick_an_acker_in_the_spouts_worker_and_stay_random(ackers, near, task, home):
    layout = root_layout(task, ackers, near)
    roots = [draw_root(layout) for _ in range(2000)]
    # Every emitter, in any worker, sends a tree's traffic to ackers[root % len(ackers)].
    assert {ackers[r % len(ackers)] for r in roots} == {ackers[home]}
    assert {spout_task(r) for r in roots} == {task}
    assert len(set(roots)) == len(roots) and all(0 <= r < 1 << 64 for r in roots)
    # The random part keeps at least 24 random bits: its high bits vary too.
    randoms = [r & ((1 << ROOT_RANDOM_BITS) - 1) for r in roots]
    assert max(randoms) > 1 << (ROOT_RANDOM_BITS - 2)


@pytest.mark.parametrize("ackers, near", [((1,), {1}), ((1, 2), set()), ((1, 2), {7})])
def test_without_a_choice_roots_stay_uniform(ackers, near):
    """One acker in the topology, or none in the spout's worker: any acker, as before."""
    layout = root_layout(3, ackers, near)
    assert layout == (3 << ROOT_RANDOM_BITS, 1, ROOT_RANDOM_BITS)
    roots = [draw_root(layout) for _ in range(400)]
    assert {r % 2 for r in roots} == {0, 1}


class _FailsFirst(Bolt):
    """Fails the first sight of each row, acks every later one (the spout replays)."""

    seen: set = set()
    lock = threading.Lock()

    def execute(self, tup):
        with self.lock:
            first = tup.values[0] not in self.seen
            self.seen.add(tup.values[0])
        if first:
            self.collector.fail(tup)
        else:
            self.collector.ack(tup)


@pytest.mark.parametrize("threads", [1, 0])
def test_a_spouts_trees_complete_and_fail_at_the_acker_in_its_own_worker(threads):
    """Two workers, a bolt of each component in each: every tree, whichever workers its
    tuples cross, is acked or failed at the acker next to its spout (its inits and the
    verdicts never cross), the other acker finishes none, and failed trees still replay.
    ``threads`` 0: an executor per thread, so the acker is in the worker but not on the
    spout's thread."""
    n = 60
    _FailsFirst.seen = set()
    for key in ("affinity.acked", "affinity.failed"):
        Recorder.clear(key)
    b = TopologyBuilder()
    b.set_spout("rows", FixedTupleSpout("affinity", [[i] for i in range(n)], ["i"]))
    b.set_bolt("echo", EchoBolt(["i"]), parallelism=2).shuffle("rows")
    b.set_bolt("check", _FailsFirst(), parallelism=2).shuffle("echo")
    conf = {"topology.workers": 2, "topology.worker.executor.threads": threads,
            "topology.message.timeout.secs": 30}
    with LocalCluster({"squall.log.level": "WARNING"}) as cluster:
        cluster.submit("affinity", conf, b.build())
        wait_for(lambda: len(Recorder.get("affinity.acked")) == n, 30, what="every row acked")
        workers = [w["executors"] for w in cluster.metrics("affinity")]  # per worker
    assert sorted(Recorder.get("affinity.acked")) == list(range(n))
    assert sorted(Recorder.get("affinity.failed")) == list(range(n))  # each failed once, then replayed
    finished = {}
    for executors in workers:
        comps = {e["component"] for e in executors}
        assert {"echo", "check", "__acker"} <= comps  # both workers' bolts took part, an acker in each
        for e in executors:
            if e["component"] == "__acker":
                finished["spout's" if "rows" in comps else "other"] = sum(
                    t["executed"] for t in e["tasks"].values())
    assert finished == {"spout's": 2 * n, "other": 0}
