"""Topology file: storm-perf's ConstSpout -> IdBolt -> NullBolt, no acking."""
from perf_topologies import const_id_null

CONFIG = {"topology.acker.executors": 0}


def topology():
    return const_id_null(False)
