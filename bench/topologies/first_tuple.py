"""Topology file for the submit-latency benchmark: every bolt task records the wall-clock
time of its first tuple under ``bench.output.dir``."""
import os
import time
from pathlib import Path

from squall import Bolt, Spout, TopologyBuilder


class Ticker(Spout):
    def open(self, conf, context, collector):
        self.collector, self.n = collector, 0

    def next_tuple(self):
        self.n += 1
        self.collector.emit([self.n])
        time.sleep(0.001)

    def declare_output_fields(self, d):
        d.declare(["n"])


class FirstSeen(Bolt):
    def prepare(self, conf, context, collector):
        self.path = Path(conf["bench.output.dir"]) / f"first-{context.this_task_id}-{os.getpid()}"
        self.done = False

    def execute(self, t):
        if not self.done:
            self.path.write_text(repr(time.time()))
            self.done = True


CONFIG = {"topology.acker.executors": 0}


def topology():
    b = TopologyBuilder()
    b.set_spout("ticker", Ticker())
    b.set_bolt("first", FirstSeen(), 3).shuffle("ticker")
    return b.build()
