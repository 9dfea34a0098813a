"""Generated values through a Spark backfill (tests/spark/test_spark_values.py). Loaded as a
topology module (squall.loader), so Spark workers get it through squall.spark's code shipping.

``ids`` (a spout fed a DataFrame of indices) -> ``gen`` (emits ``[i, rows[i]]``: the values,
pickled inside the bolt, so they reach Spark's workers as they are) -> ``keep`` (fields
grouping on i: another stage, so every value crosses between stages) -> the ``keep`` sink.
"""
from __future__ import annotations

from squall import BasicBolt, Spout, TopologyBuilder


class Opaque:
    """A value of a type no one registered (here, so that Spark's workers can unpickle it)."""


class Ids(Spout):
    def next_tuple(self):
        pass

    def declare_output_fields(self, declarer):
        declarer.declare(["i"])


class Gen(BasicBolt):
    def __init__(self, rows):
        self.rows = rows

    def execute(self, tup):
        i = tup["i"]
        self.collector.emit([i, self.rows[i]])

    def declare_output_fields(self, declarer):
        declarer.declare(["i", "value"])


class Keep(BasicBolt):
    def execute(self, tup):
        self.collector.emit(list(tup.values))

    def declare_output_fields(self, declarer):
        declarer.declare(["i", "value"])


def topology(rows):
    b = TopologyBuilder()
    b.set_spout("ids", Ids())
    b.set_bolt("gen", Gen(rows), 2).shuffle("ids")
    b.set_bolt("keep", Keep(), 2).fields("gen", ["i"])
    return b.build()
