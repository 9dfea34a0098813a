"""Word count for cluster tests: fixed sentences, results and acks in files.

The spout behaves like a durable source with committed offsets: acked message ids are
appended to files under ``test.output.dir``, and a (re)started spout skips ids already
acked. The counter is an idempotent sink: it writes (sentence id, position, word) lines,
which a test dedupes. Both survive workers being killed, as real pipelines must.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from squall import Bolt, Spout, TopologyBuilder

WORDS = ["the", "cow", "jumped", "over", "moon", "an", "apple", "a", "day", "keeps", "doctor", "away"]


def sentences(n: int) -> list[str]:
    return [" ".join(WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(3 + i % 4)) for i in range(n)]


class Sentences(Spout):
    def open(self, conf, context, collector):
        self.collector = collector
        self.out = Path(conf["test.output.dir"])
        self.rate = float(conf.get("test.rate", 400))
        done = set()
        for f in self.out.glob("acked-*.txt"):
            done.update(int(x) for x in f.read_text().split())
        self.todo = [i for i in range(int(conf["test.sentences"])) if i not in done]
        self.todo.reverse()
        self.text = sentences(int(conf["test.sentences"]))
        self.acked = open(self.out / f"acked-{context.this_task_id}-{os.getpid()}.txt", "a")
        self.next_at = time.monotonic()

    def next_tuple(self):
        now = time.monotonic()
        if not self.todo or now < self.next_at:
            return
        self.next_at = max(self.next_at + 1.0 / self.rate, now - 0.1)
        i = self.todo.pop()
        self.collector.emit([i, self.text[i]], msg_id=i)

    def ack(self, msg_id):
        self.acked.write(f"{msg_id}\n")
        self.acked.flush()

    def fail(self, msg_id):
        self.todo.append(msg_id)

    def close(self):
        self.acked.close()

    def declare_output_fields(self, d):
        d.declare(["sid", "sentence"])


class Split(Bolt):
    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, t):
        for i, w in enumerate(t["sentence"].split()):
            self.collector.emit([t["sid"], i, w], anchors=t)
        self.collector.ack(t)

    def declare_output_fields(self, d):
        d.declare(["sid", "idx", "word"])


class Count(Bolt):
    def prepare(self, conf, context, collector):
        self.collector = collector
        self.file = open(Path(conf["test.output.dir"]) / f"words-{context.this_task_id}-{os.getpid()}.txt", "a")

    def execute(self, t):
        self.file.write(f"{t['sid']} {t['idx']} {t['word']}\n")
        self.file.flush()
        self.collector.ack(t)

    def cleanup(self):
        self.file.close()


CONFIG = {"topology.message.timeout.secs": 6, "topology.max.spout.pending": 200}


def topology():
    b = TopologyBuilder()
    b.set_spout("sentences", Sentences())
    b.set_bolt("split", Split(), 2).shuffle("sentences")
    b.set_bolt("count", Count(), 2, num_tasks=4).fields("split", ["word"])
    return b.build()
