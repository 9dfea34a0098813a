"""The KafkaSpout and the spout wait strategy, in local mode against a real broker (Tansu):
while its consumer is behind (a backlog in the topic) the spout is not held for the wait
strategy's time whenever its client's queue runs dry between fetches; once caught up on an
idle topic it waits as Storm's spouts do, and costs little CPU."""
from __future__ import annotations

import time

import pytest

from squall import BasicBolt, LocalCluster, TopologyBuilder
from squall.contrib.kafka import KafkaSpout
from support.kafka import create_topic, produce

pytestmark = pytest.mark.cluster

RECORDS = 20_000


class CountingSpout(KafkaSpout):
    """A KafkaSpout that counts its ``next_tuple`` calls (the test reads them)."""

    calls = 0

    def next_tuple(self) -> None:
        CountingSpout.calls += 1
        super().next_tuple()


class Drop(BasicBolt):
    def execute(self, t) -> None:
        pass


def spout(lc) -> dict:
    return next(s for s in lc.stats("w") if s["component"] == "kafka")


def test_a_lagging_spout_is_not_held_and_a_caught_up_one_waits(kafka_broker):
    bs = kafka_broker.bootstrap
    topic = kafka_broker.topic_name("backlog")
    create_topic(bs, topic, 1)
    produce(bs, topic, [(None, b"r%d" % i) for i in range(RECORDS)])
    b = TopologyBuilder()
    # A broker that holds each fetch 20 ms (more bytes wanted than there are) and small
    # fetches: the spout's client's queue runs dry between two fetches while records still
    # wait in the topic, whatever the machine's load.
    held = {"fetch.min.bytes": 100_000_000, "fetch.wait.max.ms": 20, "fetch.message.max.bytes": 1024,
            "queued.min.messages": 1, "fetch.queue.backoff.ms": 10}
    b.set_spout("kafka", CountingSpout(topic, group_id="wait-test", client_config=held))
    b.set_bolt("drop", Drop()).shuffle("kafka")
    with LocalCluster({"squall.log.level": "WARNING"}) as lc:
        lc.submit("w", {"kafka.bootstrap.servers": bs, "topology.acker.executors": 0}, b.build())
        # Sample (emitted, waits) often while the backlog is read: the window from 3,000
        # records in to 3,000 before the end is all lag (the topic was full before the start).
        samples: list[tuple[int, int]] = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            s = spout(lc)
            emitted = s["emitted"].get("default", 0)
            samples.append((emitted, s["waits"]))
            if emitted >= RECORDS:
                break
            time.sleep(0.01)
        assert samples[-1][0] == RECORDS, f"read {samples[-1][0]} of {RECORDS} records"
        inside = [w for e, w in samples if 3_000 <= e <= RECORDS - 3_000]
        assert len(inside) >= 2, f"too few samples inside the lagging window: {samples}"
        lagging_waits = inside[-1] - inside[0]
        # Before, a spout whose client's queue ran dry between two fetches was held each
        # time (tens to hundreds of waits per 1,000 records): now only a poll that stays
        # empty past BEHIND_SECS (a fetch slower than that) may be held.
        assert lagging_waits <= 3, f"the spout waited {lagging_waits} times while it lagged: {samples}"

        # Caught up on an idle topic: every empty poll waits (no spin), the process idles.
        time.sleep(1.0)  # past BEHIND_SECS since the last record
        waits0, calls0 = spout(lc)["waits"], CountingSpout.calls
        cpu0, t0 = time.process_time(), time.monotonic()
        time.sleep(2.0)
        cpu = (time.process_time() - cpu0) / (time.monotonic() - t0)
        waits, calls = spout(lc)["waits"] - waits0, CountingSpout.calls - calls0
        assert calls > 0 and abs(calls - waits) <= 2, (calls, waits)  # each call held for the wait
        assert calls <= 2.0 * 1000 * 1.1, calls  # at most one a millisecond (the wait strategy's time)
        assert cpu < 0.5, f"an idle spout used {cpu:.2f} of a CPU"
