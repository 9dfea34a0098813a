"""A spout that ran dry waits out its wait strategy's time before next_tuple is called
again, even when acks wake its thread sooner; the acks themselves are handled at once."""
import pytest

from squall import Spout, TopologyBuilder
from squall.runtime import spout_executor
from squall.testing.components import NullBolt, Recorder, unique_name
from support.stepping import SteppedWorker


class _Paced(Spout):
    """Emits one tuple when ``<name>.due`` holds something (taking it), else nothing; counts
    its next_tuple calls under ``<name>.calls`` and records acks under ``<name>.acked``."""

    def __init__(self, name):
        self.name = name

    def open(self, conf, context, collector):
        self.collector = collector

    def next_tuple(self):
        Recorder.add(self.name + ".calls", 1)
        due = Recorder.get(self.name + ".due")
        if due:
            Recorder.clear(self.name + ".due")
            self.collector.emit([due[0]], msg_id=due[0])

    def ack(self, msg_id):
        Recorder.add(self.name + ".acked", msg_id)

    def declare_output_fields(self, declarer):
        declarer.declare(["n"])


@pytest.fixture
def real_time(monkeypatch):
    """The spout executor's real clock (its wait strategy's), moved by hand."""
    now = [1000.0]
    monkeypatch.setattr(spout_executor, "_monotonic", lambda: now[0])
    return now


def test_acks_wake_a_dry_spout_but_next_tuple_waits_out_the_strategy(real_time):
    name = unique_name("paced")
    b = TopologyBuilder()
    b.set_spout("paced", _Paced(name))
    b.set_bolt("null", NullBolt()).shuffle("paced")
    conf = {"topology.acker.executors": 1, "topology.sleep.spout.wait.strategy.time.ms": 5}
    with SteppedWorker(b.build(), conf) as w:
        spout = w.executor("paced")
        Recorder.add(name + ".due", 7)
        w.step()  # emits 7, then a call emits nothing: dry; the bolt and the acker finish the tree
        calls = len(Recorder.get(name + ".calls"))
        assert calls >= 2 and Recorder.get(name + ".acked") == []
        Recorder.add(name + ".due", 8)
        w.step()  # woken by the ack: handled now, but next_tuple is not called before 5 ms
        assert Recorder.get(name + ".acked") == [7]
        assert len(Recorder.get(name + ".calls")) == calls
        assert spout.step(w.clock.monotonic()) == pytest.approx(0.005)  # how long it may sleep
        real_time[0] += 0.004
        w.step()
        assert len(Recorder.get(name + ".calls")) == calls
        real_time[0] += 0.001
        w.run(lambda: Recorder.get(name + ".acked") == [7, 8])  # the wait is over: 8 goes out
        assert len(Recorder.get(name + ".calls")) > calls

