"""Tuple batches across workers: user types need a registered serializer; bad payloads
are rejected whole."""
import msgpack
import pytest

from squall import LocalCluster, TopologyBuilder
from squall.model import task_ids
from squall.runtime.serialization import SerializationError, TupleSerializer
from squall.testing.components import FixedTupleSpout, Recorder, RecordingBolt
from squall.testing.waiting import wait_for
from squall.tuple import Fields, Source, Tuple, anchored_tuple


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


def test_unregistered_type_is_reported_by_name_and_nothing_crashes():
    with LocalCluster() as cluster:
        cluster.submit("bad-points", {"topology.workers": 3, "topology.message.timeout.secs": 30},
                       _topology("bad", "unregistered"))
        wait_for(lambda: "points" in cluster.errors("bad-points"), 10, what="error reported")
        text = cluster.errors("bad-points")["points"][0]["error"]
        assert "cannot serialize a value of type" in text and "Unregistered" in text
        assert "register it in topology.serializers" in text
        assert all(t.is_alive() for w in cluster._get("bad-points").workers for t in w.threads)


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
