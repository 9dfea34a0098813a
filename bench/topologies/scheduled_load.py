"""Topology file: a spout emitting on a schedule (see loadgen.py) -> IdBolt -> NullBolt,
acked. Its results land as JSON in ``bench.load.output.file`` when the plan finishes.

Configuration (user keys): ``bench.load.output.file`` (required), ``bench.load.fractions``
("0.25,0.5,0.75"), ``bench.load.warmup.secs`` (3), ``bench.load.duration.secs`` (10),
``bench.load.drain.secs`` (10).
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from loadgen import LoadPlan
from perf_topologies import spout_id_null
from squall import Spout
from squall.daemons.local_state import write_atomic

CONFIG = {"topology.max.spout.pending": 1000}
_monotonic = time.monotonic


class ScheduledSpout(Spout):
    """Emits ``[scheduled time]`` with the message id ``(phase, seq, scheduled time)``."""

    def open(self, conf, context, collector):
        self.emit = collector.emit
        self.output = Path(conf["bench.load.output.file"])
        fractions = [float(f) for f in str(conf.get("bench.load.fractions", "0.25,0.5,0.75")).split(",")]
        self.plan = LoadPlan(fractions, float(conf.get("bench.load.warmup.secs", 3)),
                             float(conf.get("bench.load.duration.secs", 10)),
                             float(conf.get("bench.load.drain.secs", 10)))
        self.written = False

    def next_tuple(self):
        now = _monotonic()
        msg_id = self.plan.due(now)
        if msg_id is not None:
            self.emit([msg_id[2]], msg_id=msg_id)
        if now >= self.plan.end and not self.written and self.plan.finished(now):
            self.written = True
            write_atomic(self.output, json.dumps(self.plan.result()).encode(), sync=False)

    def ack(self, msg_id):
        self.plan.acked(msg_id, _monotonic())

    def fail(self, msg_id):
        self.plan.failed(msg_id)

    def declare_output_fields(self, declarer):
        declarer.declare(["scheduled"])


def topology():
    return spout_id_null(ScheduledSpout())
