"""A spout's partial batch goes as soon as its consumer would idle, and grows into a batch
only while the consumer has work queued; the flush interval is the backstop
(Outbox.flush_due)."""
import struct
import time

from squall import Spout, TopologyBuilder
from squall.messaging import codec
from squall.runtime.collectors import WAIT_NOTHING, Outbox
from squall.runtime.flow import RemoteBackpressure
from squall.testing.components import FixedTupleSpout, Recorder, RecordingBolt, unique_name
from support.stepping import SteppedWorker

INTERVAL = 0.001


def outbox(queued, ackers=()):
    sent = []
    box = Outbox(lambda task, tuples: sent.append((task, list(tuples))), 500, ackers, "spout", 1, INTERVAL, queued)
    return box, sent


def turn(box, now, n):
    """One spout turn that emitted ``n`` tuples to task 7; flush_due's answer."""
    box.buffer(7).extend(range(n))
    return box.flush_due(now)


def test_a_tuple_goes_at_the_end_of_its_turn_when_its_consumer_has_nothing_queued():
    box, sent = outbox(lambda task: 0)
    assert turn(box, 0.0, 1) == WAIT_NOTHING and sent == [(7, [0])]  # no timer between it and its bolt
    assert turn(box, 0.0001, 2) == WAIT_NOTHING and sent[-1] == (7, [0, 1])
    assert turn(box, 0.0002, 0) == WAIT_NOTHING and len(sent) == 2  # nothing buffered: nothing sent


def test_while_the_consumer_has_work_queued_a_batch_grows_and_goes_when_it_would_idle():
    backlog = {7: 40}
    box, sent = outbox(backlog.get)
    assert turn(box, 0.0, 3) == INTERVAL and sent == []
    assert 0 < turn(box, 0.0004, 5) < INTERVAL and sent == []
    backlog[7] = 0  # the consumer took its queue: it would idle now
    assert turn(box, 0.0006, 2) == WAIT_NOTHING and sent == [(7, [0, 1, 2, 0, 1, 2, 3, 4, 0, 1])]


def test_the_interval_is_the_backstop_for_a_consumer_that_stays_busy():
    box, sent = outbox(lambda task: 10)
    assert turn(box, 0.0, 1) == INTERVAL
    assert turn(box, 0.0011, 1) == WAIT_NOTHING and sent == [(7, [0, 0])]
    assert turn(box, 0.0020, 1) == INTERVAL  # a new hold begins


def test_acker_traffic_goes_when_its_acker_would_idle():
    backlog = {7: 5, 9: 0}
    box, sent = outbox(backlog.get, ackers=(9,))
    box.fold(123, 456)  # a spout's init for a new tree, nothing else buffered
    assert box.flush_due(0.0) == WAIT_NOTHING and sent[0][0] == 9
    assert sent[0][1][0].values == [struct.pack("<2Q", 123, 456)]  # one packed (root, XOR) pair


def test_without_knowing_its_consumers_a_partial_batch_waits_the_interval():
    box, sent = outbox(None)
    assert turn(box, 0.0, 1) == INTERVAL and sent == []
    assert turn(box, 0.0011, 0) == WAIT_NOTHING and sent == [(7, [0])]


def test_a_lone_tuple_reaches_its_bolt_in_the_same_turn_whatever_the_flush_interval():
    """A real worker's executors, stepped by hand: with a 60 s backstop and one tuple in
    flight at a time (max pending 1), each tuple is executed by its bolt in the turn that
    emitted it, and acked there, so the next goes in the next turn."""
    name = unique_name("lone")
    b = TopologyBuilder()
    b.set_spout("rows", FixedTupleSpout(name, [[i] for i in range(3)], ["n"]))
    b.set_bolt("sink", RecordingBolt(name + ".out")).shuffle("rows")
    with SteppedWorker(b.build(), {"topology.batch.flush.interval.millis": 60_000,
                                   "topology.acker.executors": 1, "topology.max.spout.pending": 1}) as w:
        for i in range(3):
            w.step()
            assert [v[3][0] for v in Recorder.get(name + ".out")] == list(range(i + 1))
        w.run(lambda: len(Recorder.get(name + ".acked")) == 3, turns=5)


DUE: dict[str, int] = {}  # paced spout name -> tuples due now
CALLS: dict[str, int] = {}


class Paced(Spout):
    """Emits while tuples are due (the test sets how many); counts its next_tuple calls."""

    def __init__(self, name):
        self.name = name

    def open(self, conf, context, collector):
        self.collector, self.n = collector, 0

    def next_tuple(self):
        CALLS[self.name] = CALLS.get(self.name, 0) + 1
        if DUE.get(self.name, 0) > 0:
            DUE[self.name] -= 1
            self.collector.emit([self.n])
            self.n += 1

    def declare_output_fields(self, declarer):
        declarer.declare(["n"])


def test_a_paced_spout_is_called_about_as_often_as_it_emits():
    """Three tuples due a turn: a turn's calls start at one and double while every call
    emits, so the spout is not asked 32 times for three tuples."""
    name = unique_name("paced")
    b = TopologyBuilder()
    b.set_spout("paced", Paced(name))
    b.set_bolt("sink", RecordingBolt(name + ".out")).shuffle("paced")
    with SteppedWorker(b.build(), {"topology.acker.executors": 0}) as w:
        for _ in range(10):
            DUE[name] = 3
            w.step()
        assert len(Recorder.get(name + ".out")) == 30
        assert CALLS[name] <= 10 * 7  # 1 + 2 emitting, then 4 that found none due


def test_the_end_of_backpressure_from_another_worker_wakes_the_spouts_thread():
    """Another worker's task (99) lifts its backpressure: the spouts held by it are woken
    at once, not at their wait strategy's next poll."""
    name = unique_name("bp-wake")
    b = TopologyBuilder()
    b.set_spout("paced", Paced(name))
    b.set_bolt("sink", RecordingBolt(name + ".out")).shuffle("paced")
    with SteppedWorker(b.build(), {"topology.acker.executors": 0}) as w:
        rt = w.runtime
        rt._remote = RemoteBackpressure(own_tasks=list(rt.local_tasks), topology_tasks=[*rt.local_tasks, 99])
        rt.receive_control(codec.KIND_BACKPRESSURE, {99: True})
        assert rt.overloaded()
        bell = rt.doorbells[0]
        bell.wait(0)  # nothing rung
        rt.receive_control(codec.KIND_BACKPRESSURE, {99: False})
        started = time.monotonic()
        bell.wait(2.0)  # rung: returns at once, the spout emits at its next turn
        assert time.monotonic() - started < 1.0 and not rt.overloaded()
