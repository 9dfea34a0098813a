"""First-poll strategies across a restart, on confluent-kafka's mock cluster: Tansu keeps no
commit metadata (EARLIEST and LATEST tell a restart from a new deployment by it) and its
ListOffsets answers the wrong end for batched records (LATEST needs the log's end)."""
from __future__ import annotations

import time

import pytest

from squall import Bolt, LocalCluster, TopologyBuilder
from squall.contrib.kafka import EARLIEST, LATEST, KafkaSpout

pytestmark = pytest.mark.cluster
SEEN: list[tuple[str, int]] = []  # local mode: one process, the test reads what the bolt saw


class Record(Bolt):
    def execute(self, t):
        SEEN.append((t["value"].decode(), t["offset"]))
        self.collector.ack(t)


@pytest.fixture
def mock_cluster():
    from confluent_kafka import Producer

    holder = Producer({"bootstrap.servers": "", "test.mock.num.brokers": 1})
    md = holder.list_topics(timeout=10)
    yield holder, ",".join(f"{b.host}:{b.port}" for b in md.brokers.values())


def produce(bs, values):
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bs})
    for v in values:
        p.produce("events", v.encode(), partition=0)
    assert p.flush(10) == 0


def run(bs, strategy, topology_name, until, then=None):
    SEEN.clear()
    b = TopologyBuilder()
    b.set_spout("kafka", KafkaSpout("events", group_id="g", conf={
        "kafka.spout.first.poll.offset.strategy": strategy, "kafka.spout.offset.commit.period.ms": 100}))
    b.set_bolt("record", Record()).shuffle("kafka")
    with LocalCluster({"squall.log.level": "WARNING"}) as lc:
        lc.submit(topology_name, {"kafka.bootstrap.servers": bs}, b.build())
        if then is not None:
            time.sleep(2)  # the spout has its partitions and has polled
            then()
        deadline = time.monotonic() + 30
        while not until():
            assert time.monotonic() < deadline, SEEN
            time.sleep(0.05)
        time.sleep(0.5)  # the last commit
        lc.deactivate(topology_name)  # commits on deactivate too
        time.sleep(0.3)
    return [v for v, _ in SEEN]


def test_earliest_starts_over_on_a_new_deployment_and_latest_skips_the_past(mock_cluster):
    _, bs = mock_cluster
    produce(bs, ["a", "b", "c"])
    assert run(bs, EARLIEST, "one", lambda: len(SEEN) >= 3) == ["a", "b", "c"]
    produce(bs, ["d"])
    # Another deployment (another topology id) with EARLIEST: from the beginning, not from "d".
    assert run(bs, EARLIEST, "two", lambda: len(SEEN) >= 4)[:4] == ["a", "b", "c", "d"]
    # LATEST on a new deployment: nothing that is already in the log.
    seen = run(bs, LATEST, "three", lambda: "e" in [v for v, _ in SEEN], then=lambda: produce(bs, ["e"]))
    assert seen == ["e"], seen
