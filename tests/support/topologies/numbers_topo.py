"""Test topology for worker processes: a reliable spout of numbers -> a recording sink.

Copied into a test's ``code/`` directory and pickled from there, the way a submitted
bundle is. Behaviour comes from the topology conf (conf.json):
- ``test.out_dir``: where files go; ``test.count``: numbers 0..count-1 are emitted once
  each (failed ones are replayed); ``test.rate``: at most this many emits per second;
- ``test.fail_open``: the spout's ``open`` raises (a worker whose executor cannot start).
Files: ``task-<task>.jsonl`` (the sink's record of every received tuple, read with
``squall.testing.components.recorded``), ``acked-<task>.txt`` (numbers whose tuple tree
completed) and ``events-<task>.txt`` (activate/deactivate).
"""
from __future__ import annotations

import os
import time

from squall import Spout, TopologyBuilder
from squall.testing.components import FileRecordingBolt


def _append(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(line + "\n")


class NumberSpout(Spout):
    def open(self, conf, context, collector):
        if conf.get("test.fail_open"):
            raise RuntimeError("test.fail_open is set: this spout refuses to open")
        self.collector = collector
        self.count = int(conf["test.count"])
        self.gap = 1.0 / float(conf.get("test.rate", 1_000_000))
        self.dir = conf["test.out_dir"]
        self.task = context.this_task_id
        self.next = 0
        self.last = 0.0
        self.replay: list[int] = []

    def next_tuple(self):
        now = time.monotonic()
        if now - self.last < self.gap:
            return
        if self.replay:
            n = self.replay.pop()
        elif self.next < self.count:
            n, self.next = self.next, self.next + 1
        else:
            return
        self.last = now
        self.collector.emit([n], msg_id=n)

    def ack(self, msg_id):
        _append(os.path.join(self.dir, f"acked-{self.task}.txt"), str(msg_id))

    def fail(self, msg_id):
        self.replay.append(msg_id)

    def activate(self):
        _append(os.path.join(self.dir, f"events-{self.task}.txt"), "activate")

    def deactivate(self):
        _append(os.path.join(self.dir, f"events-{self.task}.txt"), "deactivate")

    def declare_output_fields(self, declarer):
        declarer.declare(["n"])


def topology():
    builder = TopologyBuilder()
    builder.set_spout("numbers", NumberSpout(), 1)
    builder.set_bolt("sink", FileRecordingBolt("test.out_dir"), 2).shuffle("numbers")
    return builder.build()
