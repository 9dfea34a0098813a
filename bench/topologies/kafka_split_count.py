"""Kafka -> split -> count -> Kafka (bench/kafka_pipeline.py): sentences in, one record per
word out (key: the word, value: its running count), every tree acked when the broker has it."""
from squall import BasicBolt, Bolt, TopologyBuilder
from squall.contrib.kafka import EARLIEST, KafkaBolt, KafkaSpout

VALUE = 4  # the raw translator's fields: topic, partition, offset, key, value, timestamp


class Split(BasicBolt):
    def execute(self, t):
        emit = self.collector.emit
        for word in t.values[VALUE].decode().split():
            emit([word])

    def declare_output_fields(self, declarer):
        declarer.declare(["word"])


class Count(Bolt):
    def prepare(self, conf, context, collector):
        self.collector, self.counts = collector, {}

    def execute(self, t):
        word = t.values[0]
        n = self.counts[word] = self.counts.get(word, 0) + 1
        self.collector.emit([word, str(n)], anchors=t)
        self.collector.ack(t)

    def declare_output_fields(self, declarer):
        declarer.declare(["key", "value"])


def topology(bootstrap: str, topic: str, out_topic: str, group: str):
    b = TopologyBuilder()
    b.set_spout("kafka", KafkaSpout(topic, group_id=group, bootstrap_servers=bootstrap,
                                    conf={"kafka.spout.first.poll.offset.strategy": EARLIEST}))
    b.set_bolt("split", Split()).shuffle("kafka")
    b.set_bolt("count", Count()).fields("split", ["word"])
    b.set_bolt("out", KafkaBolt(out_topic, bootstrap_servers=bootstrap)).shuffle("count")
    return b.build()
