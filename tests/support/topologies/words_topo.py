"""Words -> count (two executors, fields grouping): a small topology the CLI tests submit."""
from squall import Bolt, Spout, TopologyBuilder


class Words(Spout):
    def open(self, conf, context, collector):
        self.collector = collector

    def next_tuple(self):
        self.collector.emit(["word"])

    def declare_output_fields(self, declarer):
        declarer.declare(["word"])


class Count(Bolt):
    def execute(self, tuple):
        pass


def topology():
    builder = TopologyBuilder()
    builder.set_spout("words", Words())
    builder.set_bolt("count", Count(), 2).fields("words", ["word"])
    return builder.build()
