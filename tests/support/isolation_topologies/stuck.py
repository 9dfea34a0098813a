"""A topology whose bolt's prepare() never returns; its spout opens and emits."""
import time

from squall import Bolt, TopologyBuilder
from squall.testing.components import FixedTupleSpout


class Stuck(Bolt):
    def prepare(self, conf, context, collector):
        while True:
            time.sleep(60)

    def execute(self, t):
        pass

    def declare_output_fields(self, declarer):
        declarer.declare([])


def topology():
    builder = TopologyBuilder()
    builder.set_spout("rows", FixedTupleSpout("rows", [[i] for i in range(10)], ["n"], reliable=False), 1)
    builder.set_bolt("stuck", Stuck(), 1).shuffle("rows")
    return builder.build()
