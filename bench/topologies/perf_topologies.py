"""Storm-perf's topologies: constant spout -> identity bolt -> null bolt."""
from __future__ import annotations

from squall import Bolt, Spout, TopologyBuilder


class ConstSpout(Spout):
    """Emits the same value forever, with a message id when ``acked``."""

    def __init__(self, acked: bool) -> None:
        self.acked = acked

    def open(self, conf, context, collector):
        self.emit = collector.emit
        self.n = 0

    def next_tuple(self):
        if self.acked:
            self.n += 1
            self.emit(["some data"], msg_id=self.n)
        else:
            self.emit(["some data"])

    def declare_output_fields(self, declarer):
        declarer.declare(["str"])


class IdBolt(Bolt):
    def prepare(self, conf, context, collector):
        self.emit, self.ack = collector.emit, collector.ack

    def execute(self, tuple):
        self.emit(tuple.values, anchors=tuple)
        self.ack(tuple)

    def declare_output_fields(self, declarer):
        declarer.declare(["str"])


class NullBolt(Bolt):
    def prepare(self, conf, context, collector):
        self.ack = collector.ack

    def execute(self, tuple):
        self.ack(tuple)


def const_id_null(acked: bool):
    return spout_id_null(ConstSpout(acked))


def spout_id_null(spout: Spout):
    """``spout`` -> IdBolt -> NullBolt, each one task, local-or-shuffle."""
    b = TopologyBuilder()
    b.set_spout("spout", spout)
    b.set_bolt("id", IdBolt()).local_or_shuffle("spout")
    b.set_bolt("null", NullBolt()).local_or_shuffle("id")
    return b.build()
