"""Word count from Kafka to Kafka: lines of a topic -> split -> count (fields on "word") ->
KafkaBolt writing "word count" records to another topic, keyed by word.

The spout commits a line's offset only once every word of it is counted and written, so
a restarted topology neither skips nor loses lines (words may be counted again: at least
once; see docs/guide/kafka.md for the checkpointed, exactly-once form).

Needs the ``kafka`` extra (pip install 'squall[kafka]') and a broker:
    python examples/kafka_wordcount.py --bootstrap 127.0.0.1:9092 --duration 30
or through the CLI:
    squall run examples/kafka_wordcount.py --local -c kafka.bootstrap.servers=127.0.0.1:9092
    squall submit examples/kafka_wordcount.py -c kafka.bootstrap.servers=kafka:9092
Topics: ``lines`` in, ``word-counts`` out (KAFKA_WORDCOUNT_IN / KAFKA_WORDCOUNT_OUT change them).
"""
from __future__ import annotations

import argparse
import os
import time

from squall import BasicBolt, TopologyBuilder
from squall.contrib.kafka import KafkaBolt, KafkaSpout, StringTranslator

CONFIG = {"topology.max.spout.pending": 2000}


class Split(BasicBolt):
    def execute(self, t):
        for word in (t["value"] or "").split():
            self.collector.emit([word.lower()])

    def declare_output_fields(self, d):
        d.declare(["word"])


class Count(BasicBolt):
    def prepare(self, conf, context, collector):
        self.collector = collector
        self.counts: dict[str, int] = {}

    def execute(self, t):
        word = t["word"]
        self.counts[word] = n = self.counts.get(word, 0) + 1
        self.collector.emit([word, f"{word} {n}"])

    def declare_output_fields(self, d):
        d.declare(["key", "value"])


def topology():
    # The topics are read when the topology is built (not when this file is imported).
    topic_in = os.environ.get("KAFKA_WORDCOUNT_IN", "lines")
    topic_out = os.environ.get("KAFKA_WORDCOUNT_OUT", "word-counts")
    b = TopologyBuilder()
    # Lines as text; a line that is not UTF-8 is reported and skipped (and committed past).
    b.set_spout("lines", KafkaSpout(topic_in, group_id="kafka-wordcount", translator=StringTranslator()), 2)
    b.set_bolt("split", Split(), 2).shuffle("lines")
    b.set_bolt("count", Count(), 2).fields("split", ["word"])
    b.set_bolt("write", KafkaBolt(topic_out), 2).shuffle("count")
    return b.build()


def main() -> None:
    from squall import LocalCluster

    ap = argparse.ArgumentParser(description="Kafka word count in local mode")
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--duration", type=float, default=30.0)
    args = ap.parse_args()
    with LocalCluster() as cluster:
        cluster.submit("kafka-wordcount", {**CONFIG, "kafka.bootstrap.servers": args.bootstrap}, topology())
        time.sleep(args.duration)
        for s in cluster.stats("kafka-wordcount"):
            print(s["component"], {k: s.get(k) for k in ("emitted", "executed", "acked", "failed")})


if __name__ == "__main__":
    main()
