"""Checkpointing as wrappers around ordinary spouts and bolts, stepped by hand on a
FakeClock (support.stepping): acks wait for the commit that covers them, uncommitted
tuples count toward max pending, and a failed tuple rolls every task back and replays
what was not committed. The checkpoint interval is the clock's, so each checkpoint
happens when the test moves time on."""
import pickle

from squall import Bolt, StatefulBolt, TopologyBuilder
from squall.model import CHECKPOINT, CHECKPOINT_STREAM, system_topology
from squall.state.checkpointing import CheckpointedBolt, CheckpointedSpout
from squall.state.inspect import read_record
from squall.testing.components import FixedTupleSpout, PositionedRowSpout, Recorder, unique_name
from squall.testing.state import committed_component
from support.stepping import SteppedWorker

MEMORY = {"topology.state.provider": "memory"}
CONF = {**MEMORY, "topology.state.checkpoint.interval.ms": 1000, "topology.max.spout.pending": 1000,
        "topology.message.timeout.secs": 30}


class CountOnce(StatefulBolt):
    def execute(self, t):
        self.state.put(t["w"], self.state.get(t["w"], 0) + 1)
        self.collector.ack(t)


class FailOnce(Bolt):
    """Fails the row ``bad`` the first time it sees it; passes everything on."""

    def __init__(self, bad):
        self.bad = bad

    def prepare(self, conf, context, collector):
        self.collector, self.seen = collector, set()

    def execute(self, t):
        if t["w"] == self.bad and self.bad not in self.seen:
            self.seen.add(self.bad)
            self.collector.fail(t)
            return
        self.collector.emit([t["w"]], anchors=t)
        self.collector.ack(t)

    def declare_output_fields(self, d):
        d.declare(["w"])


class Gated:
    """A row spout that emits its rows once ``<name>.go`` is recorded."""

    name: str

    def next_tuple(self):
        if Recorder.get(self.name + ".go"):
            super().next_tuple()  # type: ignore[misc]


class GatedRows(Gated, FixedTupleSpout):
    pass


class GatedPositionedRows(Gated, PositionedRowSpout):
    pass


def relayed_count(spout):
    """``spout`` -> a relay that fails the first ``k1`` -> a stateful count."""
    b = TopologyBuilder()
    b.set_spout("rows", spout)
    b.set_bolt("relay", FailOnce("k1")).shuffle("rows")
    b.set_bolt("count", CountOnce()).fields("relay", ["w"])
    return b.build()


def counting_topology(name, rows, relay=None):
    b = TopologyBuilder()
    b.set_spout("rows", GatedRows(name, rows, ["w"]))
    if relay is None:
        b.set_bolt("count", CountOnce()).fields("rows", ["w"])
    else:
        b.set_bolt("relay", relay).shuffle("rows")
        b.set_bolt("count", CountOnce()).fields("relay", ["w"])
    return b.build()


def committed(w):
    record = read_record(MEMORY, w.name)
    return record, committed_component(MEMORY, w.name, "count", 1, record.restore_point())[0]


def first_checkpoint(w, key):
    """Run until the first checkpoint (right after the INIT) has committed, then let the
    rows of spout ``key`` flow."""
    def done():
        record = read_record(MEMORY, w.name)
        return record is not None and record.restore_point() >= 1
    w.run(done)
    Recorder.add(key + ".go", True)


def test_the_topology_runs_wrapped_components_and_keeps_the_users():
    topology = counting_topology("x", [["a"]])
    assert set(topology.components) == {"rows", "count", CHECKPOINT}
    # Declared components stay what the user gave (batch runs and checks see those)...
    assert isinstance(topology.components["count"].instantiate(), CountOnce)
    assert isinstance(topology.components["rows"].instantiate(), GatedRows)
    # ...and a running topology's tasks run them wrapped.
    count, rows = topology.components["count"].runnable(), topology.components["rows"].runnable()
    assert isinstance(count, CheckpointedBolt) and isinstance(count.bolt, CountOnce) and count.stateful
    assert isinstance(rows, CheckpointedSpout) and isinstance(rows.spout, GatedRows) and not rows.stateful
    assert topology.components[CHECKPOINT].runnable().__class__.__name__ == "CheckpointSpout"
    # The barrier edges are the system topology's, not the user's.
    assert all(CHECKPOINT_STREAM not in c.streams for c in topology.components.values() if c.id != CHECKPOINT)
    system = system_topology(topology, {"topology.state.checkpoint.timeout.secs": 7})
    assert {(s.component, s.stream) for s in system.components["rows"].inputs} == {(CHECKPOINT, CHECKPOINT_STREAM)}
    assert system.components[CHECKPOINT].config["topology.message.timeout.secs"] == 7
    assert pickle.loads(topology.to_bytes())[1][0].wrapper == topology.components[CHECKPOINT].wrapper is None


def test_acks_wait_for_the_commit_that_covers_them():
    name = unique_name("deferred")
    rows = [[f"w{i % 5}"] for i in range(200)]
    with SteppedWorker(counting_topology(name, rows), CONF, name=name) as w:
        first_checkpoint(w, name)
        spout = w.executor("rows")
        w.run(lambda: w.executor("count").stats().executed == 200)
        w.run()  # every tree complete: the acker has told the spout
        # Counted, but no checkpoint covers them yet: not acked, still pending.
        assert Recorder.get(name + ".acked") == [] and spout.stats().pending == 200
        w.advance(0.9)
        w.run()
        assert Recorder.get(name + ".acked") == []  # the interval (1 s) has not passed
        w.advance(0.1)  # it has: PREPARE, then COMMIT
        w.run(lambda: len(Recorder.get(name + ".acked")) == 200)
        assert sorted(Recorder.get(name + ".acked")) == list(range(200))
        assert spout.stats().pending == 0 and spout.stats().acked == 200
        record, state = committed(w)
        assert state == {f"w{k}": 40 for k in range(5)} and record.txid >= 1
        assert spout.stats().sections["checkpoint"]["committed"] >= 1
        assert Recorder.get(name + ".failed") == []


def test_uncommitted_tuples_count_toward_max_pending():
    name = unique_name("bounded")
    rows = [[f"w{i % 3}"] for i in range(100)]
    with SteppedWorker(counting_topology(name, rows), {**CONF, "topology.max.spout.pending": 30}, name=name) as w:
        first_checkpoint(w, name)
        count = w.executor("count")
        w.run()
        w.run()
        assert count.stats().executed == 30  # complete trees hold their place until a commit
        done = 30
        while done < 100:
            w.advance(1.0)
            w.run()
            w.run()
            done = min(100, done + 30)
            assert count.stats().executed == done
        w.advance(1.0)
        w.run(lambda: len(Recorder.get(name + ".acked")) == 100)
        assert committed(w)[1] == {"w0": 34, "w1": 33, "w2": 33}


def test_a_failed_tuple_rolls_back_and_replays_what_was_not_committed():
    name = unique_name("rollback")
    rows = [[f"w{i % 4}"] for i in range(40)]
    with SteppedWorker(counting_topology(name, rows, FailOnce("w3")), CONF, name=name) as w:
        first_checkpoint(w, name)
        w.run(lambda: w.executor("count").stats().executed >= 39)
        w.run()
        # The failure asked for a rollback: nothing is acked.
        assert Recorder.get(name + ".acked") == [] and Recorder.get(name + ".failed") == []
        w.advance(1.0)  # the next PREPARE fails; the checkpoint spout rolls everyone back
        w.run(lambda: len(Recorder.get(name + ".failed")) == 40)
        # Every uncommitted tuple heard fail (a plain spout replays them)...
        assert sorted(Recorder.get(name + ".failed")) == list(range(40))
        for _ in range(3):
            w.advance(1.0)
            w.run()
        w.run(lambda: len(Recorder.get(name + ".acked")) == 40)
        # ...and the rolled-back state counted each row exactly once.
        record, state = committed(w)
        assert state == {f"w{k}": 10 for k in range(4)} and record.recoveries >= 2


def test_a_stateful_spout_rewinds_to_its_committed_position():
    name = unique_name("rewind")
    rows = [[f"k{i % 2}"] for i in range(30)]
    with SteppedWorker(relayed_count(PositionedRowSpout(name, rows, ["w"])), CONF, name=name) as w:
        for _ in range(6):
            w.run()
            w.advance(1.0)
        w.run(lambda: len(Recorder.get(name + ".acked")) == 30)
        assert sorted(Recorder.get(name + ".acked")) == list(range(30))
        assert committed(w)[1] == {"k0": 15, "k1": 15}


def test_a_tuple_that_fails_after_its_spout_prepared_fails_that_prepare():
    """The rows leave the spout, then the PREPARE reaches the spout (its position now counts
    them all) before the relay has failed one: that PREPARE must not commit."""
    name = unique_name("late-fail")
    rows = [[f"k{i % 2}"] for i in range(10)]
    with SteppedWorker(relayed_count(GatedPositionedRows(name, rows, ["w"])), CONF, name=name) as w:
        first_checkpoint(w, name)
        spout, coordinator = w.executor("rows"), w.executor(CHECKPOINT)
        spout.step(w.clock.monotonic())  # all ten rows wait in the relay's queue
        w.clock.advance(1.0)
        coordinator.step(w.clock.monotonic())  # PREPARE
        spout.step(w.clock.monotonic())  # prepared at position 10, the barrier behind the rows
        w.run()
        for _ in range(4):
            w.advance(1.0)
            w.run()
        w.run(lambda: len(Recorder.get(name + ".acked")) == 10)
        record, state = committed(w)
        assert state == {"k0": 5, "k1": 5}
        assert record.recoveries >= 2  # the PREPARE failed and everyone rolled back
        assert committed_component(MEMORY, w.name, "rows", 1, record.restore_point())[0] == {"position": 10}


def test_the_barrier_that_follows_an_ack_goes_while_next_tuple_is_held():
    """The checkpoint spout's next_tuple, having sent nothing, is held 100 ms
    (squall.runtime.spout_pacing); the PREPARE that follows INIT's ack and the COMMIT that
    follows PREPARE's go from ``ack`` in the turn the ack arrives, the clock standing still."""
    name = unique_name("prompt")
    with SteppedWorker(counting_topology(name, [["a"]]), CONF, name=name) as w:
        spout = w.executor(CHECKPOINT)
        coordinator = next(iter(spout.tasks.values())).spout.coordinator
        rest = [e for e in w.executors if e is not spout]
        now = w.clock.monotonic()
        for action in ("init", "prepare", "commit"):
            if action == "init":
                spout.step(now)  # sends INIT
            sent = coordinator.in_flight
            assert sent is not None and sent[1] == action, f"{action} not sent (in flight: {sent})"
            assert 0.0 < spout.step(now) <= 0.1  # next_tuple sends nothing: held (100 ms) from then on
            while not len(spout.queue):  # the tree goes round; its ack waits in the spout's queue
                for e in rest:
                    e.step(now)
            spout.step(now)  # the ack: what follows goes at once (after COMMIT, nothing is due)
        assert coordinator.in_flight is None and coordinator.record.phase == "committed"
        assert coordinator.record.txid == 1
