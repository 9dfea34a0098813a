"""Status numbers read while a bolt is inside a batch never show acked above executed."""
from __future__ import annotations

import threading

from squall import Bolt, LocalCluster, TopologyBuilder
from squall.testing.components import FixedTupleSpout
from squall.testing.waiting import wait_for

INSIDE = threading.Event()
RELEASE = threading.Event()


class AckThenWait(Bolt):
    """Acks its first tuple, then waits inside execute until the test has looked."""

    def prepare(self, conf, context, collector):
        self.collector, self.first = collector, True

    def execute(self, tup):
        self.collector.ack(tup)
        if self.first:
            self.first = False
            INSIDE.set()
            RELEASE.wait(30)

    def declare_output_fields(self, declarer):
        declarer.declare([])


def test_acked_never_above_executed_mid_batch() -> None:
    builder = TopologyBuilder()
    builder.set_spout("rows", FixedTupleSpout("counts-order", [[i] for i in range(50)], ["n"]), 1)
    builder.set_bolt("sink", AckThenWait(), 1).shuffle("rows")
    with LocalCluster() as cluster:
        cluster.submit("counts", {"topology.max.spout.pending": 100}, builder.build())
        try:
            assert INSIDE.wait(30), "the bolt never ran"
            sink = next(s for s in cluster.stats("counts") if s["component"] == "sink")
            assert sink["acked"] >= 1 and sink["acked"] <= sink["executed"], sink
            for worker in cluster.metrics("counts"):
                for ex in worker["executors"]:
                    for task in ex["tasks"].values():
                        assert task.get("acked", 0) <= task["executed"], ex
        finally:
            RELEASE.set()
        wait_for(lambda: next(s for s in cluster.stats("counts") if s["component"] == "sink")["acked"] == 50,
                 timeout=30, what="every row acked")
        sink = next(s for s in cluster.stats("counts") if s["component"] == "sink")
        assert sink["executed"] == sink["acked"] == 50
