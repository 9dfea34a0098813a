"""The bolt a windowed bolt runs in: asked for through ``runner()`` when it is declared,
reading time from its task's clock, and anchoring the window's emits to its tuples.
Stepped by hand on a FakeClock (support.stepping)."""

import pytest

from squall import Bolt, Duration, StatefulWindowedBolt, TopologyBuilder, TopologyError, WindowedBolt
from squall.testing.components import FixedTupleSpout, Recorder, unique_name
from squall.windowing.runner import StatefulWindowedBoltRunner, WindowedBoltRunner
from support.stepping import SteppedWorker


class Sizes(WindowedBolt):
    """Records each window's bounds and ids, and emits its size (unanchored)."""

    def __init__(self, key):
        self.key = key

    def execute(self, window):
        Recorder.add(self.key, (window.start, window.end, sorted(t["id"] for t in window)))
        self.collector.emit([len(window)])

    def declare_output_fields(self, d):
        d.declare(["size"])


class Refuse(Bolt):
    """Fails every input."""

    def execute(self, t):
        self.collector.fail(t)


class Keep(StatefulWindowedBolt):
    def execute(self, window):
        pass


def test_declaring_a_windowed_bolt_declares_its_runner():
    b = TopologyBuilder()
    b.set_spout("rows", FixedTupleSpout("x", [[1]], ["id"]))
    b.set_bolt("plain", Sizes("x").with_tumbling_window(Duration(1))).shuffle("rows")
    b.set_bolt("kept", Keep().with_tumbling_window(Duration(1))).shuffle("rows")
    topology = b.build()
    assert type(topology.components["plain"].instantiate()) is WindowedBoltRunner
    assert type(topology.components["kept"].instantiate()) is StatefulWindowedBoltRunner
    with pytest.raises(TopologyError, match="component 'w': windowed bolt Sizes: no window set"):
        TopologyBuilder().set_bolt("w", Sizes("x"))


def test_processing_time_follows_the_clock_and_emits_are_anchored_to_the_window():
    key = unique_name("anchored")
    b = TopologyBuilder()
    b.set_spout("rows", FixedTupleSpout(key, [[i] for i in range(6)], ["id"]))
    b.set_bolt("win", Sizes(key).with_tumbling_window(Duration(2))).global_("rows")
    b.set_bolt("refuse", Refuse()).shuffle("win")
    conf = {"topology.max.spout.pending": 100, "topology.message.timeout.secs": 30}
    with SteppedWorker(b.build(), conf) as w:
        start = w.clock.time()
        w.run()
        assert Recorder.get(key) == []  # the clock has not moved: no window has ended
        w.advance(1.9)
        assert Recorder.get(key) == []
        w.advance(0.1)  # the window [start, start + 2) ends: a tick fires it
        assert Recorder.get(key) == [(start, start + 2, list(range(6)))]
        # Its size went downstream anchored to its six tuples: refusing it fails their trees.
        w.run(lambda: len(Recorder.get(key + ".failed")) == 6)
        assert sorted(Recorder.get(key + ".failed")) == list(range(6))
