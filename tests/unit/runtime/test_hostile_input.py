"""Nothing from the wire ends a worker: bad groups are dropped and counted per cause, the
rest of their frame is delivered, and executors outlive every callback that raises."""
import itertools

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from squall import LocalCluster, Spout, TopologyBuilder
from squall.config import build_config
from squall.messaging import codec
from squall.model import ACK_ACK, ACK_FAIL, system_topology, task_ids
from squall.runtime.admission import Admission
from squall.runtime.serialization import SerializationError, TupleSerializer
from squall.testing.components import FixedTupleSpout, NullBolt, Recorder, RecordingBolt, unique_name
from squall.testing.waiting import wait_for
from squall.testing.wire import raw_sender, runtime_over_zmq

# Task ids of the topology below (components in id order): __acker 1, sink 2-3, src 4.
ACKER_TASK, SINK_TASKS, SPOUT_TASK = 1, (2, 3), 4
MAX_U64 = (1 << 64) - 1


def _topology(key):
    b = TopologyBuilder()
    b.set_spout("src", FixedTupleSpout(key, [], ["v"]))
    b.set_bolt("sink", RecordingBolt(key), 2).shuffle("src")
    return b.build()


def _conf(**extra):
    return build_config({"topology.acker.executors": 1, "zmq.bind.host": "127.0.0.1",
                         "worker.pin.cpu": False, "squall.messaging.transport": "zmq", **extra},
                        user_file=False)


def _payload(*groups):
    return msgpack.packb(list(groups), use_bin_type=True)


def _pairs(*ids):
    """Ids as packed pairs of little-endian 64-bit ints, as a worker sends them."""
    return b"".join(i.to_bytes(8, "little") for i in ids)


GOOD = [SPOUT_TASK, "default", [["good"]], None]
# (group, cause): each is refused alone; the good group beside it still arrives.
HOSTILE_GROUPS = [
    ([SPOUT_TASK, "default"], "bad_group"),
    ("not a group", "bad_group"),
    ([{"a": 1}, "default", [["x"]], None], "bad_group"),                # unhashable source
    ([SPOUT_TASK, ["default"], [["x"]], None], "bad_group"),            # unhashable stream
    ([SPOUT_TASK, "default", "values", None], "bad_group"),
    ([SPOUT_TASK, "default", [["a", "b"]], None], "bad_group"),          # arity
    ([SPOUT_TASK, "default", [7], None], "bad_group"),                   # a value is not a list
    ([99, "default", [["x"]], None], "unknown_source"),
    (["4", "default", [["x"]], None], "bad_group"),
    ([SPOUT_TASK, "nostream", [["x"]], None], "unknown_source"),
    ([SINK_TASKS[0], "default", [["x"]], None], "unknown_source"),       # sink declares no stream
    ([SPOUT_TASK, "default", [["x"]], [{"root": 1}]], "bad_ids"),
    ([SPOUT_TASK, "default", [["x"]], [{1: 2.5}]], "bad_ids"),
    ([SPOUT_TASK, "default", [["x"]], [{1: 2, 3: "4"}]], "bad_ids"),
    ([SPOUT_TASK, "default", [["x"]], [[1, 2]]], "bad_ids"),
    ([SPOUT_TASK, "default", [["x"]], [None, None]], "bad_ids"),
    ([SPOUT_TASK, "default", [["x"]], [{-1: 2}]], "bad_ids"),              # ids are 64-bit unsigned
    ([SPOUT_TASK, "default", [["x"]], [{1: -(1 << 63)}]], "bad_ids"),
    ([SPOUT_TASK, "default", [["x"]], [{1: 2, -3: 4}]], "bad_ids"),         # two trees
    ([SPOUT_TASK, ACK_ACK, [[{1: 2}]], None], "acker_stream"),           # acker stream to a bolt
    ([SPOUT_TASK, "default", [["x"]], b"\0" * 15], "bad_ids"),            # packed pairs: a short pair
    ([SPOUT_TASK, "default", [["x"], ["y"]], _pairs(1, 2)], "bad_ids"),  # fewer pairs than tuples
    ([SPOUT_TASK, "default", [["x"]], _pairs(1, 2, 3, 4)], "bad_ids"),   # more pairs than tuples
    ([SPOUT_TASK, "default", [["x"]], _pairs(0, 5)], "bad_ids"),         # an edge without a root
    ([SPOUT_TASK, "default", [["x", "y"]], _pairs(1, 2)], "bad_group"),  # arity, with packed ids
    ([SPOUT_TASK, "default", [7], _pairs(1, 2)], "bad_group"),
]


def _serializer():
    topo = system_topology(_topology("unit"), {"topology.acker.executors": 1})
    tasks = task_ids(topo)

    def fields(component, stream):
        from squall.model import ACKER_STREAMS
        return ACKER_STREAMS.get(stream) or topo.stream_fields(component, stream)
    return TupleSerializer({}, tasks, fields, Admission(topo, tasks))


@pytest.mark.parametrize("group,cause", HOSTILE_GROUPS, ids=[str(i) for i in range(len(HOSTILE_GROUPS))])
def test_a_bad_group_is_dropped_with_its_cause_and_the_rest_delivered(group, cause):
    ser = _serializer()
    dropped = []
    got = ser.loads(_payload(GOOD, group, GOOD), SINK_TASKS[0], lambda c, n, d: dropped.append(c))
    assert [t.values for t in got] == [["good"], ["good"]]
    assert dropped == [cause]


@pytest.mark.parametrize("target,group,cause", [
    (ACKER_TASK, [ACKER_TASK, ACK_ACK, [[{1: 2}]], None], "acker_stream"),        # acker to acker
    (ACKER_TASK, [SPOUT_TASK, ACK_ACK, [[[1, 2]]], None], "acker_stream"),        # not a map
    (ACKER_TASK, [SPOUT_TASK, ACK_ACK, [[{1: "x"}]], None], "acker_stream"),
    (ACKER_TASK, [SPOUT_TASK, ACK_ACK, [[{-1: 2}]], None], "acker_stream"),       # not 64-bit unsigned
    (ACKER_TASK, [SPOUT_TASK, ACK_ACK, [[{1: -2}]], None], "acker_stream"),
    (ACKER_TASK, [SPOUT_TASK, ACK_FAIL, [[[-1]]], None], "acker_stream"),
    (ACKER_TASK, [SPOUT_TASK, ACK_FAIL, [[[[-1, "why"]]]], None], "acker_stream"),
    (SPOUT_TASK, [ACKER_TASK, ACK_ACK, [[[-1]]], None], "acker_stream"),
    (ACKER_TASK, [SPOUT_TASK, ACK_ACK, [[{5: 2, True: 3}]], None], "acker_stream"),  # a bool is no root
    (ACKER_TASK, [SPOUT_TASK, ACK_ACK, [[{1: 2}], [{3: 4.5}]], None], "acker_stream"),  # bad in a later one
    (ACKER_TASK, [SPOUT_TASK, ACK_FAIL, [[{1: 2}]], None], "acker_stream"),       # not a list
    (ACKER_TASK, [SPOUT_TASK, ACK_FAIL, [[[1, True]]], None], "acker_stream"),
    (ACKER_TASK, [SPOUT_TASK, ACK_FAIL, [[[[1, 2]]]], None], "acker_stream"),     # a reason not text
    (ACKER_TASK, [SPOUT_TASK, ACK_FAIL, [[[[1, "x" * 5000]]]], None], "acker_stream"),  # too long
    (ACKER_TASK, [SPOUT_TASK, ACK_FAIL, [[[[1, "x", 2]]]], None], "acker_stream"),
    (ACKER_TASK, [SPOUT_TASK, "default", [["x"]], None], "not_subscribed"),
    (SPOUT_TASK, [SINK_TASKS[0], ACK_ACK, [[[1]]], None], "acker_stream"),        # spout acked by a bolt
    (SPOUT_TASK, [ACKER_TASK, ACK_ACK, [[{1: 2}]], None], "acker_stream"),        # wrong shape
    (SPOUT_TASK, [ACKER_TASK, ACK_FAIL, [[["1"]]], None], "acker_stream"),
    (SPOUT_TASK, [ACKER_TASK, ACK_ACK, [[[1, 2.5]]], None], "acker_stream"),       # a root not an int
    (ACKER_TASK, [SPOUT_TASK, ACK_ACK, [[b"\0" * 17]], None], "acker_stream"),    # packed pairs: a short pair
    (ACKER_TASK, [SPOUT_TASK, ACK_ACK, [[_pairs(1, 2)], [b"\0"]], None], "acker_stream"),  # bad in a later one
    (ACKER_TASK, [SPOUT_TASK, ACK_FAIL, [[_pairs(1, 2)]], None], "acker_stream"),  # fails are never packed
    (SPOUT_TASK, [ACKER_TASK, ACK_ACK, [[_pairs(1, 2)]], None], "acker_stream"),   # nor a spout's acks
])
def test_acker_traffic_only_from_the_tasks_that_send_it(target, group, cause):
    ser = _serializer()
    dropped = []
    assert ser.loads(_payload(group), target, lambda c, n, d: dropped.append(c)) == []
    assert dropped == [cause]


def test_real_acker_traffic_is_admitted():
    ser = _serializer()
    to_acker = ser.loads(_payload([SPOUT_TASK, ACK_ACK, [[{5: MAX_U64}]], None],
                                  [SINK_TASKS[1], ACK_FAIL, [[[5, [6, "why"]]]], None]), ACKER_TASK)
    assert [t.values for t in to_acker] == [[{5: MAX_U64}], [[5, [6, "why"]]]]
    to_spout = ser.loads(_payload([ACKER_TASK, ACK_ACK, [[[5, 6]]], None]), SPOUT_TASK)
    assert [t.values for t in to_spout] == [[[5, 6]]]
    packed = ser.loads(_payload([SPOUT_TASK, ACK_ACK, [[_pairs(5, MAX_U64, 0, 0)]], None]), ACKER_TASK)
    assert [t.values for t in packed] == [[_pairs(5, MAX_U64, 0, 0)]]
    anchored = ser.loads(_payload([SPOUT_TASK, "default", [["a"], ["b"]], _pairs(MAX_U64, 1, 0, 0)]), SINK_TASKS[0])
    assert [(t.values, t.ids) for t in anchored] == [(["a"], {MAX_U64: 1}), (["b"], None)]


def test_without_a_drop_callback_a_bad_group_raises():
    with pytest.raises(SerializationError, match="not a map of 64-bit unsigned ints"):
        _serializer().loads(_payload([SPOUT_TASK, "default", [["x"]], [{1: 2.5}]]), SINK_TASKS[0])


# --- a real worker runtime behind a real ZeroMQ socket ---------------------------------

@pytest.fixture(scope="module")
def zmq_worker():
    """A WorkerRuntime running the acker and the sink tasks, bound on a real port, and a
    PUSH socket into it; the spout task lives nowhere (only its tuples arrive)."""
    key = unique_name("hostile")
    fatal = []
    with runtime_over_zmq("hostile-1-1", _topology(key), _conf(), [(1, 1), (2, 2), (3, 3)],
                          on_fatal=fatal.append) as rt, raw_sender(rt.port) as push:
        seq = itertools.count()

        def good_tuple_arrives() -> list:
            """Send one good tuple to each sink task; both must arrive. What the sinks recorded."""
            marks = [f"mark-{next(seq)}" for _ in SINK_TASKS]
            for task, mark in zip(SINK_TASKS, marks):
                push.send(codec.encode_tasks([(task, _payload([SPOUT_TASK, "default", [[mark]], None]))]))
            # A generated frame may be a valid tuple for a sink (any values): delivered, and
            # recorded beside the marks.
            wait_for(lambda: set(marks) <= {r[3][0] for r in Recorder.get(key) if r[3] and type(r[3][0]) is str},
                     10, what="good tuples after hostile ones", interval=0.001)  # once per example: poll closely
            assert not fatal
            assert rt._server.callback_errors == 0  # nothing escaped the checks...
            assert "internal_error" not in rt.drops.by_cause(every=True)  # ...or was caught blind
            assert all(t.is_alive() for t in rt.threads)
            assert not rt._server.stopped
            assert rt.transfer._thread.is_alive()
            return Recorder.get(key)

        yield rt, push, good_tuple_arrives


scalars = (st.none() | st.booleans() | st.integers(-(1 << 63), MAX_U64) | st.floats() | st.text(max_size=8)
           | st.binary(max_size=8))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(scalars, inner, max_size=4),
                      max_leaves=12)
tasks = st.sampled_from([ACKER_TASK, *SINK_TASKS, SPOUT_TASK, 0, 99, -1, MAX_U64]) | st.integers(-(1 << 63), MAX_U64)
streams = st.sampled_from(["default", ACK_ACK, ACK_FAIL, "nope", "__tick"]) | values
ids = (st.none() | st.lists(st.none() | st.dictionaries(scalars, scalars, max_size=3), max_size=4)
       | st.binary(max_size=48))  # packed pairs, of any length
groups = (st.lists(tasks | values, max_size=5)
          | st.tuples(tasks, streams, st.lists(st.lists(values, max_size=3), max_size=4), ids))
payloads = (st.binary(max_size=64)
            | st.lists(groups | values, max_size=4).map(lambda g: msgpack.packb(g, use_bin_type=True)))
task_frames = st.lists(st.tuples(tasks, payloads), max_size=4).map(
    lambda entries: bytes((codec.VERSION, codec.KIND_TASKS)) + msgpack.packb(entries, use_bin_type=True))
control_frames = st.tuples(st.sampled_from([codec.KIND_LOAD, codec.KIND_BACKPRESSURE]),
                           st.dictionaries(tasks | scalars, values, max_size=4)).map(
    lambda kb: bytes((codec.VERSION, kb[0])) + msgpack.packb(kb[1], use_bin_type=True))
junk = st.binary(max_size=64) | st.tuples(st.integers(0, 255), st.integers(0, 255), values).map(
    lambda h: bytes(h[:2]) + msgpack.packb(h[2], use_bin_type=True))
frames = task_frames | control_frames | junk


@settings(max_examples=150, suppress_health_check=list(HealthCheck))
@given(st.lists(frames, min_size=1, max_size=5))
def test_generated_frames_never_stop_a_worker(zmq_worker, batch):
    rt, push, good_tuple_arrives = zmq_worker
    for frame in batch:
        push.send(frame)
    good_tuple_arrives()


def test_a_valid_tuple_of_any_values_is_delivered(zmq_worker):
    """Not every generated frame is hostile: a list or a map is a value like any other."""
    rt, push, good_tuple_arrives = zmq_worker
    push.send(codec.encode_tasks([(SINK_TASKS[0], _payload([SPOUT_TASK, "default", [[[1, 2]], [{"k": 3}]], None]))]))
    records = good_tuple_arrives()  # sent after it on the same path: it came first
    assert [[[1, 2]], [{"k": 3}]] == [r[3] for r in records if r[3] in ([[1, 2]], [{"k": 3}])][-2:]


def test_oversize_and_deeply_nested_frames_are_refused(zmq_worker):
    rt, push, good_tuple_arrives = zmq_worker
    deep = b"\x91" * 100_000 + b"\xc0"  # [[[[...nil...]]]] 100,000 levels deep
    before = rt.drops.by_cause(every=True)
    push.send(bytes((codec.VERSION, codec.KIND_TASKS)) + deep)
    push.send(codec.encode_tasks([(SINK_TASKS[0], deep)]))
    good_tuple_arrives()
    after = rt.drops.by_cause(every=True)
    assert after.get("bad_frame", 0) > before.get("bad_frame", 0)
    assert after.get("bad_payload", 0) > before.get("bad_payload", 0)
    # Over zmq.max.message.bytes: ZeroMQ drops the sender before buffering the frame.
    with raw_sender(rt.port) as big:
        big.send(codec.encode_tasks([(SINK_TASKS[0], b"\0" * (codec.DEFAULT_MAX_BYTES + 1))]))
        good_tuple_arrives()


def test_drops_are_counted_per_cause_and_executor_in_stats(zmq_worker):
    rt, push, good_tuple_arrives = zmq_worker
    push.send(codec.encode_tasks([(SINK_TASKS[1], _payload([SPOUT_TASK, "default", [["x"]], [{1: "2"}]], GOOD))]))
    push.send(codec.encode_tasks([(ACKER_TASK, _payload([ACKER_TASK, ACK_ACK, [[{1: 2}]], None]))]))
    push.send(codec.encode_tasks([(77, b"")]))
    good_tuple_arrives()
    stats = {s.executor: s for s in rt.stats()}
    assert stats[(3, 3)].dropped["bad_ids"] >= 1
    assert stats[(1, 1)].dropped["acker_stream"] >= 1
    assert rt.transport_stats().dropped["unknown_task"] >= 1


def test_ids_outside_64_bits_are_counted_and_the_worker_goes_on(zmq_worker):
    """A negative root or XOR (msgpack decodes them; the ledger keeps C integers) is refused
    at decoding: counted per cause and executor, nothing reaches the acker's table or a
    bolt's ack, and the worker's threads all live on."""
    rt, push, good_tuple_arrives = zmq_worker
    before = {s.executor: dict(s.dropped) for s in rt.stats()}
    push.send(codec.encode_tasks([(SINK_TASKS[1], _payload([SPOUT_TASK, "default", [["x"]], [{-5: 7}]], GOOD))]))
    push.send(codec.encode_tasks([(ACKER_TASK, _payload([SPOUT_TASK, ACK_ACK, [[{5: -7}]], None]))]))
    good_tuple_arrives()
    after = {s.executor: s.dropped for s in rt.stats()}
    assert after[(3, 3)]["bad_ids"] == before[(3, 3)].get("bad_ids", 0) + 1
    assert after[(1, 1)]["acker_stream"] == before[(1, 1)].get("acker_stream", 0) + 1


def test_packed_ids_of_the_wrong_shape_are_counted_and_the_worker_goes_on(zmq_worker):
    """Anchored tuples' ids and ack messages cross as packed pairs of 64-bit ints: pairs
    that do not match their tuples, or an ack message cut short, are refused whole and
    counted per cause and executor; the good group beside them arrives."""
    rt, push, good_tuple_arrives = zmq_worker
    before = {s.executor: dict(s.dropped) for s in rt.stats()}
    push.send(codec.encode_tasks([(SINK_TASKS[1], _payload([SPOUT_TASK, "default", [["x"], ["y"]], _pairs(1, 2)],
                                                           GOOD))]))
    push.send(codec.encode_tasks([(ACKER_TASK, _payload([SPOUT_TASK, ACK_ACK, [[_pairs(5, 7)[:-1]]], None]))]))
    good_tuple_arrives()
    after = {s.executor: s.dropped for s in rt.stats()}
    assert after[(3, 3)]["bad_ids"] == before[(3, 3)].get("bad_ids", 0) + 2
    assert after[(1, 1)]["acker_stream"] == before[(1, 1)].get("acker_stream", 0) + 1


# --- callbacks that raise ------------------------------------------------------------

class Boom:
    pass


class BoomSerializer:
    def serialize(self, obj):
        raise RuntimeError("serializer bug")

    def deserialize(self, data):
        raise RuntimeError("serializer bug")


class BoomSpout(Spout):
    """Emits 200 numbers, then (once they are acked) 10 Booms, whose serializer raises;
    raises from ack, fail, activate and deactivate."""

    def __init__(self, key):
        self.key = key

    def open(self, conf, context, collector):
        self.collector, self.i, self.acked = collector, 0, 0

    def next_tuple(self):
        if self.i == 200 and self.acked < 200:
            return
        if self.i < 210:
            self.i += 1
            self.collector.emit([Boom() if self.i > 200 else self.i], msg_id=self.i)

    def ack(self, msg_id):
        self.acked += 1
        Recorder.add(self.key + ".acked", msg_id)
        raise RuntimeError("ack bug")

    def fail(self, msg_id):
        raise RuntimeError("fail bug")

    def activate(self):
        raise RuntimeError("activate bug")

    def deactivate(self):
        raise RuntimeError("deactivate bug")

    def declare_output_fields(self, d):
        d.declare(["v"])


def test_callbacks_that_raise_never_end_an_executor():
    key = unique_name("boom")
    path = f"{__name__}.Boom"
    # Every error kept: with the default 10, the one serializer error leaves the list once
    # the Booms' acks and (2 s later) their timeouts raise, before a late poll sees it.
    conf = {"topology.workers": 2, "topology.message.timeout.secs": 2, "topology.max.error.report.per.interval": 1000,
            "topology.errors.kept": 1000, "topology.serializers": {path: f"{__name__}.BoomSerializer"}}
    b = TopologyBuilder()
    b.set_spout("boom", BoomSpout(key))
    b.set_bolt("pass", NullBolt(), 2).shuffle("boom")
    with LocalCluster({"squall.log.level": "ERROR"}) as cluster:
        cluster.submit(key, conf, b.build())
        # Every number is acked (its ack raising each time); Booms that must cross workers
        # are reported and time out (fail raising each time).
        wait_for(lambda: set(range(1, 201)) <= set(Recorder.get(key + ".acked")), 30, what="acks despite raising")
        cluster.deactivate(key)
        cluster.activate(key)
        workers = cluster._get(key).workers
        wait_for(lambda: any("serializer bug" in e["error"] for e in cluster.errors(key).get("boom", [])), 10,
                 what="serializer error reported")
        assert all(t.is_alive() for w in workers for t in w.threads)
        errors = " ".join(e["error"] for e in cluster.errors(key)["boom"])
        assert "ack bug" in errors or "activate bug" in errors
