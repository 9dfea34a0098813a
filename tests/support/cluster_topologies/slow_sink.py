"""The memory probe: an unacked spout of 100-byte tuples as fast as it can go, feeding a
bolt about ten times slower, in two workers (one each)."""
from __future__ import annotations

import time

from squall import Bolt, Spout, TopologyBuilder

PAYLOAD = "x" * 100


class Flood(Spout):
    def open(self, conf, context, collector):
        self.collector, self.n = collector, 0

    def next_tuple(self):
        self.n += 1
        self.collector.emit([self.n, PAYLOAD])

    def declare_output_fields(self, d):
        d.declare(["n", "payload"])


class Slow(Bolt):
    """Spends 40 us of CPU on every tuple: at most 25,000 tuples/s, holding the GIL as
    real per-tuple work does."""

    def execute(self, t):
        end = time.perf_counter() + 40e-6
        while time.perf_counter() < end:
            pass


def topology():
    b = TopologyBuilder()
    b.set_spout("flood", Flood())
    b.set_bolt("slow", Slow()).shuffle("flood")
    return b.build()


CONFIG = {"topology.workers": 2, "topology.acker.executors": 0}
