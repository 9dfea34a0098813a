"""Tuple batches across workers: user types need a registered serializer; bad payloads
are rejected whole."""
import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from squall import LocalCluster, TopologyBuilder
from squall.model import task_ids
from squall.runtime.serialization import SerializationError, TupleSerializer
from squall.testing.components import FixedTupleSpout, Recorder, RecordingBolt, unique_name
from squall.testing.waiting import wait_for
from squall.tuple import Fields, Source, Tuple, anchored_tuple
from support.values import canon, rows


class Point:
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __eq__(self, other):
        return isinstance(other, Point) and (self.x, self.y) == (other.x, other.y)


class PointSerializer:
    def serialize(self, p):
        return msgpack.packb([p.x, p.y])

    def deserialize(self, data):
        return Point(*msgpack.unpackb(data))


class Unregistered:
    pass


def path(cls):
    return f"{cls.__module__}.{cls.__qualname__}"


def points_spout(key, value_type):
    """20 reliable tuples of one field: Points, or values of a type no serializer knows."""
    rows = [[Point(i, -i) if value_type == "point" else Unregistered()] for i in range(1, 21)]
    return FixedTupleSpout(key, rows, ["p"])


def _topology(key, value_type):
    b = TopologyBuilder()
    b.set_spout("points", points_spout(key, value_type))
    b.set_bolt("sink", RecordingBolt(key), 2).shuffle("points")
    return b.build()


def test_registered_user_type_crosses_workers():
    conf = {"topology.workers": 3, "topology.serializers": {path(Point): path(PointSerializer)}}
    with LocalCluster() as cluster:
        cluster.submit("points", conf, _topology("pts", "point"))
        wait_for(lambda: len(Recorder.get("pts.acked")) == 20, 20, what="all acked")
    got = [p for (p,) in RecordingBolt.values("pts")]
    assert sorted((p.x, p.y) for p in got) == [(i, -i) for i in range(1, 21)]
    assert all(isinstance(p, Point) for p in got)


def test_each_tuple_of_an_unregistered_type_fails_alone_with_its_reason():
    """Every fourth row holds a value no serializer carries: those fail alone (their spout
    hears why, once each: a replay would fail again); every other row arrives; one error
    line per cause, with a count."""
    key = unique_name("mixed")
    rows = [[Unregistered() if i % 4 == 0 else i] for i in range(20)]
    b = TopologyBuilder()
    b.set_spout("points", FixedTupleSpout(key, rows, ["p"]))
    b.set_bolt("sink", RecordingBolt(key), 2).shuffle("points")
    conf = {"topology.workers": 3, "topology.testing.always.try.serialize": True}
    with LocalCluster() as cluster:
        cluster.submit(key, conf, b.build())
        wait_for(lambda: len(Recorder.get(key + ".acked")) == 15 and len(Recorder.get(key + ".undeliverable")) == 5,
                 20, what="good rows acked, the others undeliverable")
        errors = cluster.errors(key)["points"]
        assert all(t.is_alive() for w in cluster._get(key).workers for t in w.threads)
    assert sorted(v for (v,) in RecordingBolt.values(key)) == [i for i in range(20) if i % 4]
    assert sorted(i for i, _ in Recorder.get(key + ".undeliverable")) == [0, 4, 8, 12, 16]
    assert Recorder.get(key + ".failed") == []
    for _, reason in Recorder.get(key + ".undeliverable"):
        for part in ("component 'points'", "stream 'default'", "field 'p'", path(Unregistered), "topology.serializers"):
            assert part in reason, reason
    assert len(errors) == 1 and "(1 tuple refused so far)" in errors[0]["error"]


def _serializer():
    from squall.topology import TopologyBuilder as TB

    b = TB()
    b.set_spout("points", points_spout("x", "point"))
    topo = b.build()
    return TupleSerializer({}, task_ids(topo), topo.stream_fields), topo


def test_round_trip_and_malformed_payloads():
    ser, topo = _serializer()
    src = Source("points", 1, "default", Fields(["p"]))
    back = ser.loads(ser.dumps([anchored_tuple([1], src, {5: 7}), Tuple(["a"], src)]))
    assert [(t.values, t.ids, t.source_component) for t in back] == [([1], {5: 7}, "points"), (["a"], None, "points")]
    for bad, message in [
        (b"\xc1garbage", "undecodable tuple payload"),
        (msgpack.packb({"a": 1}), "not a list"),
        (msgpack.packb([[99, "default", [[1]], None]]), "unknown task 99"),
        (msgpack.packb([[1, "nostream", [[1]], None]]), "has no stream 'nostream'"),
        (msgpack.packb([[1, "default", [[1, 2]], None]]), "has 2 values, expected 1 values"),
        (msgpack.packb([[1, "default", [1], None]]), "is 1, not a list"),
        (msgpack.packb([[1, "default", [[1]], [None, None]]]), "malformed tuple entry"),
        (msgpack.packb([[1, "default"]]), "malformed tuple entry"),
    ]:
        with pytest.raises(SerializationError, match=message):
            ser.loads(bad)


def test_anchored_ids_cross_as_packed_pairs_and_trees_in_several_as_maps():
    """One tree per tuple (what spouts and anchored bolts emit): the ids column is 16 bytes
    a tuple of packed 64-bit ints, no map per tuple, and every tuple arrives with its ids.
    A group with a tuple in several trees keeps the column of maps."""
    ser, _ = _serializer()
    src = Source("points", 1, "default", Fields(["p"]))
    big = (1 << 64) - 1
    sent = [anchored_tuple([i], src, {big - i: i + 1}) for i in range(250)] + [Tuple(["none"], src)]
    payload = ser.dumps(sent)
    (group,) = msgpack.unpackb(payload)
    assert type(group[3]) is bytes and len(group[3]) == 16 * 251
    assert len(payload) < 19 * 251  # ids, values and framing: a map per tuple cost 19 bytes for its ids alone
    back = ser.loads(payload)
    assert [(t.values, t.ids) for t in back] == [(t.values, t.ids) for t in sent]
    joined = sent[:2] + [anchored_tuple(["j"], src, {3: 4, 5: 6})]
    (group,) = msgpack.unpackb(ser.dumps(joined), strict_map_key=False)
    assert group[3] == [{big: 1}, {big - 1: 2}, {3: 4, 5: 6}]
    assert [(t.values, t.ids) for t in ser.loads(ser.dumps(joined))] == [(t.values, t.ids) for t in joined]


def test_worker_drops_unknown_tasks_and_bad_payloads_and_keeps_going():
    with LocalCluster() as cluster:
        conf = {"topology.workers": 2, "topology.serializers": {path(Point): path(PointSerializer)}}
        tid = cluster.submit("frames", conf, _topology("frames", "point"))
        worker = cluster._get("frames").workers[0]
        client = cluster._context.connect(tid, "local", worker.port)
        some_task = min(worker.local_tasks)
        client.send([(999, b"x"), (some_task, b"\xc1garbage")])
        client.send_raw(b"\x07not a frame")
        wait_for(lambda: worker.drops.by_cause(every=True) == {"unknown_task": 1, "bad_payload": 1,
                                                               "bad_frame": 1}, 10, what="bad input counted")
        wait_for(lambda: len(Recorder.get("frames.acked")) == 20, 20, what="topology still flows")


class Fragile:
    def __init__(self, ok):
        self.ok = ok


class FragileSerializer:
    """Writes any Fragile, reads back only the good ones (a deserializer with a bug)."""

    def serialize(self, f):
        return b"ok" if f.ok else b"bad"

    def deserialize(self, data):
        if data != b"ok":
            raise ValueError("cannot read a bad Fragile")
        return Fragile(True)


def test_a_value_that_does_not_decode_fails_its_own_tuple():
    """On the way in too: every fifth row's value does not deserialize; those rows fail
    alone (their spout hears why), the others arrive, in a worker of their own or not."""
    key = unique_name("fragile")
    b = TopologyBuilder()
    b.set_spout("rows", FixedTupleSpout(key, [[i, Fragile(i % 5 != 0)] for i in range(20)], ["i", "f"]))
    b.set_bolt("sink", RecordingBolt(key, ["i"]), 2).shuffle("rows")
    conf = {"topology.workers": 2, "topology.testing.always.try.serialize": True,
            "topology.serializers": {path(Fragile): path(FragileSerializer)}}
    with LocalCluster() as cluster:
        cluster.submit(key, conf, b.build())
        wait_for(lambda: len(Recorder.get(key + ".acked")) == 16 and len(Recorder.get(key + ".undeliverable")) == 4,
                 20, what="good rows acked, the others undeliverable")
    assert sorted(i for (i,) in RecordingBolt.values(key)) == [i for i in range(20) if i % 5]
    assert sorted(i for i, _ in Recorder.get(key + ".undeliverable")) == [0, 5, 10, 15]
    for _, reason in Recorder.get(key + ".undeliverable"):
        assert "field 'f'" in reason and "cannot read a bad Fragile" in reason, reason


def same_rows_in_order(got, want):
    return [canon(r) for r in got] == [canon(r) for r in want]


def _pairs_serializer():
    b = TopologyBuilder()
    b.set_spout("rows", FixedTupleSpout("rows-x", [], ["i", "value"]))
    topo = b.build()
    return TupleSerializer({}, task_ids(topo), topo.stream_fields), Source("rows", 1, "default", Fields(["i", "value"]))


@settings(max_examples=25, deadline=None)
@given(rows(2, max_size=8))
def test_generated_batches_cross_the_wire_codec_as_they_were(batch):
    """Issue 34, point 4: a batch of generated tuples through a worker's way out and way in
    (``dumps``, ``loads``) arrives as the same values of the same types, anchored or not.
    scripts/test.sh runs this module on the compiled codec and again on plain Python."""
    ser, src = _pairs_serializer()
    sent = [anchored_tuple(v, src, {i + 1: 7 * i + 1}) if i % 2 else Tuple(v, src) for i, v in enumerate(batch)]
    back = ser.loads(ser.dumps(sent), None)
    assert same_rows_in_order([t.values for t in back], batch)
    assert [t.ids for t in back] == [t.ids for t in sent]


@settings(max_examples=10, deadline=None)
@given(rows(2, max_size=6), st.integers(min_value=0, max_value=6))
def test_a_value_no_rule_carries_is_found_alone_in_its_batch(batch, at):
    """``dumps`` refuses the whole batch; ``unsendable`` names the one tuple at fault (its
    field and type), and the batch without it crosses as it was."""
    ser, src = _pairs_serializer()
    at = min(at, len(batch))
    sent = [Tuple(v, src) for v in batch]
    sent.insert(at, Tuple([at, {"deep": (1, [Unregistered()])}], src))
    with pytest.raises(SerializationError):
        ser.dumps(sent)
    [(i, reason, cause)] = ser.unsendable(sent)
    assert i == at and cause == ("rows", "default", "value", path(Unregistered)), cause
    assert "field 'value'" in reason and "topology.serializers" in reason, reason
    del sent[at]
    assert same_rows_in_order([t.values for t in ser.loads(ser.dumps(sent), None)], batch)
