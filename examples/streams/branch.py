"""storm-starter's BranchExample: one stream split three ways by predicates (a value goes
to the first that matches).

    squall run examples/streams/branch.py --local --duration 5
"""
from sources import RandomIntegerSpout

from squall.streams import StreamBuilder

CONFIG = {"topology.max.spout.pending": 500}


def topology():
    builder = StreamBuilder()
    numbers = builder.new_stream(RandomIntegerSpout(rate=10), "value", name="integers")
    evens, odds, _ = numbers.branch(lambda n: n % 2 == 0, lambda n: n % 2 == 1, lambda n: True)
    evens.map(lambda n: f"even {n}").print(name="evens")
    odds.map(lambda n: f"odd {n}").print(name="odds")
    return builder.build()
