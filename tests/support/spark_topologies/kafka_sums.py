"""Running sums per key from a Kafka topic (topic and group from KSPARK_TOPIC, KSPARK_GROUP;
live results to KSPARK_OUT), for the Kafka backfill test: the same file runs live in local
mode and on Spark with ``--input kafka=kafka:``."""
from __future__ import annotations

import os

from squall import BasicBolt, TopologyBuilder
from squall.contrib.kafka import KafkaBolt, KafkaSpout, StringTranslator


class Sum(BasicBolt):
    def prepare(self, conf, context, collector):
        self.collector = collector
        self.sums: dict[str, int] = {}

    def execute(self, t):
        key = t["key"]
        self.sums[key] = total = self.sums.get(key, 0) + int(t["value"])
        self.collector.emit([key, str(total)])

    def declare_output_fields(self, d):
        d.declare(["key", "value"])


CONFIG = {"kafka.spout.offset.commit.period.ms": 200}


def topology():
    b = TopologyBuilder()
    b.set_spout("kafka", KafkaSpout(os.environ["KSPARK_TOPIC"], group_id=os.environ["KSPARK_GROUP"],
                                    translator=StringTranslator()), 2)
    b.set_bolt("sum", Sum(), 2).fields("kafka", ["key"])
    b.set_bolt("write", KafkaBolt(os.environ.get("KSPARK_OUT", "unused")), 1).shuffle("sum")
    return b.build()
