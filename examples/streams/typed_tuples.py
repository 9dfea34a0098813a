"""storm-starter's TypedTupleExample: values as typed tuples (a NamedTuple here), which a
type checker follows through every step; counted per key in count windows.

    squall run examples/streams/typed_tuples.py --local --duration 5
    mypy examples/streams/typed_tuples.py
"""
from typing import NamedTuple

from sources import RandomIntegerSpout

from squall.streams import Count, PairStream, Stream, StreamBuilder, TumblingWindows
from squall.topology import Topology

CONFIG = {"topology.max.spout.pending": 1000}


class Reading(NamedTuple):
    value: int
    ts: float


def topology() -> Topology:
    builder = StreamBuilder()
    readings: Stream[Reading] = builder.new_stream(RandomIntegerSpout(rate=500), lambda t: Reading(t[0], t[1]),
                                                   name="integers")
    by_bucket: PairStream[int, Reading] = readings.key_by(lambda r: r.value // 100)
    counts: PairStream[int, int] = by_bucket.window(TumblingWindows.of(Count(100))).count_by_key()
    counts.filter(lambda kv: kv[1] > 12).print(name="frequent")
    return builder.build()
