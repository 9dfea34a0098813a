"""A stateful topology whose bolt keeps a count per key, the keys tagged with its owner's
``test.ledger.tag``; its ``init_state`` reports what it found there, once: ``found [keys]``."""
import time

from tenant import Counting

from squall import StatefulBolt, TopologyBuilder


class Rows(Counting):
    def next_tuple(self):
        time.sleep(0.01)
        super().next_tuple()


class Ledger(StatefulBolt):
    def prepare(self, conf, context, collector):
        self.collector = collector
        self.tag = str(conf.get("test.ledger.tag", "?"))

    def init_state(self, state):
        self.state = state
        self.collector.report_error(f"found {sorted(k for k, _ in state.items())}")

    def execute(self, tup):
        key = f"{self.tag}-{tup['n'] % 3}"
        self.state.put(key, self.state.get(key, 0) + 1)
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        declarer.declare([])


def topology():
    builder = TopologyBuilder()
    builder.set_spout("rows", Rows(), 1)
    builder.set_bolt("ledger", Ledger(), 1).shuffle("rows")
    return builder.build()
