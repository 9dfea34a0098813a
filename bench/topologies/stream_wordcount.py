"""Word count as a stream pipeline, and the same by hand with spouts and bolts, over
examples/wordcount.py's sentences (its RandomSentenceSpout: reliable, acked).

Both count every word with a running count that emits (word, count) per word, as
``count_by_key`` does and as Bytewax's ``stateful_map`` word count does:

- stream: sentences -> [flat_map split, map_to_pair (w, 1)] (one fused bolt) -> fields on
  key -> [count_by_key] (one bolt);
- by hand: sentences -> SplitPairs (emits (word, 1) anchored, acks) -> fields on word ->
  RunningCount (emits (word, count) anchored, acks).
"""
from __future__ import annotations

from wordcount import RandomSentenceSpout

from squall import Bolt, TopologyBuilder
from squall.streams import StreamBuilder

CONFIG = {"topology.max.spout.pending": 500}


def stream_topology():
    builder = StreamBuilder()
    (builder.new_stream(RandomSentenceSpout(), name="sentences")
        .flat_map(str.split)
        .map_to_pair(lambda word: (word, 1))
        .count_by_key(name="count"))
    return builder.build()


class SplitPairs(Bolt):
    def prepare(self, conf, context, collector):
        self.emit, self.ack = collector.emit, collector.ack

    def execute(self, tuple):
        emit = self.emit
        for word in tuple.values[0].split():
            emit([word, 1], anchors=tuple)
        self.ack(tuple)

    def declare_output_fields(self, declarer):
        declarer.declare(["word", "one"])


class RunningCount(Bolt):
    def prepare(self, conf, context, collector):
        self.emit, self.ack = collector.emit, collector.ack
        self.counts: dict[str, int] = {}

    def execute(self, tuple):
        word = tuple.values[0]
        n = self.counts[word] = self.counts.get(word, 0) + tuple.values[1]
        self.emit([word, n], anchors=tuple)
        self.ack(tuple)

    def declare_output_fields(self, declarer):
        declarer.declare(["word", "count"])


def hand_topology():
    builder = TopologyBuilder()
    builder.set_spout("sentences", RandomSentenceSpout())
    builder.set_bolt("split", SplitPairs()).shuffle("sentences")
    builder.set_bolt("count", RunningCount()).fields("split", ["word"])
    return builder.build()
