"""A spout shuffling to a bolt with one task per worker, where the task in worker port 2 is
slow (it sleeps 1 ms every 10 tuples, as if it waited on a slow service): the topology of
``local-load-aware`` (bench/load_aware.py)."""
from __future__ import annotations

import time

from squall import Bolt, Spout, TopologyBuilder


class Numbers(Spout):
    def open(self, conf, context, collector):
        self.emit = collector.emit
        self.n = 0

    def next_tuple(self):
        self.n += 1
        self.emit([self.n])

    def declare_output_fields(self, declarer):
        declarer.declare(["n"])


class Work(Bolt):
    """Fast, except the task in the worker on port 2."""

    def prepare(self, conf, context, collector):
        self.slow = context.worker_port == 2
        self.seen = 0

    def execute(self, tuple):
        self.seen += 1
        if self.slow and self.seen % 10 == 0:
            time.sleep(0.001)


def topology():
    b = TopologyBuilder()
    b.set_spout("numbers", Numbers())
    b.set_bolt("work", Work(), 2).shuffle("numbers")
    return b.build()


CONFIG = {"topology.workers": 2, "topology.acker.executors": 0}
