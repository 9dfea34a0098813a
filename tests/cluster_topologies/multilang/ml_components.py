"""The native ends of the multilang cluster topology: a durable sentence source and an
idempotent word sink, with results in files under ``test.output.dir`` (as in
cluster_wordcount.py)."""
from __future__ import annotations

import os
from pathlib import Path

from squall import Bolt, Spout

WORDS = ["the", "cow", "jumped", "over", "moon", "an", "apple", "a", "day", "keeps", "doctor", "away"]


def sentences(n: int) -> list[str]:
    return [" ".join(WORDS[(i * 5 + k * 7) % len(WORDS)] for k in range(2 + i % 5)) for i in range(n)]


class Sentences(Spout):
    def open(self, conf, context, collector):
        self.collector = collector
        self.out = Path(conf["test.output.dir"])
        done = set()
        for f in self.out.glob("acked-*.txt"):
            done.update(int(x) for x in f.read_text().split())
        n = int(conf["test.sentences"])
        self.text = sentences(n)
        self.todo = [i for i in reversed(range(n)) if i not in done]
        self.acked = open(self.out / f"acked-{context.this_task_id}-{os.getpid()}.txt", "a")

    def next_tuple(self):
        if self.todo:
            i = self.todo.pop()
            self.collector.emit([i, self.text[i]], msg_id=i)

    def ack(self, msg_id):
        self.acked.write(f"{msg_id}\n")
        self.acked.flush()

    def fail(self, msg_id):
        self.todo.append(msg_id)

    def declare_output_fields(self, declarer):
        declarer.declare(["sid", "sentence"])


class Words(Bolt):
    def prepare(self, conf, context, collector):
        self.collector = collector
        self.file = open(Path(conf["test.output.dir"]) / f"words-{context.this_task_id}-{os.getpid()}.txt", "a")

    def execute(self, tup):
        self.file.write(f"{tup['sid']} {tup['idx']} {tup['word']}\n")
        self.file.flush()
        self.collector.ack(tup)

    def cleanup(self):
        self.file.close()
