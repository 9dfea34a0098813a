"""End-to-end topologies in local mode, each run in three modes: one worker (its executors
taking turns on one thread), three in-process workers (tuples between workers are
serialized through the in-process transport), and one worker with a thread per executor."""
import collections
import itertools
import time

import pytest

from squall import BasicBolt, Bolt, LocalCluster, Spout, TopologyBuilder
from squall.clock import FakeClock
from squall.testing.components import FixedTupleSpout, Recorder, RecordingBolt, unique_name
from squall.testing.waiting import wait_for

MODES = {
    "1-worker": {"topology.workers": 1},
    "3-workers": {"topology.workers": 3},
    "thread-per-executor": {"topology.workers": 1, "topology.worker.executor.threads": 0},
}


@pytest.fixture(params=list(MODES))
def mode(request):
    """The topology config that selects the execution mode."""
    return MODES[request.param]


@pytest.fixture
def cluster():
    with LocalCluster({"squall.log.level": "WARNING"}) as c:
        yield c


SENTENCES = [f"{a} {b} {c}" for a, b, c in itertools.product(
    ["the", "a", "one"], ["cow", "moon", "apple", "day"], ["jumped", "keeps", "away"])] * 7


class FlakySplit(Bolt):
    """Splits sentences; the first time it sees every 5th sentence it emits the first word
    and then fails the input (a partial failure: the replay re-emits that word)."""

    def __init__(self, key):
        self.key = key

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, t):
        sid, sentence = t["sid"], t["sentence"]
        words = sentence.split()
        if sid % 5 == 0 and sid not in Recorder.get(self.key):
            Recorder.add(self.key, sid)
            self.collector.emit([sid, 0, words[0]], anchors=t)
            self.collector.fail(t)
            return
        for i, w in enumerate(words):
            self.collector.emit([sid, i, w], anchors=t)
        self.collector.ack(t)

    def declare_output_fields(self, d):
        d.declare(["sid", "idx", "word"])


class DedupCount(Bolt):
    """Counts each (sentence, position) once, as an idempotent sink must under at-least-once."""

    def __init__(self, key):
        self.key = key

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.seen = set()

    def execute(self, t):
        k = (t["sid"], t["idx"])
        if k not in self.seen:
            self.seen.add(k)
            Recorder.add(self.key, t["word"])
        self.collector.ack(t)

    def declare_output_fields(self, d):
        pass


def test_word_count_matches_reference_with_failures_and_acking(cluster, mode):
    name = unique_name("wc")
    rows = list(enumerate(SENTENCES))
    b = TopologyBuilder()
    b.set_spout("sentences", FixedTupleSpout(name, rows, ["sid", "sentence"]), 2)
    b.set_bolt("split", FlakySplit(name + ".flaky"), 3).shuffle("sentences")
    b.set_bolt("count", DedupCount(name + ".words"), 2).fields("split", ["word"])
    cluster.submit(name, dict(mode), b.build())
    wait_for(lambda: len(set(Recorder.get(name + ".acked"))) == len(rows), 30, what="every sentence acked")
    reference = collections.Counter(w for s in SENTENCES for w in s.split())
    assert collections.Counter(Recorder.get(name + ".words")) == reference
    failed = sorted(Recorder.get(name + ".failed"))
    assert failed == [sid for sid, _ in rows if sid % 5 == 0]
    assert sorted(Recorder.get(name + ".acked")) == [sid for sid, _ in rows], "each acked exactly once"


class PairUp(Bolt):
    """Joins inputs two by two: emits their sum anchored to both, then acks both."""

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.held = None

    def execute(self, t):
        if self.held is None:
            self.held = t
            return
        first, self.held = self.held, None
        self.collector.emit([first["n"] + t["n"]], anchors=[first, t])
        self.collector.ack(first)
        self.collector.ack(t)

    def declare_output_fields(self, d):
        d.declare(["sum"])


class GatedSink(Bolt):
    """Holds sums; once ``<key>.open`` is set, acks them on the next tick, failing the first
    sum once."""

    def __init__(self, key):
        self.key = key

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.held = []

    def execute(self, t):
        if not t.is_tick():
            Recorder.add(self.key, t["sum"])
            self.held.append(t)
        if not Recorder.get(self.key + ".open"):
            return
        for h in self.held:
            if not Recorder.get(self.key + ".failed_once"):
                Recorder.add(self.key + ".failed_once", h["sum"])
                self.collector.fail(h)
            else:
                self.collector.ack(h)
        self.held = []

    def component_config(self):
        return {"topology.tick.tuple.freq.secs": 0.1}


def test_a_tuple_anchored_to_two_trees_completes_both_only_when_acked(cluster, mode):
    name = unique_name("join")
    b = TopologyBuilder()
    b.set_spout("nums", FixedTupleSpout(name, [[i] for i in range(8)], ["n"]))
    b.set_bolt("pair", PairUp()).global_("nums")
    b.set_bolt("sink", GatedSink(name + ".sums")).global_("pair")
    cluster.submit(name, {**mode, "topology.message.timeout.secs": 60}, b.build())
    wait_for(lambda: len(Recorder.get(name + ".sums")) == 4, 10, what="four joined tuples")
    time.sleep(0.3)
    # Each pair member was acked by the join, but its tree holds the joined tuple: open.
    assert Recorder.get(name + ".acked") == [] and Recorder.get(name + ".failed") == []
    Recorder.add(name + ".sums.open", True)
    wait_for(lambda: len(Recorder.get(name + ".acked")) == 8, 15, what="every tree complete")
    assert sorted(Recorder.get(name + ".acked")) == list(range(8))
    # Failing the first joined tuple failed both trees it belonged to; both were replayed.
    failed = sorted(Recorder.get(name + ".failed"))
    assert len(failed) == 2 and sum(failed) == Recorder.get(name + ".sums.failed_once")[0]


class Forgetful(Bolt):
    """Never acks a tuple the first time it sees it: only the message timeout saves it."""

    def __init__(self, key):
        self.key = key

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, t):
        if t["n"] not in Recorder.get(self.key):
            Recorder.add(self.key, t["n"])
            return
        self.collector.ack(t)


def test_timeout_reaches_spout_fail_and_replay_completes(mode):
    name = unique_name("timeout")
    b = TopologyBuilder()
    b.set_spout("nums", FixedTupleSpout(name, [[i] for i in range(20)], ["n"]))
    b.set_bolt("forget", Forgetful(name + ".seen"), 2).shuffle("nums")
    clock = FakeClock()  # time moves only when the test says so
    with LocalCluster({"squall.log.level": "WARNING"}, clock=clock) as cluster:
        cluster.submit(name, {**mode, "topology.message.timeout.secs": 1}, b.build())
        wait_for(lambda: len(Recorder.get(name + ".seen")) == 20, 20, what="every tuple seen once")
        assert Recorder.get(name + ".failed") == []  # no time has passed: nothing timed out
        clock.advance(1.5)
        wait_for(lambda: len(Recorder.get(name + ".acked")) == 20, 20, what="replays acked")
    assert sorted(Recorder.get(name + ".failed")) == list(range(20))


class Exploding(BasicBolt):
    """Raises on n == 3 the first time it sees it (``<key>`` records that it did)."""

    def __init__(self, key):
        self.key = key

    def execute(self, t):
        if t["n"] == 3 and Recorder.get(self.key) == []:
            Recorder.add(self.key, 1)
            raise RuntimeError("boom on three")
        self.collector.emit([t["n"] * 10])

    def declare_output_fields(self, d):
        d.declare(["m"])


def test_user_exception_is_reported_fails_the_tuple_and_the_topology_goes_on(cluster, mode):
    name = unique_name("boom")
    b = TopologyBuilder()
    b.set_spout("nums", FixedTupleSpout(name, [[i] for i in range(10)], ["n"]))
    b.set_bolt("explode", Exploding(name + ".exploded"), 2).shuffle("nums")
    b.set_bolt("sink", RecordingBolt(name + ".out")).shuffle("explode")
    cluster.submit(name, dict(mode), b.build())
    wait_for(lambda: len(Recorder.get(name + ".acked")) == 10, 20, what="all acked")
    assert Recorder.get(name + ".failed") == [3]
    assert sorted(v[3][0] for v in Recorder.get(name + ".out")) == [n * 10 for n in range(10)]
    errors = cluster.errors(name)
    assert "explode" in errors and "RuntimeError: boom on three" in errors["explode"][0]["error"]


class WrongArity(Bolt):
    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, t):
        self.collector.emit([1, 2], stream="pairs")

    def declare_output_fields(self, d):
        d.declare(["only"], stream="pairs")


def test_emit_of_wrong_arity_names_component_and_stream(cluster):
    name = unique_name("arity")
    b = TopologyBuilder()
    b.set_spout("nums", FixedTupleSpout(name, [[1]], ["n"]))
    b.set_bolt("wrong", WrongArity()).shuffle("nums")
    cluster.submit(name, {"topology.message.timeout.secs": 60}, b.build())
    wait_for(lambda: "wrong" in cluster.errors(name), 10, what="error reported")
    text = cluster.errors(name)["wrong"][0]["error"]
    assert "component 'wrong' emitted 2 values on stream 'pairs', which declares 1 fields" in text
    wait_for(lambda: Recorder.get(name + ".failed")[:1] == [0], 10, what="input failed")


class TickCounter(Bolt):
    def __init__(self, key):
        self.key = key

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, t):
        if t.is_tick():
            Recorder.add(self.key, t.source_component)

    def component_config(self):
        return {"topology.tick.tuple.freq.secs": 0.2}


def test_tick_tuples_arrive_at_the_configured_rate():
    name = unique_name("tick")
    b = TopologyBuilder()
    b.set_spout("nums", FixedTupleSpout(name, [], ["n"]))
    b.set_bolt("ticker", TickCounter(name + ".ticks")).shuffle("nums")
    clock = FakeClock()
    with LocalCluster({"squall.log.level": "WARNING"}, clock=clock) as cluster:
        cluster.submit(name, {}, b.build())
        for n in range(1, 6):  # one tick per 0.2 s of the clock
            clock.advance(0.2)
            wait_for(lambda: len(Recorder.get(name + ".ticks")) >= n, 10, what=f"tick {n}")
            assert len(Recorder.get(name + ".ticks")) == n
    assert set(Recorder.get(name + ".ticks")) == {"__system"}


class Hoarder(Bolt):
    def prepare(self, conf, context, collector):
        self.held = []

    def execute(self, t):
        self.held.append(t)


def test_max_spout_pending_bounds_tuples_in_flight(cluster):
    name = unique_name("pending")
    b = TopologyBuilder()
    b.set_spout("nums", FixedTupleSpout(name, [[i] for i in range(500)], ["n"]))
    b.set_bolt("hoard", Hoarder()).shuffle("nums")
    cluster.submit(name, {"topology.max.spout.pending": 37, "topology.message.timeout.secs": 60}, b.build())
    wait_for(lambda: sum(s["executed"] for s in cluster.stats(name) if s["component"] == "hoard") == 37, 10,
               what="37 tuples in flight")
    time.sleep(0.3)
    assert sum(s["executed"] for s in cluster.stats(name) if s["component"] == "hoard") == 37
    assert [s["pending"] for s in cluster.stats(name) if s["kind"] == "spout"] == [37]


class Lifecycle(Spout):
    def __init__(self, key):
        self.key = key

    def open(self, conf, context, collector):
        self.collector = collector
        self.n = 0

    def activate(self):
        Recorder.add(self.key, "activate")

    def deactivate(self):
        # next_tuple runs on this thread: the last n. Recorded before "deactivate", which the
        # test waits for before it reads this (after it, a descheduled spout thread left the
        # test nothing to read).
        Recorder.add(self.key + ".emitted", self.n)
        Recorder.add(self.key, "deactivate")

    def next_tuple(self):
        self.n += 1
        self.collector.emit([self.n])
        time.sleep(0.001)

    def declare_output_fields(self, d):
        d.declare(["n"])


def test_deactivate_stops_next_tuple_and_activate_resumes(cluster, mode):
    name = unique_name("active")
    b = TopologyBuilder()
    b.set_spout("gen", Lifecycle(name + ".life"))
    b.set_bolt("sink", RecordingBolt(name + ".out")).shuffle("gen")
    cluster.submit(name, dict(mode), b.build())
    wait_for(lambda: len(Recorder.get(name + ".out")) > 10, 10, what="flow")
    cluster.deactivate(name)
    wait_for(lambda: Recorder.get(name + ".life")[-1:] == ["deactivate"], 5, what="deactivate()")
    (before,) = Recorder.get(name + ".life.emitted")
    # What was emitted before arrives (from another worker it may take a while on a busy
    # machine); then nothing more.
    wait_for(lambda: len(Recorder.get(name + ".out")) == before, 10, what="tuples emitted before deactivate()")
    time.sleep(0.5)
    assert len(Recorder.get(name + ".out")) == before
    cluster.activate(name)
    wait_for(lambda: len(Recorder.get(name + ".out")) > before + 10, 10, what="flow resumes")
    assert Recorder.get(name + ".life")[:3] == ["activate", "deactivate", "activate"]


class Router(Bolt):
    """Sends each number straight to the task n % tasks of the direct subscriber."""

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.targets = context.component_tasks("direct_sink")

    def execute(self, t):
        n = t["n"]
        self.collector.emit_direct(self.targets[n % len(self.targets)], [n], stream="routed", anchors=t)
        self.collector.emit([n], anchors=t)
        self.collector.ack(t)

    def declare_output_fields(self, d):
        d.declare(["n"], stream="routed", direct=True)
        d.declare(["n"])


def test_all_global_and_direct_groupings_deliver_to_the_right_tasks(cluster, mode):
    name = unique_name("groups")
    b = TopologyBuilder()
    b.set_spout("nums", FixedTupleSpout(name, [[i] for i in range(12)], ["n"]))
    b.set_bolt("router", Router(), 2).shuffle("nums")
    b.set_bolt("direct_sink", RecordingBolt(name + ".direct"), 3).direct("router", "routed")
    b.set_bolt("all_sink", RecordingBolt(name + ".all"), 3).all("router")
    b.set_bolt("global_sink", RecordingBolt(name + ".global"), 3).global_("router")
    topo = b.build()
    cluster.submit(name, dict(mode), topo)
    wait_for(lambda: len(Recorder.get(name + ".acked")) == 12, 20, what="all acked")
    direct = Recorder.get(name + ".direct")
    tasks = sorted({t for t, *_ in Recorder.get(name + ".all")})
    assert len(tasks) == 3
    assert all(task == _direct_tasks(name, cluster)[n % 3] for task, _, _, (n,) in direct) and len(direct) == 12
    assert collections.Counter(t for t, *_ in Recorder.get(name + ".all")) == {t: 12 for t in tasks}
    glob = Recorder.get(name + ".global")
    assert len(glob) == 12 and len({t for t, *_ in glob}) == 1
    assert glob[0][0] == min(_task_ids(cluster, name, "global_sink"))


def _task_ids(cluster, name, component):
    return [t for s in cluster.stats(name) if s["component"] == component
            for t in range(s["executor"][0], s["executor"][1] + 1)]


def _direct_tasks(name, cluster):
    return sorted(_task_ids(cluster, name, "direct_sink"))


class SlowSink(Bolt):
    def __init__(self, key):
        self.key = key

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, t):
        time.sleep(0.0002)
        Recorder.add(self.key, t["n"])
        self.collector.ack(t)


def test_slow_bolt_backpressure_keeps_queues_bounded_and_loses_nothing(mode):
    hwm = 2  # in-process sockets are bounded like ZeroMQ's, by the cluster's zmq.hwm
    with LocalCluster({"zmq.hwm": hwm}) as cluster:
        _slow_bolt_backpressure(cluster, mode, hwm)


def _slow_bolt_backpressure(cluster, mode, hwm):
    name = unique_name("bp")
    n = 3000
    b = TopologyBuilder()
    b.set_spout("nums", FixedTupleSpout(name, [[i] for i in range(n)], ["n"], reliable=False))
    b.set_bolt("slow", SlowSink(name + ".got")).shuffle("nums")
    cap, batch, transfer = 200, 50, 200
    cluster.submit(name, {**mode, "topology.executor.receive.buffer.size": cap,
                          "topology.producer.batch.size": batch, "topology.spout.batch.size": batch,
                          "topology.transfer.buffer.size": transfer}, b.build())
    wait_for(lambda: len(Recorder.get(name + ".got")) == n, 30, what="every tuple delivered")
    assert sorted(Recorder.get(name + ".got")) == list(range(n))
    peak = max(s["queue_peak"] for s in cluster.stats(name) if s["component"] == "slow")
    # In one worker the spout pauses while the queue is full. Across workers the receiving
    # worker raises backpressure and the sender's spout pauses; what was already on its way
    # (transfer queue, socket buffer of hwm frames) is bounded by configuration.
    bound = cap + batch if mode["topology.workers"] == 1 else cap + transfer + hwm * (transfer + batch) + batch
    assert peak <= bound, f"queue grew to {peak} (bound {bound})"


def test_acking_off_acks_at_once(cluster):
    name = unique_name("noack")
    b = TopologyBuilder()
    b.set_spout("c", FixedTupleSpout(name, [[n] for n in range(1, 6)], ["n"]))
    b.set_bolt("h", Hoarder()).shuffle("c")
    cluster.submit(name, {"topology.acker.executors": 0}, b.build())
    wait_for(lambda: sorted(Recorder.get(name + ".acked")) == [0, 1, 2, 3, 4], 10, what="immediate acks")


def test_submit_rejects_bad_config_and_duplicate_names(cluster):
    b = TopologyBuilder()
    b.set_spout("c", FixedTupleSpout("x", [[1]], ["n"]))
    topo = b.build()
    from squall.config import ConfigError
    with pytest.raises(ConfigError, match="topology.workerz"):
        cluster.submit("bad", {"topology.workerz": 2}, topo)
    cluster.submit("dup", {}, topo)
    with pytest.raises(ValueError, match="already running"):
        cluster.submit("dup", {}, topo)
    cluster.kill("dup")
    assert cluster.topologies() == []
