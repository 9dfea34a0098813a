"""Windowed and stateful topologies for tests/test_spark_state.py (loaded as topology
modules, so Spark workers get this file through squall.spark's code shipping)."""
from __future__ import annotations

import collections

from squall import BasicBolt, Duration, StatefulBolt, TopologyBuilder, WindowedBolt
from squall.contrib import JsonLinesSpout
from squall.testing.components import RecordingBolt

ROWS = ["key", "ts", "v"]


class KeySums(WindowedBolt):
    """Per window and key, the sum of ``v``."""

    def execute(self, window):
        sums = collections.Counter()
        for t in window:
            sums[t["key"]] += t["v"]
        for key, total in sorted(sums.items()):
            self.collector.emit([window.end, key, total])

    def declare_output_fields(self, declarer):
        declarer.declare(["end", "key", "total"])


class RunningCount(StatefulBolt, BasicBolt):
    """Counts per key in its state and emits the running count."""

    def execute(self, tup):
        n = self.state.get(tup["key"], 0) + 1
        self.state.put(tup["key"], n)
        self.collector.emit([tup["key"], n])

    def declare_output_fields(self, declarer):
        declarer.declare(["key", "count"])


def windowed(processing_time: bool = False, record: str | None = None):
    """Sliding event-time windows (10 s by 5 s, 3 s lateness); ``record``: also record the
    sums in memory under that name (live runs)."""
    bolt = KeySums().with_window(Duration(10), Duration(5))
    if not processing_time:
        bolt = bolt.with_timestamp_field("ts").with_lateness(Duration(3))
    b = TopologyBuilder()
    b.set_spout("rows", JsonLinesSpout(ROWS, conf_key="rows.path"))
    b.set_bolt("sums", bolt).global_("rows")
    if record:
        b.set_bolt("out", RecordingBolt(record)).shuffle("sums")
    return b.build()


def counting():
    b = TopologyBuilder()
    b.set_spout("rows", JsonLinesSpout(ROWS, conf_key="rows.path"))
    b.set_bolt("count", RunningCount(), 2).fields("rows", ["key"])
    return b.build()
