"""A topology to operate while it runs (set-log-level, debug, profile, kill-workers, monitor):
numbers -> square -> total (the spout and the sink of ``observed``), 200 numbers a second
with message ids.

``square`` logs through Python's logging (logger ``operated.square``): an INFO line for every
50th number, which the worker's log shows only once its level is set (the root logger is at
WARNING); and it raises the same error for every 400th number (``squall errors`` groups them).
"""
from __future__ import annotations

import logging

from observed import Numbers, Total  # shipped with this file: the bundle is its folder

from squall import Bolt, TopologyBuilder

log = logging.getLogger("operated.square")


class Square(Bolt):
    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tuple):
        n = tuple["n"]
        if n % 50 == 0:
            log.info("operated-info n=%d", n)
        if n % 400 == 0:
            raise ValueError("four hundred is too round")
        self.collector.emit([n, n * n], anchors=tuple)
        self.collector.ack(tuple)

    def declare_output_fields(self, declarer):
        declarer.declare(["n", "square"])


def topology():
    builder = TopologyBuilder()
    builder.set_spout("numbers", Numbers(), 1)
    builder.set_bolt("square", Square(), 2).shuffle("numbers")
    builder.set_bolt("total", Total(), 1).global_("square")
    return builder.build()


CONFIG = {"topology.workers": 2, "topology.max.spout.pending": 100, "test.rate": 200}
