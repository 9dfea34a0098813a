"""storm-starter's AggregateExample: the average of the values in each count window, with an
aggregator object (``init``, ``apply``, ``result``), and a sum with a plain function.

    squall run examples/streams/aggregate.py --local --duration 5
"""
from sources import RandomIntegerSpout

from squall.streams import Count, StreamBuilder, TumblingWindows

CONFIG = {"topology.max.spout.pending": 1000}


class Average:
    """An aggregator: (sum, count) while adding, the mean at the end."""

    def init(self) -> tuple[int, int]:
        return (0, 0)

    def apply(self, acc: tuple[int, int], value: int) -> tuple[int, int]:
        return (acc[0] + value, acc[1] + 1)

    def result(self, acc: tuple[int, int]) -> float:
        return acc[0] / acc[1]


def topology():
    builder = StreamBuilder()
    windows = (builder.new_stream(RandomIntegerSpout(rate=200), "value", name="integers")
               .window(TumblingWindows.of(Count(100))))
    windows.aggregate(Average()).print(name="average")
    windows.aggregate(0, lambda total, n: total + n).print(name="sum")
    return builder.build()
