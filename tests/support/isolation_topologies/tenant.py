"""What the isolation topologies share: a spout that counts (each hostile one does its deed
in ``open``) and the topology around one spout: it, then a null bolt."""
from squall import Spout, TopologyBuilder
from squall.testing.components import NullBolt


class Counting(Spout):
    def open(self, conf, context, collector):
        self.collector, self.n = collector, 0

    def next_tuple(self):
        self.n += 1
        self.collector.emit([self.n])

    def declare_output_fields(self, declarer):
        declarer.declare(["n"])


def one_spout(name, spout):
    builder = TopologyBuilder()
    builder.set_spout(name, spout, 1)
    builder.set_bolt("sink", NullBolt(), 1).shuffle(name)
    return builder.build()
