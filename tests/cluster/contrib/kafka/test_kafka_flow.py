"""Flow control and failure in the Kafka components, in local mode against a real broker:
a KafkaBolt that cannot keep up holds its input back (counts stay exact), a record the
broker refuses becomes a dead letter with its reason, the spout's thread never waits for a
broker that is away, and a run with no broker says so in a few lines and fails."""
from __future__ import annotations

import collections
import socket
import subprocess
import sys
import time

import pytest

from squall import BasicBolt, LocalCluster, TopologyBuilder
from squall.contrib.kafka import KafkaBolt, KafkaSpout, StringTranslator
from squall.testing.zookeeper import free_port
from support.kafka import committed, create_topic, produce, read_all
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


def metric(lc, name, component, metric_name):
    total = collections.Counter()
    for s in lc.stats(name):
        if s["component"] != component:
            continue
        for task in s.get("metrics", {}).values():
            value = task.get(metric_name, {}).get("value")
            if isinstance(value, dict):
                total.update(value)
            elif value is not None:
                total["_"] += value
    return total


def test_the_example_counts_exactly_when_the_writer_holds_its_input_back(kafka_broker, monkeypatch):
    """The word count example at full speed with a KafkaBolt that can have only 20 records
    in flight and no wait for room: before, a full bolt failed tuples, their lines were
    replayed and words counted twice; now it holds its input and every count is exact."""
    bs = kafka_broker.bootstrap
    t_in, t_out = kafka_broker.topic_name("wc-lines"), kafka_broker.topic_name("wc-counts")
    create_topic(bs, t_in, 2)
    create_topic(bs, t_out, 2)
    words = [f"w{i}" for i in range(40)]
    lines = [" ".join(words[(i * 7 + j) % len(words)] for j in range(8)) for i in range(3000)]
    produce(bs, t_in, [(None, line.encode()) for line in lines])
    monkeypatch.setenv("KAFKA_WORDCOUNT_IN", t_in)
    monkeypatch.setenv("KAFKA_WORDCOUNT_OUT", t_out)
    from squall.loader import load_topology

    topology, conf, _ = load_topology(str(REPO / "examples" / "kafka_wordcount.py"))
    want = collections.Counter(w for line in lines for w in line.split())
    with LocalCluster({"squall.log.level": "WARNING"}) as lc:
        lc.submit("wc", {**conf, "kafka.bootstrap.servers": bs, "kafka.spout.offset.commit.period.ms": 200,
                         "kafka.bolt.max.in.flight": 20, "kafka.bolt.full.wait.ms": 0,
                         "kafka.spout.metrics.time.bucket.secs": 0.2}, topology)
        wait(lambda: sum(committed(bs, "kafka-wordcount", t_in, 2).values()) >= len(lines), 120, "every line committed")
        time.sleep(0.5)  # a metrics bucket
        held = metric(lc, "wc", "write", "kafka_bolt_held")["_"]
        refused = metric(lc, "wc", "write", "kafka_writes_refused")
        failed = sum(s.get("failed", 0) for s in lc.stats("wc") if s["kind"] == "spout")
    seen = collections.Counter(m.value().decode() for m in read_all(bs, t_out, sum(want.values()), idle=1.0))
    over = {v: c for v, c in seen.items() if c > 1}
    got = {w: max((int(v.split()[1]) for v in seen if v.split()[0] == w), default=0) for w in want}
    assert failed == 0 and not refused, (failed, refused)
    assert not over and got == dict(want), (len(over), {w: (got[w], want[w]) for w in want if got[w] != want[w]})
    assert held > 0  # the bound was reached: the test exercised the hold


class Emit(BasicBolt):
    def execute(self, t):
        self.collector.emit([t["key"], t["value"], [("trace", b"t-" + t["key"].encode())]])

    def declare_output_fields(self, d):
        d.declare(["key", "value", "headers"])


def test_a_record_the_broker_refuses_is_a_dead_letter_with_its_reason(kafka_broker):
    """A record over the producer's message.max.bytes is refused for good: not retried, its
    tuple acked, the record on the bolt's failed stream and from there written to a dead
    letter topic with its own headers and the reason; the others are written with theirs.
    A record the spout cannot decode is a dead letter too, with its original headers."""
    bs = kafka_broker.bootstrap
    t_in, t_out, t_dead = (kafka_broker.topic_name(s) for s in ("refuse-in", "refuse-out", "refuse-dead"))
    for t in (t_in, t_out, t_dead):
        create_topic(bs, t, 1)
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bs})
    for key, value in (("a", b"small"), ("big", b"x" * 5000), ("b", b"small too"), ("bad", b"\xff\xfe")):
        p.produce(t_in, value, key.encode(), headers=[("origin-id", key.encode())])
    assert p.flush(30) == 0
    b = TopologyBuilder()
    b.set_spout("in", KafkaSpout(t_in, group_id=f"g-{t_in}", translator=StringTranslator(), failed_stream=True,
                                 conf={"kafka.spout.offset.commit.period.ms": 200}))
    b.set_bolt("emit", Emit()).shuffle("in")
    b.set_bolt("out", KafkaBolt(t_out, failed_stream=True, client_config={"message.max.bytes": 2000})).shuffle("emit")
    b.set_bolt("dead", KafkaBolt(t_dead)).shuffle("out", "failed").shuffle("in", "failed")
    with LocalCluster({"squall.log.level": "ERROR"}) as lc:
        lc.submit("refuse", {"kafka.bootstrap.servers": bs, "kafka.spout.metrics.time.bucket.secs": 0.2}, b.build())
        wait(lambda: committed(bs, f"g-{t_in}", t_in, 1).get(0, 0) >= 4, 60, "every offset committed")
        refused = wait(lambda: metric(lc, "refuse", "out", "kafka_writes_refused"), 10, "the refusal counted")
        retries = metric(lc, "refuse", "in", "kafka_retries")
    out = {m.key(): (m.value(), dict(m.headers() or [])) for m in read_all(bs, t_out, 2, idle=1.0)}
    dead = {m.key(): (m.value(), dict(m.headers() or [])) for m in read_all(bs, t_dead, 2, idle=1.0)}
    assert out == {b"a": (b"small", {"trace": b"t-a"}), b"b": (b"small too", {"trace": b"t-b"})}
    assert set(dead) == {b"big", b"bad"} and dead[b"big"][0] == b"x" * 5000
    assert dead[b"big"][1]["trace"] == b"t-big" and b"MSG_SIZE_TOO_LARGE" in dead[b"big"][1]["squall.reason"]
    assert dead[b"bad"][1]["origin-id"] == b"bad" and b"UnicodeDecodeError" in dead[b"bad"][1]["squall.reason"]
    assert dead[b"bad"][1]["squall.origin"] == f"{t_in}-0@3".encode()
    assert refused == {"MSG_SIZE_TOO_LARGE": 1} and not retries


# The spouts' calls to next_tuple, timed while the broker is away: (seconds, when).
CALLS: list[tuple[float, float]] = []


class TimedKafkaSpout(KafkaSpout):
    def next_tuple(self):
        t0 = time.perf_counter()
        try:
            super().next_tuple()
        finally:
            CALLS.append((time.perf_counter() - t0, time.monotonic()))


class Ack(BasicBolt):
    def execute(self, t):
        pass


def test_the_spout_never_waits_for_a_broker_that_is_away(kafka_broker):
    """Metadata refreshes every 300 ms and commits every 200 ms while the broker is away
    for 8 s: no next_tuple call takes long (before, a refresh held the thread up to 1 s
    each time), and the records come through once it is back."""
    bs = kafka_broker.bootstrap
    t_in = kafka_broker.topic_name("away")
    create_topic(bs, t_in, 2)
    produce(bs, t_in, [(None, str(i).encode()) for i in range(200)])
    b = TopologyBuilder()
    b.set_spout("in", TimedKafkaSpout(t_in, group_id=f"g-{t_in}", conf={
        "kafka.spout.partition.refresh.period.ms": 300, "kafka.spout.offset.commit.period.ms": 200}), 2)
    b.set_bolt("ack", Ack()).shuffle("in")
    CALLS.clear()
    with LocalCluster({"squall.log.level": "ERROR"}) as lc:
        lc.submit("away", {"kafka.bootstrap.servers": bs}, b.build())
        wait(lambda: sum(committed(bs, f"g-{t_in}", t_in, 2).values()) >= 200, 60, "the first records committed")
        start = time.monotonic()
        kafka_broker.gate.away(8)
        time.sleep(8.5)
        end = time.monotonic()
        produce(bs, t_in, [(None, b"after") for _ in range(50)])
        wait(lambda: sum(committed(bs, f"g-{t_in}", t_in, 2).values()) >= 250, 60, "records after the outage")
    during = sorted(d for d, at in CALLS if start <= at <= end)
    worst, p99 = during[-1], during[int(len(during) * 0.99)]
    print(f"\nkafka-spout-away: calls={len(during)} max_ms={worst * 1000:.2f} p99_ms={p99 * 1000:.3f}")
    assert len(during) > 100 and worst < 0.5, (len(during), worst)  # before: over 1 s per refresh


def test_a_run_without_a_broker_says_so_and_fails(tmp_path):
    """``squall run`` of the example with nothing at the broker's address: a line per kind of
    client naming the address and what it tried (not librdkafka's line per reconnect), and
    a non-zero exit because the spout never got going."""
    port = free_port()
    with socket.socket() as s:  # nothing listens there: connections are refused
        s.bind(("127.0.0.1", port))
    squall = [sys.executable, "-c", "import sys; from squall.cli import main; sys.exit(main())"]
    res = subprocess.run([*squall, "run", str(REPO / "examples" / "kafka_wordcount.py"),
                          "--local", "--duration", "7", "-c", f"kafka.bootstrap.servers=127.0.0.1:{port}"],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    text = res.stdout + res.stderr
    naming = [line for line in text.splitlines() if f"127.0.0.1:{port}" in line]
    assert res.returncode == 1 and "components reported errors: lines (" in text, text
    assert "a spout that emitted nothing)" in text, text
    assert 2 <= len(naming) <= 8 and "librdkafka" not in text, text
    assert any("cannot reach Kafka at" in line and "read lines" in line for line in naming), text
