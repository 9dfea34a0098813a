"""Words -> count (two executors, fields grouping): a small topology the CLI tests submit."""
from squall import Spout, TopologyBuilder
from squall.testing.components import NullBolt


class Words(Spout):
    def open(self, conf, context, collector):
        self.collector = collector

    def next_tuple(self):
        self.collector.emit(["word"])

    def declare_output_fields(self, declarer):
        declarer.declare(["word"])


def topology():
    builder = TopologyBuilder()
    builder.set_spout("words", Words())
    builder.set_bolt("count", NullBolt(), 2).fields("words", ["word"])
    return builder.build()
