"""A stateful count of N keyed events, for the state tests and the chaos test.

``events`` (a StatefulSpout, two tasks) emits event ``i`` with key ``key_of(i)`` and keeps
its position in its state; ``relay`` (stateless) passes them on; ``count`` (a
StatefulBolt, fields grouping on the key) counts per key in its state. Configuration:
``keyed.events`` (N), ``keyed.keys`` (K), ``keyed.rate`` (events/s per spout task, 0: as
fast as it can), ``keyed.fail.every`` (the relay fails event i the first time it sees it
when i % every == 0; 0: never) and ``keyed.raise.every`` (the count raises likewise).
"""
from __future__ import annotations

import collections
import time

from squall import Bolt, StatefulBolt, StatefulSpout, TopologyBuilder


def key_of(i: int, keys: int) -> str:
    return f"k{(i * 7919) % keys}"


def reference(n: int, keys: int) -> dict[str, int]:
    return dict(collections.Counter(key_of(i, keys) for i in range(n)))


class Events(StatefulSpout):
    def open(self, conf, context, collector):
        self.collector = collector
        self.n, self.keys = int(conf["keyed.events"]), int(conf["keyed.keys"])
        self.rate = float(conf.get("keyed.rate", 0))
        self.step = len(context.component_tasks(context.this_component_id))
        self.first = context.this_task_index
        self.next_at = time.monotonic()

    def init_state(self, state):
        self.state = state
        self.offset = state.get("offset", self.first)  # this task emits first, first + step, ...

    def next_tuple(self):
        if self.offset >= self.n:
            return
        if self.rate:
            now = time.monotonic()
            if now < self.next_at:
                return
            self.next_at = max(self.next_at + 1.0 / self.rate, now - 0.1)
        i = self.offset
        self.collector.emit([key_of(i, self.keys), i], msg_id=i)
        self.offset += self.step

    def pre_prepare(self, txid):
        self.state.put("offset", self.offset)

    def declare_output_fields(self, d):
        d.declare(["key", "i"])


class Relay(Bolt):
    def prepare(self, conf, context, collector):
        self.collector = collector
        self.every = int(conf.get("keyed.fail.every", 0))
        self.failed_once: set[int] = set()

    def execute(self, t):
        i = t["i"]
        if self.every and i % self.every == 0 and i not in self.failed_once:
            self.failed_once.add(i)
            self.collector.fail(t)
            return
        self.collector.emit([t["key"], i], anchors=t)
        self.collector.ack(t)

    def declare_output_fields(self, d):
        d.declare(["key", "i"])


class Count(StatefulBolt):
    def prepare(self, conf, context, collector):
        self.collector = collector
        self.every = int(conf.get("keyed.raise.every", 0))
        self.raised_once: set[int] = set()

    def execute(self, t):
        i = t["i"]
        if self.every and i % self.every == 0 and i not in self.raised_once:
            self.raised_once.add(i)
            raise RuntimeError(f"injected failure at event {i}")
        key = t["key"]
        self.state.put(key, self.state.get(key, 0) + 1)
        self.collector.ack(t)


CONFIG = {"topology.max.spout.pending": 2000, "topology.message.timeout.secs": 10,
          "topology.state.checkpoint.interval.ms": 300}


def topology(spout_tasks: int = 2, count_tasks: int = 3):
    b = TopologyBuilder()
    b.set_spout("events", Events(), spout_tasks)
    b.set_bolt("relay", Relay(), 2).shuffle("events")
    b.set_bolt("count", Count(), 2, num_tasks=count_tasks).fields("relay", ["key"])
    return b.build()
