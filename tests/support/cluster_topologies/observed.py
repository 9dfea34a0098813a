"""A small topology for the web UI and worker-log tests: numbers -> square -> total.

``square`` prints a marker line for four of every 500 numbers (``test.print.every``) (worker
logs must show it), reports an error for every number divisible by 1000 and raises on every
1000th number after 500 (the UI's error list must show both, the exception's traceback too).
The spout emits at a bounded rate with message ids, so counters settle soon after a
deactivation.
"""
from __future__ import annotations

import time

from squall import Bolt, Spout, TopologyBuilder


class Numbers(Spout):
    def open(self, conf, context, collector):
        self.collector, self.n = collector, 0
        self.rate = float(conf.get("test.rate", 2000))
        self.next_at = time.monotonic()

    def next_tuple(self):
        now = time.monotonic()
        if now < self.next_at:
            return
        self.next_at = max(self.next_at + 1.0 / self.rate, now - 0.1)
        self.n += 1
        self.collector.emit([self.n], msg_id=self.n)

    def declare_output_fields(self, declarer):
        declarer.declare(["n"])


def look_for_moons(n: int) -> None:
    raise ValueError(f"no moons here ({n})")


class Square(Bolt):
    def prepare(self, conf, context, collector):
        self.collector, self.task = collector, context.this_task_id
        self.print_every = int(conf.get("test.print.every", 500))

    def execute(self, tuple):
        n = tuple["n"]
        # Four numbers in a row: shuffle deals consecutive tuples to different tasks.
        if n % self.print_every < min(4, self.print_every):
            print(f"square-marker task={self.task} n={n}", flush=True)
        if n % 1000 == 0:
            self.collector.report_error(f"round number {n} seen by task {self.task}")
        if n % 1000 == 500:
            look_for_moons(n)
        self.collector.emit([n, n * n], anchors=tuple)
        self.collector.ack(tuple)

    def declare_output_fields(self, declarer):
        declarer.declare(["n", "square"])


class Total(Bolt):
    def prepare(self, conf, context, collector):
        self.collector, self.total = collector, 0

    def execute(self, tuple):
        self.total += tuple["square"]
        self.collector.ack(tuple)


def topology():
    builder = TopologyBuilder()
    builder.set_spout("numbers", Numbers(), 1)
    builder.set_bolt("square", Square(), 2).shuffle("numbers")
    builder.set_bolt("total", Total(), 1).global_("square")
    return builder.build()


CONFIG = {"topology.workers": 2, "topology.max.spout.pending": 200}
