"""storm-starter's GroupByKeyAndWindowExample: (key, value) pairs grouped per key in sliding
event-time windows, and reduced per key in tumbling ones.

    squall run examples/streams/group_by_key_and_window.py --local --duration 5
"""
from sources import ReplayingSpout

from squall.streams import Duration, SlidingWindows, StreamBuilder, TumblingWindows

CONFIG = {"topology.max.spout.pending": 1000, "topology.message.timeout.secs": 60}


class StockQuotes(ReplayingSpout):
    """(symbol, price, seconds) quotes, ten a second of event time."""

    fields = ["symbol", "price", "ts"]

    def make(self, i):
        return [self.rng.choice(["aapl", "ibm", "goog"]), round(self.rng.uniform(100, 200), 2), i / 10]


def topology():
    builder = StreamBuilder()
    quotes = builder.new_stream(StockQuotes(rate=200), ["symbol", "price"], timestamp="ts", name="quotes")
    pairs = quotes.map_to_pair(lambda q: (q[0], q[1]))
    (pairs.window(SlidingWindows.of(Duration(6), Duration(3)).with_event_time(1))
        .group_by_key()
        .map_values(lambda prices: (len(prices), min(prices), max(prices)))
        .print(name="grouped"))
    (pairs.window(TumblingWindows.of(Duration(3)).with_event_time(1))
        .reduce_by_key(max)
        .print(name="highest"))
    return builder.build()
