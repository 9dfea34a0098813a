"""Spouts the stream examples share (storm-starter's RandomSentenceSpout and friends):
reliable, replaying what fails, each drawing from a fixed seed so runs can be compared."""
from __future__ import annotations

import random
import time

from squall import Spout

SENTENCES = [
    "the cow jumped over the moon",
    "an apple a day keeps the doctor away",
    "four score and seven years ago",
    "snow white and the seven dwarfs",
    "i am at two with nature",
]


class ReplayingSpout(Spout):
    """Emits ``make(i)`` for i = 0, 1, ... (``limit`` of them, or forever), about ``rate``
    a second (0: as fast as allowed), with message ids, and replays the ones that fail."""

    fields: list[str] = ["value"]

    def __init__(self, limit: int | None = None, rate: float = 0.0, seed: int = 42) -> None:
        self.limit, self.rate, self.seed = limit, rate, seed

    def make(self, i: int) -> list:
        raise NotImplementedError

    def open(self, conf, context, collector):
        self.collector = collector
        self.rng = random.Random(self.seed + context.this_task_index)
        self.i, self.pending, self.replay = 0, {}, []
        self.started = time.monotonic()

    def next_tuple(self):
        if self.replay:
            i = self.replay.pop()
            self.collector.emit(self.pending[i], msg_id=i)
            return
        if self.limit is not None and self.i >= self.limit:
            return
        if self.rate and self.i > (time.monotonic() - self.started) * self.rate:
            return
        values = self.pending[self.i] = self.make(self.i)
        self.collector.emit(values, msg_id=self.i)
        self.i += 1

    def ack(self, msg_id):
        del self.pending[msg_id]

    def fail(self, msg_id):
        self.replay.append(msg_id)

    def declare_output_fields(self, declarer):
        declarer.declare(self.fields)


class RandomSentenceSpout(ReplayingSpout):
    fields = ["sentence"]

    def make(self, i):
        return [self.rng.choice(SENTENCES)]


class RandomIntegerSpout(ReplayingSpout):
    """storm-starter's: a random integer below 1000 and a timestamp one second apart per value."""

    fields = ["value", "ts"]

    def make(self, i):
        return [self.rng.randrange(1000), float(i)]


class NumberSpout(ReplayingSpout):
    """1, 2, 3, ... with a timestamp each (the join example's two sides)."""

    fields = ["number", "ts"]

    def make(self, i):
        return [i + 1, float(i)]


class WordSpout(ReplayingSpout):
    fields = ["word"]

    def make(self, i):
        return [self.rng.choice(SENTENCES).split()[0]]
