"""KafkaSpout and KafkaBolt in local mode against a real broker (Tansu), with kcat as a
second, independent client: records kcat writes are read, records the bolt writes kcat
reads; retries, the failed stream, the uncommitted bound and new partitions."""
from __future__ import annotations

import collections
import subprocess
import time

import pytest

from squall import BasicBolt, Bolt, LocalCluster, TopologyBuilder
from squall.contrib.kafka import KafkaBolt, KafkaSpout, StringTranslator
from support.kafka import committed, create_topic, kcat, produce, read_all
from support.paths import REPO

pytestmark = pytest.mark.cluster


def wait(cond, timeout, what):
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def spout_stats(lc, name, component="kafka"):
    return [s for s in lc.stats(name) if s["component"] == component]


def metric(lc, name, metric_name, component="kafka"):
    total = collections.Counter()
    for s in spout_stats(lc, name, component):
        for task in s.get("metrics", {}).values():
            value = task.get(metric_name, {}).get("value")
            if isinstance(value, dict):
                total.update(value)
            elif value is not None:
                total["_"] += value
    return total


def test_kcat_writes_the_example_counts_and_kcat_reads_them(kafka_broker, monkeypatch):
    bs = kafka_broker.bootstrap
    t_in, t_out = kafka_broker.topic_name("lines"), kafka_broker.topic_name("counts")
    create_topic(bs, t_in, 3)
    create_topic(bs, t_out, 2)
    lines = [f"the cat {i % 5} sat on the mat" for i in range(300)]
    cmd, env = kcat()
    res = subprocess.run([*cmd, "-b", bs, "-t", t_in, "-P", "-K", ":"], input="".join(
        f"k{i}:{line}\n" for i, line in enumerate(lines)), capture_output=True, text=True, timeout=60, env=env)
    assert res.returncode == 0, res.stderr
    monkeypatch.setenv("KAFKA_WORDCOUNT_IN", t_in)
    monkeypatch.setenv("KAFKA_WORDCOUNT_OUT", t_out)
    from squall.loader import load_topology

    topology, conf, _ = load_topology(str(REPO / "examples" / "kafka_wordcount.py"))
    want = collections.Counter(w for line in lines for w in line.split())
    with LocalCluster({"squall.log.level": "WARNING"}) as lc:
        lc.submit("wc", {**conf, "kafka.bootstrap.servers": bs, "kafka.spout.offset.commit.period.ms": 200},
                  topology)
        wait(lambda: sum(committed(bs, "kafka-wordcount", t_in, 3).values()) >= len(lines), 90, "every line committed")
    out = subprocess.run([*cmd, "-b", bs, "-t", t_out, "-C", "-e", "-q", "-f", "%k %s\n"],
                         capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    final: dict[str, int] = {}
    for row in out.stdout.splitlines():
        key, word, n = row.split(" ")
        assert key == word
        final[word] = max(final.get(word, 0), int(n))
    assert final == dict(want)


class Flaky(Bolt):
    """Fails the first ``kflaky.fails`` tries of records whose value starts with "fail"."""

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.tries = collections.Counter()

    def execute(self, t):
        if t["value"].startswith("fail"):
            self.tries[t["offset"], t["partition"]] += 1
            if self.tries[t["offset"], t["partition"]] <= 100:
                self.collector.fail(t)
                return
        self.collector.ack(t)


class Collect(BasicBolt):
    def execute(self, t):
        self.collector.emit([t["key"], t["value"]])

    def declare_output_fields(self, d):
        d.declare(["key", "value"])


def test_retries_then_the_failed_stream_undecodable_and_a_huge_record(kafka_broker):
    bs = kafka_broker.bootstrap
    t_in, t_dead = kafka_broker.topic_name("flaky"), kafka_broker.topic_name("dead")
    create_topic(bs, t_in, 2)
    create_topic(bs, t_dead, 1)
    recs = [(b"a", b"ok"), (b"b", b"fail-me"), (b"c", b"\xff\xfe"), (b"d", b"h" * 900_000), (b"e", b"ok")]
    produce(bs, t_in, recs, partition=0)
    b = TopologyBuilder()
    b.set_spout("kafka", KafkaSpout(t_in, group_id=f"g-{t_in}", translator=StringTranslator(), failed_stream=True,
                                    conf={"kafka.spout.retry.max.count": 2, "kafka.spout.retry.initial.delay.ms": 100,
                                          "kafka.spout.offset.commit.period.ms": 200,
                                          "kafka.spout.metrics.time.bucket.secs": 0.1}))
    b.set_bolt("flaky", Flaky()).shuffle("kafka")
    b.set_bolt("dead", KafkaBolt(t_dead), 1).shuffle("kafka", "failed")
    with LocalCluster({"squall.log.level": "WARNING"}) as lc:
        lc.submit("flaky", {"kafka.bootstrap.servers": bs}, b.build())
        wait(lambda: committed(bs, f"g-{t_in}", t_in, 2).get(0, 0) >= len(recs), 60, "every offset committed")
        wait(lambda: metric(lc, "flaky", "kafka_given_up"), 30, "the metrics' next bucket")
        retries = metric(lc, "flaky", "kafka_retries")
        given_up, decode = metric(lc, "flaky", "kafka_given_up"), metric(lc, "flaky", "kafka_decode_failures")
        errors = lc.errors("flaky")
    p0 = f"{t_in}-0"
    assert retries[p0] == 3 and given_up[p0] == 1 and decode[p0] == 1  # 3 failures: 2 retries, then given up
    dead = {m.value() for m in read_all(bs, t_dead, 2)}
    assert dead == {b"fail-me", b"\xff\xfe"}
    texts = [e["error"] for es in errors.values() for e in es]
    assert any("given up" in t for t in texts) and any("undecodable" in t for t in texts)


class Hold(Bolt):
    """Acks nothing: every tuple stays pending."""

    def execute(self, t):
        pass


def test_polling_stops_at_the_uncommitted_bound(kafka_broker):
    bs = kafka_broker.bootstrap
    t_in = kafka_broker.topic_name("bound")
    create_topic(bs, t_in, 1)
    produce(bs, t_in, [(None, str(i).encode()) for i in range(5000)])
    b = TopologyBuilder()
    b.set_spout("kafka", KafkaSpout(t_in, group_id=f"g-{t_in}",
                                    conf={"kafka.spout.max.uncommitted.offsets": 300,
                                          "kafka.spout.poll.max.records": 100}))
    b.set_bolt("hold", Hold()).shuffle("kafka")
    with LocalCluster({"squall.log.level": "WARNING"}) as lc:
        lc.submit("bound", {"kafka.bootstrap.servers": bs, "topology.message.timeout.secs": 600}, b.build())
        wait(lambda: sum(sum(s["emitted"].values()) for s in spout_stats(lc, "bound")) >= 300, 60, "emits")
        time.sleep(2)
        emitted = sum(sum(s["emitted"].values()) for s in spout_stats(lc, "bound"))
    # The bound, plus at most what was fetched before the pause took effect.
    assert 300 <= emitted <= 300 + 2 * 100 + 500, emitted


# A record on a partition the spout has (or a new topic's, found at the next refresh) is
# committed within a few refresh and commit periods: about a second on an idle machine. The
# rest is slack for a loaded one. (When the refresh waited behind the consumer's fetch, a
# new topic took up to a minute.)
PICKUP_SECS = 30.0


def wait_committed(bs, group, topic, partitions, want, timeout, what):
    """Until the group's committed offsets of ``topic`` are ``want`` (partition -> offset).
    Every look gets only the time left; a timeout says what was seen last."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + timeout
    seen, looks, unanswered = None, 0, 0
    while (left := deadline - time.monotonic()) > 0:
        looks += 1
        try:
            seen = committed(bs, group, topic, partitions, timeout=left)
        except KafkaException:  # the broker did not answer in the time left
            unanswered += 1
        else:
            if seen == want:
                return
        time.sleep(0.1)
    raise AssertionError(f"{what}: committed offsets {seen} after {timeout:.0f} s (the last answer of "
                         f"{looks - unanswered}; {unanswered} looks unanswered), wanted {want}")


def test_partitions_of_a_topic_created_later_are_picked_up(kafka_broker):
    """The assignment is redone when the partition set grows. Tansu has no CreatePartitions
    (nor has confluent-kafka's mock cluster), so the set grows by a topic the spout's
    pattern matches, created while it runs: the same refresh path. Every new partition is
    read (the two tasks split them) and every record once."""
    bs = kafka_broker.bootstrap
    stem = kafka_broker.topic_name("grow")
    group = f"g-{stem}"
    create_topic(bs, f"{stem}-a", 2)
    b = TopologyBuilder()
    b.set_spout("kafka", KafkaSpout(pattern=f"{stem}-.*", group_id=group, conf={
        "kafka.spout.partition.refresh.period.ms": 300, "kafka.spout.offset.commit.period.ms": 200}), 2)
    b.set_bolt("collect", Collect()).shuffle("kafka")
    with LocalCluster({"squall.log.level": "WARNING"}) as lc:
        lc.submit("grow", {"kafka.bootstrap.servers": bs}, b.build())
        produce(bs, f"{stem}-a", [(None, b"x")], partition=1)
        wait_committed(bs, group, f"{stem}-a", 2, {1: 1}, PICKUP_SECS, "the first topic read")
        create_topic(bs, f"{stem}-b", 3)
        for part in range(3):
            produce(bs, f"{stem}-b", [(None, b"y")], partition=part)
        wait_committed(bs, group, f"{stem}-b", 3, {0: 1, 1: 1, 2: 1}, PICKUP_SECS, "the new topic read")
        emitted = sum(sum(s["emitted"].values()) for s in spout_stats(lc, "grow"))
    assert emitted == 4  # each record once: no partition went to both tasks
