"""Word count: random sentences -> split (shuffle) -> count (fields on "word") -> report.

Run it in local mode:      python examples/wordcount.py --duration 10
or through the CLI:        squall run examples/wordcount.py --local --duration 10
or on a cluster:           squall submit examples/wordcount.py
A topology file defines ``topology()`` (and may define ``CONFIG``); this one also runs as a
script.
"""
from __future__ import annotations

import argparse
import random
import time

from squall import Bolt, Spout, TopologyBuilder

SENTENCES = [
    "the cow jumped over the moon",
    "an apple a day keeps the doctor away",
    "four score and seven years ago",
    "snow white and the seven dwarfs",
    "i am at two with nature",
]

CONFIG = {"topology.max.spout.pending": 500}


class RandomSentenceSpout(Spout):
    """Emits random sentences with message ids and replays the ones that fail."""

    def __init__(self, seed: int | None = None) -> None:
        self.seed = seed

    def open(self, conf, context, collector):
        self.collector = collector
        rng = random.Random(self.seed if self.seed is None else self.seed + context.this_task_id)
        # Draw sentences in blocks: a random draw per tuple would cost more than the emit.
        self.drawn = rng.choices(SENTENCES, k=4099)
        self.pending: dict[int, str] = {}
        self.next_id = 0

    def next_tuple(self):
        sentence = self.drawn[self.next_id % 4099]
        self.next_id += 1
        self.pending[self.next_id] = sentence
        self.collector.emit([sentence], msg_id=self.next_id)

    def ack(self, msg_id):
        del self.pending[msg_id]

    def fail(self, msg_id):
        self.collector.emit([self.pending[msg_id]], msg_id=msg_id)

    def declare_output_fields(self, declarer):
        declarer.declare(["sentence"])


class SplitSentence(Bolt):
    def prepare(self, conf, context, collector):
        self.emit, self.ack = collector.emit, collector.ack

    def execute(self, tuple):
        emit = self.emit
        for word in tuple.values[0].split():
            emit([word], anchors=tuple)
        self.ack(tuple)

    def declare_output_fields(self, declarer):
        declarer.declare(["word"])


class WordCount(Bolt):
    """Counts words; every tick it emits the counts that changed since the last tick."""

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.ack = collector.ack
        self.counts: dict[str, int] = {}
        self.changed: set[str] = set()

    def execute(self, tuple):
        if tuple.is_tick():
            for word in self.changed:
                self.collector.emit([word, self.counts[word]])
            self.changed.clear()
            return
        word = tuple.values[0]
        self.counts[word] = self.counts.get(word, 0) + 1
        self.changed.add(word)
        self.ack(tuple)

    def component_config(self):
        return {"topology.tick.tuple.freq.secs": 1}

    def declare_output_fields(self, declarer):
        declarer.declare(["word", "count"])


class Reporter(Bolt):
    """Keeps the latest count of every word; prints the top words and words/s."""

    def __init__(self, every: float = 3.0, top: int = 5) -> None:
        self.every, self.top = every, top

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.counts: dict[str, int] = {}
        self.last_print = time.monotonic()
        self.last_total = 0

    def execute(self, tuple):
        self.counts[tuple["word"]] = tuple["count"]
        self.collector.ack(tuple)
        now = time.monotonic()
        if now - self.last_print >= self.every:
            self.report(now)

    def report(self, now: float) -> None:
        total = sum(self.counts.values())
        rate = (total - self.last_total) / (now - self.last_print)
        top = sorted(self.counts.items(), key=lambda kv: (-kv[1], kv[0]))[: self.top]
        print(f"words/s {rate:,.0f}  total {total:,}  top: " + ", ".join(f"{w}={c}" for w, c in top), flush=True)
        self.last_print, self.last_total = now, total

    def cleanup(self):
        top = sorted(self.counts.items(), key=lambda kv: (-kv[1], kv[0]))
        print("final counts: " + ", ".join(f"{w}={c}" for w, c in top), flush=True)


def topology(split: int = 2, count: int = 2):
    builder = TopologyBuilder()
    builder.set_spout("sentences", RandomSentenceSpout(), 1)
    builder.set_bolt("split", SplitSentence(), split).shuffle("sentences")
    builder.set_bolt("count", WordCount(), count).fields("split", ["word"])
    builder.set_bolt("report", Reporter()).global_("count")
    return builder.build()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=10.0, help="seconds to run (default 10)")
    parser.add_argument("--workers", type=int, default=1, help="in-process workers (topology.workers)")
    args = parser.parse_args()

    from squall import LocalCluster
    from squall.logs import configure

    configure("console", "WARNING")
    with LocalCluster() as cluster:
        cluster.submit("wordcount", {**CONFIG, "topology.workers": args.workers}, topology())
        started = time.monotonic()
        time.sleep(args.duration)
        stats = cluster.stats("wordcount")
        elapsed = time.monotonic() - started
        words = sum(s["executed"] for s in stats if s["component"] == "count")
        acked = sum(s.get("acked", 0) for s in stats if s["kind"] == "spout")
        cluster.kill("wordcount")
    print(f"counted {words:,} words in {elapsed:.1f}s: {words / elapsed:,.0f} words/s "
          f"({acked:,} sentences fully acked)")


if __name__ == "__main__":
    main()
