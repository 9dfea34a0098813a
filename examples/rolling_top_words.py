"""Rolling top words: counts per minute, every 10 seconds, with windowed bolts.

    words (spout, event timestamps) -> counts (a 60 s window sliding by 10 s, fields on the
    word: each task ranks its words) -> top (merges the tasks' rankings per window)

Run it in local mode:   python examples/rolling_top_words.py --duration 40
or through the CLI:     squall run examples/rolling_top_words.py --local --duration 40

Windows are in event time: each word carries the time it happened (``ts``), windows end
at multiples of 10 s and hold the last 60 s, and a word more than 2 s later than the
newest one seen is late (counted aside, on the ``late`` stream). The first ranking comes
at the first multiple of 10 s, with whatever part of the minute there is so far.
"""
from __future__ import annotations

import argparse
import collections
import random
import time

from squall import Bolt, Duration, Spout, TopologyBuilder, WindowedBolt

WORDS = ("storm squall gale breeze gust tempest zephyr cyclone monsoon hurricane typhoon "
         "blizzard drizzle sleet hail thunder lightning rain snow fog").split()
TOP = 5

# A tuple stays in its windows (un-acked) for 60 + 10 + 2 s: the timeout must be longer,
# and max.spout.pending must cover the words of that span (it also bounds each window).
CONFIG = {"topology.message.timeout.secs": 120, "topology.max.spout.pending": 30_000,
          "words.rate": 200}


class TimedWords(Spout):
    """Words at ``words.rate`` per second, skewed (a few are common), each with the time
    it happened; about one in a hundred arrives 5 s late."""

    def open(self, conf, context, collector):
        self.collector = collector
        self.rate = float(conf.get("words.rate", 200))
        self.rng = random.Random(context.this_task_id)
        self.weights = [1 / (i + 1) for i in range(len(WORDS))]
        self.next_at = time.monotonic()
        self.n = 0

    def next_tuple(self):
        now = time.monotonic()
        if now < self.next_at:
            return
        self.next_at = max(self.next_at + 1 / self.rate, now - 0.1)
        word = self.rng.choices(WORDS, self.weights)[0]
        ts = time.time() - (5.0 if self.rng.random() < 0.01 else 0.0)
        self.n += 1
        self.collector.emit([word, ts], msg_id=self.n)

    def declare_output_fields(self, declarer):
        declarer.declare(["word", "ts"])


class RollingCounts(WindowedBolt):
    """Counts the words of its window and emits its top words with the window's end."""

    def execute(self, window):
        counts = collections.Counter(t["word"] for t in window)
        for word, n in counts.most_common(TOP):
            self.collector.emit([window.end, word, n])

    def declare_output_fields(self, declarer):
        declarer.declare(["end", "word", "count"])


class TopWords(Bolt):
    """Merges the counting tasks' rankings of each window; prints a window's top words
    once nothing more has come for it for half a second (every task has reported)."""

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.rankings: dict[float, collections.Counter] = {}
        self.heard: dict[float, float] = {}  # window end -> when its last ranking came

    def execute(self, t):
        if t.is_tick():
            now = time.monotonic()
            for end in sorted(e for e, at in self.heard.items() if now - at > 0.5):
                del self.heard[end]
                self.report(end, self.rankings.pop(end))
            return
        end = t["end"]
        self.rankings.setdefault(end, collections.Counter())[t["word"]] += t["count"]
        self.heard[end] = time.monotonic()
        self.collector.ack(t)

    def report(self, end, counts):
        stamp = time.strftime("%H:%M:%S", time.localtime(end))
        top = ", ".join(f"{w}={n}" for w, n in counts.most_common(TOP))
        print(f"minute to {stamp}: {top}", flush=True)

    def component_config(self):
        return {"topology.tick.tuple.freq.secs": 0.5}


class LateWords(Bolt):
    def prepare(self, conf, context, collector):
        self.collector, self.n = collector, 0

    def execute(self, t):
        self.n += 1
        self.collector.ack(t)

    def cleanup(self):
        print(f"late words (older than the watermark, not counted): {self.n}", flush=True)


def topology(counters: int = 2):
    counts = (RollingCounts().with_window(Duration.minutes(1), Duration(10)).with_timestamp_field("ts")
              .with_lateness(Duration(2)).with_late_stream("late"))
    b = TopologyBuilder()
    b.set_spout("words", TimedWords())
    b.set_bolt("counts", counts, counters).fields("words", ["word"])
    b.set_bolt("top", TopWords()).global_("counts")
    b.set_bolt("late", LateWords()).shuffle("counts", "late")
    return b.build()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=40.0, help="seconds to run (default 40)")
    parser.add_argument("--rate", type=float, default=200.0, help="words per second")
    args = parser.parse_args()

    from squall import LocalCluster
    from squall.logs import configure

    configure("console", "WARNING")
    with LocalCluster() as cluster:
        cluster.submit("rolling-top-words", {**CONFIG, "words.rate": args.rate}, topology())
        time.sleep(args.duration)


if __name__ == "__main__":
    main()
