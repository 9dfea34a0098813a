"""A plain topology: fixed rows into a null bolt (what takes a slot after a hostile one)."""
from squall import TopologyBuilder
from squall.testing.components import FixedTupleSpout, NullBolt


def topology():
    builder = TopologyBuilder()
    builder.set_spout("rows", FixedTupleSpout("rows", [[i] for i in range(1000)], ["n"], reliable=False), 1)
    builder.set_bolt("sink", NullBolt(), 1).shuffle("rows")
    return builder.build()
