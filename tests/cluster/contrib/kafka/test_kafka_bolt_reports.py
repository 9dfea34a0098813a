"""KafkaBolt acks a record as soon as the broker confirms it, even when no input comes to
make it look (issue 31, point 4): a topology whose spouts are all held at
topology.max.spout.pending went on only at the bolt's next tick."""
from __future__ import annotations

import time

import pytest

from squall import LocalCluster, Spout, TopologyBuilder
from squall.contrib.kafka import KafkaBolt
from support.kafka import create_topic, read_all

pytestmark = pytest.mark.cluster
RECORDS = 10


class Numbers(Spout):
    def open(self, conf, context, collector):
        self.collector, self.n = collector, 0

    def next_tuple(self):
        if self.n < RECORDS:
            self.n += 1
            self.collector.emit([str(self.n), f"value {self.n}"], msg_id=self.n)

    def declare_output_fields(self, declarer):
        declarer.declare(["key", "value"])


class SlowTickKafkaBolt(KafkaBolt):
    """Ticks far apart: a report must not wait for one."""

    def component_config(self):
        return {**(super().component_config() or {}), "topology.tick.tuple.freq.secs": 600}


def test_each_record_is_acked_when_the_broker_confirms_it_with_the_spout_held(kafka_broker):
    bs, topic = kafka_broker.bootstrap, kafka_broker.topic_name("held")
    create_topic(bs, topic, 1)
    b = TopologyBuilder()
    b.set_spout("numbers", Numbers())
    b.set_bolt("out", SlowTickKafkaBolt(topic, bootstrap_servers=bs)).shuffle("numbers")
    with LocalCluster() as lc:
        # One tuple in flight: the next is emitted only once the bolt acked the last.
        lc.submit("held", {"topology.max.spout.pending": 1, "topology.acker.executors": 1}, b.build())
        deadline = time.monotonic() + 60
        acked = 0
        while acked < RECORDS:
            assert time.monotonic() < deadline, f"{acked} of {RECORDS} records acked in 60 s"
            time.sleep(0.1)
            acked = sum(s.get("acked", 0) for s in lc.stats("held") if s["component"] == "numbers")
        lc.kill("held")
    records = read_all(bs, topic, expect=RECORDS, timeout=30)
    assert sorted(int(m.key()) for m in records) == list(range(1, RECORDS + 1))
