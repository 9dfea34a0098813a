"""storm-starter's JoinExample: even and odd-triple numbers from two spouts, joined by value
within tumbling event-time windows.

    squall run examples/streams/join.py --local --duration 5
"""
from sources import NumberSpout

from squall.streams import Duration, StreamBuilder, TumblingWindows

CONFIG = {"topology.max.spout.pending": 1000, "topology.message.timeout.secs": 60}


def topology():
    builder = StreamBuilder()
    window = TumblingWindows.of(Duration(10)).with_event_time(1)
    evens = (builder.new_stream(NumberSpout(rate=100), "number", timestamp="ts", name="evens")
             .filter(lambda n: n % 2 == 0)
             .map_to_pair(lambda n: (n, "even")))
    triples = (builder.new_stream(NumberSpout(rate=100), "number", timestamp="ts", name="threes")
               .filter(lambda n: n % 3 == 0)
               .map_to_pair(lambda n: (n, "divisible by 3")))
    # (6, ("even", "divisible by 3")), (12, ...), ...
    evens.window(window).join(triples.window(window)).print(name="both")
    return builder.build()
