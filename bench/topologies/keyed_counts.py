"""A keyed count, with and without checkpointed state, for the state benchmark.

Both emit event i with key ``k<i % KEYS>`` and a message id, and count per key; the
stateful one keeps its read position and the counts in KeyValueState and checkpoints
every second. Same spout, grouping, acking and pending bound otherwise.
"""
from __future__ import annotations

from squall import Bolt, Spout, StatefulBolt, StatefulSpout, TopologyBuilder

KEYS = 10_000
NAMES = [f"k{i}" for i in range(KEYS)]


class Events(Spout):
    def open(self, conf, context, collector):
        self.emit = collector.emit
        self.offset = 0

    def next_tuple(self):
        i = self.offset
        self.emit([NAMES[i % KEYS], i], msg_id=i)
        self.offset = i + 1

    def declare_output_fields(self, declarer):
        declarer.declare(["key", "i"])


class StatefulEvents(StatefulSpout, Events):
    def init_state(self, state):
        self.state = state
        self.offset = state.get("offset", 0)

    def pre_prepare(self, txid):
        self.state.put("offset", self.offset)


class Count(Bolt):
    def prepare(self, conf, context, collector):
        self.ack = collector.ack
        self.counts: dict[str, int] = {}

    def execute(self, tuple):
        key = tuple.values[0]
        self.counts[key] = self.counts.get(key, 0) + 1
        self.ack(tuple)


class StatefulCount(StatefulBolt):
    def prepare(self, conf, context, collector):
        self.ack = collector.ack

    def init_state(self, state):
        self.state = state
        self.get, self.put = state.get, state.put

    def execute(self, tuple):
        key = tuple.values[0]
        self.put(key, self.get(key, 0) + 1)
        self.ack(tuple)


def topology(stateful: bool):
    b = TopologyBuilder()
    b.set_spout("events", StatefulEvents() if stateful else Events())
    b.set_bolt("count", StatefulCount() if stateful else Count()).fields("events", ["key"])
    return b.build()
