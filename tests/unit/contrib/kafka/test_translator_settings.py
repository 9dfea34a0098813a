"""Translators, first-poll strategies and commit metadata."""
import json
import pickle

import pytest

from squall.contrib.kafka import (
    FunctionTranslator,
    JsonTranslator,
    KafkaBolt,
    KafkaSpout,
    Record,
    RecordTranslator,
    StringTranslator,
)
from squall.contrib.kafka.settings import (
    OFFSET_BEGINNING,
    OFFSET_END,
    commit_metadata,
    committed_by,
    start_offset,
)

REC = Record("t", 2, 41, b"k", b'{"n": 1}', 1_700_000_000_500)


def test_default_translator_gives_raw_fields_and_seconds():
    assert RecordTranslator().translate(REC) == ["t", 2, 41, b"k", b'{"n": 1}', 1_700_000_000.5]
    assert RecordTranslator().translate(Record("t", 0, 0, None, None))[-1] is None


def test_string_and_json_translators_decode_or_raise():
    assert StringTranslator().translate(REC)[3:5] == ["k", '{"n": 1}']
    assert JsonTranslator().translate(REC)[4] == {"n": 1}
    with pytest.raises(UnicodeDecodeError):
        StringTranslator().translate(Record("t", 0, 0, None, b"\xff\xfe"))
    with pytest.raises(ValueError):
        JsonTranslator().translate(Record("t", 0, 0, None, b"not json"))
    with pytest.raises(ValueError):
        JsonTranslator().translate(Record("t", 0, 0, None, None))
    with pytest.raises(LookupError):
        StringTranslator("no-such-codec")


def double(record):
    return [record.key(), int(record.value()) * 2]


def test_function_translator_and_the_spout_declares_its_fields():
    tr = FunctionTranslator(double, ["key", "n"])
    assert tr.translate(Record("t", 0, 0, b"a", b"21")) == [b"a", 42]
    spout = KafkaSpout("t", group_id="g", translator=tr, failed_stream=True)
    from squall.components import OutputFieldsDeclarer

    d = OutputFieldsDeclarer("k")
    spout.declare_output_fields(d)
    assert list(d.streams["default"].fields) == ["key", "n"] and "failed" in d.streams
    pickle.loads(pickle.dumps(spout))  # ships with the topology


def test_spout_and_bolt_arguments_are_checked_at_build_time():
    with pytest.raises(ValueError):
        KafkaSpout(group_id="g")  # no topics
    with pytest.raises(ValueError):
        KafkaSpout("t", group_id="")
    with pytest.raises(TypeError):
        KafkaSpout("t", group_id="g", translator=object())
    with pytest.raises(ValueError, match="holds a secret"):
        KafkaSpout("t", group_id="g", client_config={"sasl.password": "x"})
    with pytest.raises(ValueError, match="unknown config key"):
        KafkaBolt("out", conf={"kafka.bolt.nope": 1})


@pytest.mark.parametrize("strategy,committed,by,want", [
    ("UNCOMMITTED_EARLIEST", 17, None, 17),
    ("UNCOMMITTED_EARLIEST", -1001, None, OFFSET_BEGINNING),
    ("UNCOMMITTED_LATEST", None, None, OFFSET_END),
    ("UNCOMMITTED_LATEST", 5, "other", 5),
    ("EARLIEST", 17, "other-deployment", OFFSET_BEGINNING),  # a new deployment starts over
    ("EARLIEST", 17, "this", 17),                            # a restarted task resumes
    ("LATEST", 17, None, OFFSET_END),
    ("LATEST", 17, "this", 17),
])
def test_first_poll_strategies(strategy, committed, by, want):
    assert start_offset(strategy, committed, by, "this") == want


def test_commit_metadata_round_trip_and_hostile_metadata():
    assert committed_by(commit_metadata("topo-1")) == "topo-1"
    for bad in (None, "", "x" * 5000, "[1]", json.dumps({"topology_id": 3}), "{not json"):
        assert committed_by(bad) is None
