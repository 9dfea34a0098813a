"""A spout that ran dry is not asked again before its wait strategy's time, even when its
own acks wake the thread sooner; the acks themselves are handled at once."""
import pytest

from squall import Spout, TopologyBuilder
from squall.runtime.spout_pacing import CHUNK_MAX, PACED_CHUNK_MAX, SpoutPacing
from squall.testing.components import NullBolt, Recorder, unique_name
from support.stepping import SteppedWorker


def test_a_dry_turn_holds_next_tuple_for_the_wait_strategys_time():
    pace = SpoutPacing(0.001)
    assert pace.held(5.0, 70.0) == 0.0  # never ran dry
    pace.turn_ended(5.0, 70.0, dry=True)
    assert pace.held(5.0, 70.0) == pytest.approx(0.001)
    assert pace.held(5.0006, 70.0006) == pytest.approx(0.0004)
    assert pace.held(5.001, 70.001) == 0.0
    pace.turn_ended(5.001, 70.001, dry=False)  # a turn that filled its batch or was capped: no hold
    assert pace.held(5.001, 70.001) == 0.0
    pace.turn_ended(6.0, 71.0, dry=True)
    pace.turn_ended(6.0, 71.0, dry=False)
    assert pace.held(6.0, 71.0) == 0.0
    assert SpoutPacing(0.0).held(1.0, 1.0) == 0.0  # time 0: asked at every turn
    with pytest.raises(ValueError, match="negative"):
        SpoutPacing(-0.001)


def test_either_clock_ends_a_hold():
    """The worker's clock (a stepped test's FakeClock) or the real one, whichever is first:
    a worker whose clock stands still is not held for ever."""
    pace = SpoutPacing(0.5)
    pace.turn_ended(10.0, 100.0, dry=True)
    assert pace.held(10.0, 100.2) == pytest.approx(0.3)
    assert pace.held(10.4, 100.0) == pytest.approx(0.1)
    assert pace.held(10.0, 100.5) == 0.0  # real time is up, the worker's clock stood still
    assert pace.held(10.5, 100.0) == 0.0  # the worker's clock moved on (a test advanced it)


class _Paced(Spout):
    """Emits the ids put under ``<name>.due`` (taking them), one a call; counts its calls
    under ``<name>.calls`` and records acks under ``<name>.acked``."""

    def __init__(self, name):
        self.name = name

    def open(self, conf, context, collector):
        self.collector = collector

    def next_tuple(self):
        Recorder.add(self.name + ".calls", 1)
        due = Recorder.get(self.name + ".due")
        if due:
            Recorder.clear(self.name + ".due")
            for n in due[1:]:
                Recorder.add(self.name + ".due", n)
            self.collector.emit([due[0]], msg_id=due[0])

    def ack(self, msg_id):
        Recorder.add(self.name + ".acked", msg_id)

    def declare_output_fields(self, declarer):
        declarer.declare(["n"])


def test_acks_wake_a_dry_spout_but_next_tuple_waits_out_the_strategy():
    name = unique_name("paced")
    calls = lambda: len(Recorder.get(name + ".calls"))  # noqa: E731
    b = TopologyBuilder()
    b.set_spout("paced", _Paced(name))
    b.set_bolt("null", NullBolt()).shuffle("paced")
    # A hold real time does not end while the test runs; the test's clock ends it.
    conf = {"topology.acker.executors": 1, "topology.sleep.spout.wait.strategy.time.ms": 30_000,
            "topology.enable.message.timeouts": False}
    with SteppedWorker(b.build(), conf) as w:
        Recorder.add(name + ".due", 1)
        Recorder.add(name + ".due", 2)
        w.step()  # a call emits 1, a chunk of two 2 and nothing: dry; the bolt and the acker finish both trees
        assert calls() == 3 and Recorder.get(name + ".acked") == []
        Recorder.add(name + ".due", 3)
        w.step()  # the acks woke it: handled now, but next_tuple is held for 30 s
        assert Recorder.get(name + ".acked") == [1, 2]
        assert calls() == 3
        w.step()
        w.advance(29.9)
        assert calls() == 3
        w.advance(0.1)  # the hold is over: a call sends 3, a chunk of two finds nothing
        assert calls() == 6
        w.run(lambda: Recorder.get(name + ".acked") == [1, 2, 3])


def test_a_paced_turn_asks_few_calls_past_its_due_tuples():
    """Calls in a chunk after the first that emits nothing are wasted; a task that ran dry
    last turn (paced) looks every PACED_CHUNK_MAX calls, not every CHUNK_MAX, so the turn
    after its hold wastes at most PACED_CHUNK_MAX of them."""
    pace = SpoutPacing(0.001)
    assert pace.chunk_max() == CHUNK_MAX  # never ran dry: bursts
    pace.turn_ended(5.0, 70.0, dry=True)
    assert pace.chunk_max() == PACED_CHUNK_MAX < CHUNK_MAX
    pace.turn_ended(5.1, 70.1, dry=False)
    assert pace.chunk_max() == CHUNK_MAX

    name = unique_name("chunks")
    calls = lambda: len(Recorder.get(name + ".calls"))  # noqa: E731
    b = TopologyBuilder()
    b.set_spout("paced", _Paced(name))
    b.set_bolt("null", NullBolt()).shuffle("paced")
    conf = {"topology.acker.executors": 1, "topology.sleep.spout.wait.strategy.time.ms": 30_000,
            "topology.enable.message.timeouts": False}
    with SteppedWorker(b.build(), conf) as w:
        w.step()  # nothing due: dry, held
        asked = calls()
        for n in range(100):
            Recorder.add(name + ".due", n)
        w.advance(30.0)  # the hold is over with 100 tuples due
        w.run(lambda: len(Recorder.get(name + ".acked")) == 100)
        # chunks 1, 2, 4, 8, 8, ...: 100 calls emit, and the chunk that finds nothing wastes <= 8
        assert 100 < calls() - asked <= 100 + PACED_CHUNK_MAX
