"""storm-starter's WordCountToBolt: a word count whose running counts go to a bolt of your
own (there a Redis bolt; here one that keeps the latest count of every word and prints them).

    squall run examples/streams/word_count_to_bolt.py --local --duration 5
"""
from sources import RandomSentenceSpout

from squall import Bolt
from squall.streams import StreamBuilder

CONFIG = {"topology.max.spout.pending": 500}


class LatestCounts(Bolt):
    """Any bolt can end a pipeline: it gets the fields ``key`` and ``value``."""

    def prepare(self, conf, context, collector):
        self.collector, self.counts = collector, {}

    def execute(self, tuple):
        self.counts[tuple["key"]] = tuple["value"]
        self.collector.ack(tuple)

    def cleanup(self):
        top = sorted(self.counts.items(), key=lambda kv: -kv[1])[:5]
        print("top words:", ", ".join(f"{w}={n}" for w, n in top), flush=True)


def topology():
    builder = StreamBuilder()
    (builder.new_stream(RandomSentenceSpout(), name="sentences", parallelism=2)
        .flat_map(str.split)
        .map_to_pair(lambda word: (word, 1))
        .count_by_key()
        .to(LatestCounts(), name="latest-counts"))
    return builder.build()
