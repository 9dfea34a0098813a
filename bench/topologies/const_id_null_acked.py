"""Topology file: storm-perf's ConstSpout -> IdBolt -> NullBolt with message ids and acking."""
from perf_topologies import const_id_null

CONFIG = {"topology.max.spout.pending": 1000}


def topology():
    return const_id_null(True)
