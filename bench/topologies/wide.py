"""Topology file for bench/scale_sim.py: many executors and no user work (the simulator's
supervisors never run it; nimbus schedules it). 20 spout and 940 bolt executors; with one
acker per worker (40 by default) a topology of 1,000 executors."""
from perf_topologies import ConstSpout, NullBolt
from squall import TopologyBuilder

SPOUTS, BOLTS = 20, 940
CONFIG = {"topology.workers": 40}


def topology():
    builder = TopologyBuilder()
    builder.set_spout("events", ConstSpout(True), SPOUTS)
    builder.set_bolt("work", NullBolt(), BOLTS).shuffle("events")
    return builder.build()
