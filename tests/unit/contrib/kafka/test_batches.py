"""KafkaBolt's batches: which tuples a batch's delivery reports ack and which they fail."""
from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from squall.contrib.kafka.batches import Batch

ck = pytest.importorskip("confluent_kafka")  # the client's own Message and KafkaError
TIMED_OUT = ck.KafkaError(ck.KafkaError._MSG_TIMED_OUT)


def message(topic, msg):
    return ck.Message(topic=topic, key=msg["key"], value=msg["value"], partition=0, offset=0)


def make(records):
    done = deque()
    msgs = [{"key": k, "value": v} for k, v in records]
    return Batch("out", [f"t{i}" for i in range(len(msgs))], msgs, done), done


def test_complete_only_when_every_taken_record_reported():
    batch, done = make([(b"a", b"1"), (b"b", b"1"), (b"c", b"1")])
    batch.report(None, message("out", batch.msgs[0]))  # a report may come before taken
    batch.taken(batch.tups[:2], batch.msgs[:2])  # the third was refused at once
    assert not done
    batch.report(None, message("out", batch.msgs[1]))
    assert list(done) == [batch]
    assert batch.outcomes() == (["t0", "t1"], [])


def test_a_failed_report_fails_its_own_tuple_and_the_rest_are_acked():
    batch, done = make([(b"a", b"1"), (b"b", b"1"), (b"a", b"1"), (b"c", b"2")])
    batch.taken(batch.tups, batch.msgs)
    for i, m in enumerate(batch.msgs):
        batch.report(TIMED_OUT if i == 3 else None, message("out", m))
    acks, failed = batch.outcomes()
    assert acks == ["t0", "t1", "t2"]
    assert failed == [("t3", TIMED_OUT, ("out", b"c", b"2", None))]
    assert len(done) == 1


def test_a_report_that_matches_no_record_fails_the_whole_batch():
    batch, _ = make([(b"a", b"1"), (b"b", b"1")])
    batch.taken(batch.tups, batch.msgs)
    batch.report(None, message("out", batch.msgs[0]))
    batch.report(TIMED_OUT, message("elsewhere", batch.msgs[1]))
    acks, failed = batch.outcomes()
    assert acks == [] and [t for t, _, _ in failed] == ["t0", "t1"]


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_every_tuple_is_settled_once_and_each_failure_fails_a_record_like_it(data):
    records = data.draw(st.lists(st.tuples(st.sampled_from([b"a", b"b", None]), st.sampled_from([b"1", b"2"])),
                                 min_size=1, max_size=12))
    batch, done = make(records)
    errors = data.draw(st.lists(st.booleans(), min_size=len(records), max_size=len(records)))
    order = data.draw(st.permutations(range(len(records))))
    early = data.draw(st.integers(0, len(records)))  # reports that come before taken
    for n, i in enumerate(order):
        if n == early:
            batch.taken(batch.tups, batch.msgs)
        batch.report(TIMED_OUT if errors[i] else None, message("out", batch.msgs[i]))
    if early == len(records):
        batch.taken(batch.tups, batch.msgs)
    assert done and all(b is batch for b in done)
    acks, failed = batch.outcomes()
    assert sorted(acks + [t for t, _, _ in failed]) == sorted(batch.tups)
    assert len(failed) == sum(errors)
    bad = sorted((records[i][0] or b"", records[i][1]) for i in range(len(records)) if errors[i])
    assert sorted((key or b"", value) for _, _, (_, key, value, _) in failed) == bad
