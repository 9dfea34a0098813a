"""Issue 34's Kafka case against a real broker (Tansu): JSON records through two workers
(local mode, tuples serialized between them exactly as between worker processes), one
record holding an integer beyond 64 bits and one whose translated value no serializer
carries (a poison record).

The big integer is an ordinary JSON value: it arrives intact and is counted. The poison
record fails alone: its spout hears why, it goes to the dead letters with that reason, and
no good record goes with it. In a checkpointed topology every good record is counted once
by committed state, and the poison one is reported, never covered silently.
"""
from __future__ import annotations

import json

import pytest

from squall import Bolt, LocalCluster, StatefulBolt, TopologyBuilder
from squall.contrib.kafka import CheckpointedKafkaSpout, FunctionTranslator, KafkaBolt, KafkaSpout
from squall.contrib.kafka.records import REASON_HEADER
from squall.testing.components import Recorder, RecordingBolt, unique_name
from squall.testing.state import committed_component, wait_committed
from squall.testing.waiting import wait_for
from support.kafka import committed, create_topic, produce, read_all

pytestmark = pytest.mark.cluster

N = 2001
BIG_AT, POISON_AT = 700, 1400   # offsets of the 2**70 record and of the poison one
BIG = 2 ** 70
FIELDS = ("offset", "value")


class Opaque:
    """A value of a type no one registered in topology.serializers."""

    def __init__(self, text):
        self.text = text


def translate(record):
    """The value parsed as JSON; a record marked ``opaque`` holds an Opaque instead."""
    value = json.loads(record.value())
    if value.get("opaque"):
        value = Opaque(value["id"])
    return [record.offset(), value]


def records():
    out = []
    for i in range(N):
        value = {"id": i, "n": i}
        if i == BIG_AT:
            value["n"] = BIG
        if i == POISON_AT:
            value["opaque"] = True
        out.append((str(i).encode(), json.dumps(value).encode()))
    return out


class Seen(Bolt):
    """Records (offset, n) of each record it gets, in this process, and acks it."""

    def __init__(self, name):
        self.name = name

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, t):
        Recorder.add(self.name, (t["offset"], t["value"]["n"]))
        self.collector.ack(t)


def workers_of(lc, name):
    """The components each worker of ``name`` runs."""
    return [{e["component"] for e in m["executors"]} for m in lc.metrics(name)]


def apart(lc, name, a, b):
    """Do components ``a`` and ``b`` run in different workers only (every tuple crosses)?"""
    return not any(a in w and b in w for w in workers_of(lc, name))


CONF = {"squall.log.level": "ERROR", "topology.workers": 2, "topology.acker.executors": 1,
        "topology.message.timeout.secs": 30, "kafka.spout.retry.initial.delay.ms": 100,
        "kafka.spout.retry.max.count": 2, "kafka.spout.offset.commit.period.ms": 200}


def test_poison_record_alone_in_the_dead_letters(kafka_broker):
    bs = kafka_broker.bootstrap
    t_in, t_dead = kafka_broker.topic_name("poison"), kafka_broker.topic_name("poison-dead")
    create_topic(bs, t_in, 1)
    create_topic(bs, t_dead, 1)
    produce(bs, t_in, records(), partition=0)
    name = unique_name("poison")
    b = TopologyBuilder()
    b.set_spout("in", KafkaSpout(t_in, group_id=f"g-{t_in}", failed_stream=True,
                                 translator=FunctionTranslator(translate, FIELDS)))
    b.set_bolt("seen", Seen(name), 1).shuffle("in")
    b.set_bolt("dead", KafkaBolt(t_dead), 1).shuffle("in", "failed")
    b.set_bolt("reasons", RecordingBolt(name + ".failed", ["offset", "reason"]), 2).shuffle("in", "failed")
    with LocalCluster() as lc:
        lc.submit(name, {**CONF, "kafka.bootstrap.servers": bs}, b.build())
        assert apart(lc, name, "in", "seen"), workers_of(lc, name)
        wait_for(lambda: committed(bs, f"g-{t_in}", t_in, 1).get(0, 0) >= N, 120, "every offset committed",
                 interval=0.1)
        errors = lc.errors(name)
    letters = read_all(bs, t_dead, idle=2.0)
    dead = sorted(int(m.key()) for m in letters)
    seen = dict(Recorder.get(name))
    reasons = dict(RecordingBolt.values(name + ".failed"))
    print(f"kafka-poison: records={N} seen={len(seen)} dead={len(dead)} good_dead={len(set(dead) - {POISON_AT})}")
    assert dead == [POISON_AT]  # the poison record alone: no good neighbour
    assert sorted(seen) == [i for i in range(N) if i != POISON_AT]
    assert seen[BIG_AT] == BIG  # an integer beyond 64 bits is a JSON value like any other
    reason = reasons[POISON_AT]
    for part in ("'in'", "'default'", "'value'", "Opaque", "topology.serializers"):
        assert part in reason, reason
    headers = dict(letters[0].headers() or [])
    assert reason in headers[REASON_HEADER].decode()  # the dead letter says why
    texts = [e["error"] for es in errors.values() for e in es]
    assert any("Opaque" in t and "'value'" in t for t in texts), texts


class CountOffsets(StatefulBolt):
    """Counts each record once in checkpointed state (offset -> 1) and acks it."""

    def execute(self, t):
        self.state.put(t["offset"], t["value"]["n"])
        self.collector.ack(t)


def test_checkpointed_state_counts_every_good_record(kafka_broker):
    bs = kafka_broker.bootstrap
    t_in = kafka_broker.topic_name("poison-ck")
    create_topic(bs, t_in, 1)
    produce(bs, t_in, records(), partition=0)
    name = unique_name("poison-ck")
    conf = {**CONF, "kafka.bootstrap.servers": bs, "topology.state.provider": "memory",
            "topology.state.checkpoint.interval.ms": 200, "topology.max.spout.pending": 500}
    b = TopologyBuilder()
    b.set_spout("in", CheckpointedKafkaSpout(t_in, group_id=f"g-{t_in}", failed_stream=True,
                                             translator=FunctionTranslator(translate, FIELDS)))
    b.set_bolt("count", CountOffsets(), 1).shuffle("in")
    b.set_bolt("reasons", RecordingBolt(name + ".failed", ["offset", "reason"]), 1).shuffle("in", "failed")
    with LocalCluster() as lc:
        lc.submit(name, conf, b.build())
        assert apart(lc, name, "in", "count"), workers_of(lc, name)
        full = {**lc.conf, **conf, "topology.name": name}

        def covered(txid):
            spout = committed_component(full, name, "in", 1, txid)[0]
            return (spout.get("offsets") or {}).get(f"{t_in}-0", 0) >= N

        record = wait_committed(full, name, covered, 120, "a checkpoint covering every offset")
        txid = record.restore_point()
        counts = committed_component(full, name, "count", 1, txid)
        errors = lc.errors(name)
    counted = {k: v for state in counts for k, v in state.items()}
    reasons = dict(RecordingBolt.values(name + ".failed"))
    print(f"kafka-poison-checkpointed: records={N} counted={len(counted)} txid={txid}")
    assert sorted(counted) == [i for i in range(N) if i != POISON_AT]
    assert counted[BIG_AT] == BIG
    assert list(reasons) == [POISON_AT] and "Opaque" in reasons[POISON_AT]
    texts = [e["error"] for es in errors.values() for e in es]
    assert any("Opaque" in t for t in texts), texts
