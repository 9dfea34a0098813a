"""Kafka in, Kafka out, for the Kafka cluster tests (topics and group from the environment
at build time: KPIPE_IN, KPIPE_OUT, KPIPE_DEAD, KPIPE_GROUP, KPIPE_MODE).

``plain``: KafkaSpout (text records, a ``failed`` stream) -> ``tag`` (a little slow, so that
kills land mid-stream) -> KafkaBolt to KPIPE_OUT, each output value ``partition:offset:value``
of its input; undecodable records go through the failed stream to KPIPE_DEAD.
``count``: CheckpointedKafkaSpout -> ``count``, a stateful count per key (exact).
``eos``: the same count, each update written as ``key n`` by a TransactionalKafkaBolt to
KPIPE_OUT: read committed, every count of every key exactly once.
"""
from __future__ import annotations

import os
import time

from squall import BasicBolt, StatefulBolt, TopologyBuilder
from squall.contrib.kafka import (
    CheckpointedKafkaSpout,
    KafkaBolt,
    KafkaSpout,
    StringTranslator,
    TransactionalKafkaBolt,
)

CONFIG = {"topology.max.spout.pending": 300, "topology.message.timeout.secs": 20,
          "topology.state.checkpoint.interval.ms": 300, "topology.state.checkpoint.timeout.secs": 5,
          "kafka.spout.offset.commit.period.ms": 500, "kafka.spout.retry.initial.delay.ms": 200,
          "kafka.spout.retry.max.delay.ms": 2000, "kafka.spout.retry.max.count": None,
          "kafka.spout.metrics.time.bucket.secs": 1, "kafka.spout.partition.refresh.period.ms": 2000}


class Slow:
    """A little work per tuple (kpipe.delay.secs), so that kills land mid-stream."""

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.delay = float(conf.get("kpipe.delay.secs", 0.0005))

    def work(self):
        if self.delay:
            time.sleep(self.delay)


class Tag(Slow, BasicBolt):
    def execute(self, t):
        self.work()
        self.collector.emit([t["key"], f"{t['partition']}:{t['offset']}:{t['value']}"])

    def declare_output_fields(self, d):
        d.declare(["key", "value"])


class Count(Slow, StatefulBolt):
    def execute(self, t):
        self.work()
        key = t["key"]
        self.state.put(key, self.state.get(key, 0) + 1)
        self.collector.ack(t)


class CountOut(Count):
    def execute(self, t):
        self.work()
        key = t["key"]
        n = self.state.get(key, 0) + 1
        self.state.put(key, n)
        self.collector.emit([key, f"{key} {n}"], anchors=t)
        self.collector.ack(t)

    def declare_output_fields(self, d):
        d.declare(["key", "value"])


def topology():
    env = os.environ
    b = TopologyBuilder()
    if env.get("KPIPE_MODE") == "eos":
        b.set_spout("kafka", CheckpointedKafkaSpout(env["KPIPE_IN"], group_id=env["KPIPE_GROUP"],
                                                    translator=StringTranslator()), 2)
        b.set_bolt("count", CountOut(), 2, num_tasks=3).fields("kafka", ["key"])
        # One transactional writer: Tansu 0.6 loses the transactional offset commits (the
        # bolt's markers) of transactions that overlap another producer's (tests/cluster/
        # contrib/kafka/test_kafka_broker.py); on Kafka any number of tasks works alike.
        b.set_bolt("write", TransactionalKafkaBolt(env["KPIPE_OUT"]), 1).shuffle("count")
        return b.build()
    if env.get("KPIPE_MODE", "plain") == "count":
        b.set_spout("kafka", CheckpointedKafkaSpout(env["KPIPE_IN"], group_id=env["KPIPE_GROUP"],
                                                    translator=StringTranslator()), 2)
        b.set_bolt("count", Count(), 2, num_tasks=3).fields("kafka", ["key"])
        return b.build()
    b.set_spout("kafka", KafkaSpout(env["KPIPE_IN"], group_id=env["KPIPE_GROUP"], translator=StringTranslator(),
                                    failed_stream=True), 2)
    b.set_bolt("tag", Tag(), 2).shuffle("kafka")
    b.set_bolt("write", KafkaBolt(env["KPIPE_OUT"]), 2).shuffle("tag")
    b.set_bolt("dead", KafkaBolt(env["KPIPE_DEAD"]), 1).shuffle("kafka", "failed")
    return b.build()
