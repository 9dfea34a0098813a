"""A tuple that cannot be serialized fails alone (squall.runtime.delivery, refusals): the
rest of its batch still goes, its trees fail with a reason that names where and what, and
the next PREPARE barrier on its channel fails too, so no checkpoint covers it. With a real
serializer and real queues; what the other worker would receive is decoded from the
transfer queue."""
from squall.clock import FakeClock
from squall.model import ACK_FAIL, CHECKPOINT_FIELDS, CHECKPOINT_STREAM
from squall.runtime.delivery import Delivery
from squall.runtime.queues import BatchQueue
from squall.runtime.refusals import BARRIER_FAILED, RELOG_SECS, RefusalLog
from squall.runtime.serialization import TupleSerializer
from squall.tuple import Fields, Source, anchored_tuple

SPOUT, SINK, ACKER = 1, 2, 3
FIELDS = Fields(["k", "v"])
DATA = Source("src", SPOUT, "default", FIELDS)
BARRIER = Source("src", SPOUT, CHECKPOINT_STREAM, CHECKPOINT_FIELDS)


class Opaque:
    pass


class Log:
    def __init__(self):
        self.lines = []

    def error(self, event, **kv):
        self.lines.append((event, kv))


def delivery(clock=None):
    streams = {"default": FIELDS, CHECKPOINT_STREAM: CHECKPOINT_FIELDS}
    ser = TupleSerializer({}, {SPOUT: "src", SINK: "sink", ACKER: "__acker"}, lambda c, s: streams[s])
    acker_q, transfer = BatchQueue(100), BatchQueue(100)
    errors, log = [], Log()
    d = Delivery({ACKER: acker_q}, transfer, ser, 1 << 20, log, lambda c, t, text: errors.append(text),
                 ackers=(ACKER,), clock=clock or FakeClock(), checkpointed=True)
    return d, ser, acker_q, transfer, errors, log


def data(i, value):
    return anchored_tuple([i, value], DATA, {100 + i: 7})


def barrier(txid, action, root):
    return anchored_tuple([txid, action, 1], BARRIER, {root: 9})


def sent(ser, transfer):
    """What the sink's worker would receive: (stream, values) in order."""
    return [(t.source.stream, t.values) for _, payload in transfer.get_all() for t in ser.loads(payload, SINK)]


def failed(acker_q):
    """Roots failed toward the acker, with their reasons."""
    out = {}
    for _, tuples in acker_q.get_all():
        for t in tuples:
            assert t.source.stream == ACK_FAIL and t.source.component == "src"
            out.update(dict(t.values[0]))  # [root, reason] entries
    return out


def test_the_poison_tuple_fails_alone_and_the_prepare_after_it_on_its_channel():
    d, ser, acker_q, transfer, errors, log = delivery()
    d.deliver(SINK, [data(0, 2 ** 70), barrier(4, "commit", 50), data(1, Opaque()), data(2, {"x": (1, 2)}),
                     barrier(5, "prepare", 51), data(3, "after")])
    assert sent(ser, transfer) == [("default", [0, 2 ** 70]), (CHECKPOINT_STREAM, [4, "commit", 1]),
                                   ("default", [2, {"x": (1, 2)}]), ("default", [3, "after"])]
    fails = failed(acker_q)
    assert sorted(fails) == [51, 101]
    assert "component 'src' stream 'default' field 'v'" in fails[101] and "Opaque" in fails[101]
    assert "topology.serializers" in fails[101] and fails[51] == BARRIER_FAILED
    assert d.dropped_unserializable == 1 and len(errors) == 1 and "Opaque" in errors[0]
    assert log.lines[0][1]["field"] == "v" and log.lines[0][1]["type"].endswith("Opaque")


def test_a_barrier_in_a_later_batch_fails_and_a_recovery_clears_the_channel():
    d, ser, acker_q, transfer, _, _ = delivery()
    d.deliver(SINK, [data(0, Opaque())])
    assert sent(ser, transfer) == [] and sorted(failed(acker_q)) == [100]
    d.deliver(SINK, [data(1, "x"), barrier(7, "commit", 60)])   # a commit decided before: it goes
    d.deliver(SINK, [barrier(8, "prepare", 61), data(2, "y")])   # the PREPARE that would cover it fails
    d.deliver(SINK, [barrier(9, "prepare", 62)])                 # the next one goes: the channel is whole
    assert [v for _, v in sent(ser, transfer)] == [[1, "x"], [7, "commit", 1], [2, "y"], [9, "prepare", 1]]
    assert failed(acker_q) == {61: BARRIER_FAILED}
    d.deliver(SINK, [data(3, Opaque()), barrier(10, "rollback", 63), barrier(11, "prepare", 64)])
    assert [v for _, v in sent(ser, transfer)] == [[10, "rollback", 1], [11, "prepare", 1]]
    assert sorted(failed(acker_q)) == [103]


def test_without_checkpoints_no_channel_is_watched():
    """No barrier would ever clear a channel: batches after a refusal take the fast path."""
    d, ser, acker_q, transfer, _, _ = delivery()
    d.channels.barriers = False
    d.deliver(SINK, [data(0, Opaque()), data(1, "x")])
    assert not d.channels.broken and sorted(failed(acker_q)) == [100]
    assert sent(ser, transfer) == [("default", [1, "x"])]


def test_a_tuple_over_the_frame_limit_fails_alone():
    d, ser, acker_q, transfer, errors, _ = delivery()
    d._max_payload = 4000
    d.deliver(SINK, [data(0, "x" * 5000), data(1, "small")])
    assert sent(ser, transfer) == [("default", [1, "small"])]
    reason = failed(acker_q)[100]
    assert "over zmq.max.message.bytes" in reason and "stream 'default'" in reason


def test_a_cause_is_logged_once_then_again_with_its_count_after_a_while():
    clock = FakeClock()
    log = RefusalLog(clock.monotonic)
    cause = ("src", "default", "v", "m.Opaque")
    assert [log.note(cause) for _ in range(3)] == [1, None, None]
    clock.advance(RELOG_SECS)
    assert log.note(cause) == 4 and log.note(("src", "default", "k", "m.Other")) == 1
    assert log.total() == 5
