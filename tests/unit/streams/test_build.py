"""Building a pipeline: the topology it becomes (fusion, groupings, names) and the errors a
user can act on, each naming the step and its line. No cluster runs here."""
from __future__ import annotations

import pickle
import threading

import pytest

from squall.streams import Count, Duration, PipelineError, StreamBuilder, TumblingWindows
from squall.testing.components import FixedTupleSpout, RecordingBolt
from squall.topology import TopologyError


def source(b: StreamBuilder, parallelism: int = 1, **kw):
    return b.new_stream(FixedTupleSpout("src", [["a b"]], ["sentence"]), name="sentences",
                        parallelism=parallelism, **kw)


def line_of(text: str) -> str:
    """``test_build.py:N`` of the first line of this file containing ``text``."""
    with open(__file__, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if text in line and "line_of" not in line:
                return f"test_build.py:{n}"
    raise AssertionError(text)


def wiring(topology):
    return {c: [(s.component, s.stream, s.grouping.kind, list(s.grouping.fields or [])) for s in spec.inputs]
            for c, spec in topology.components.items()}


def test_word_count_fuses_stateless_steps_and_groups_by_key():
    b = StreamBuilder()
    (source(b, 2).flat_map(str.split).map_to_pair(lambda w: (w, 1))
        .count_by_key().to(RecordingBolt("wc")))
    t = b.build()
    assert wiring(t) == {
        "sentences": [],
        "flat_map-map_to_pair": [("sentences", "default", "shuffle", [])],
        "count_by_key": [("flat_map-map_to_pair", "map_to_pair-2", "fields", ["key"])],
        "RecordingBolt": [("count_by_key", "count_by_key-3", "shuffle", [])],
    }
    assert {c: s.parallelism for c, s in t.components.items()} == {
        "sentences": 2, "flat_map-map_to_pair": 2, "count_by_key": 2, "RecordingBolt": 1}
    assert list(t.components["count_by_key"].streams["count_by_key-3"].fields) == ["key", "value"]


def test_one_task_needs_no_partition_and_names_come_from_the_user():
    b = StreamBuilder()
    (source(b).flat_map(str.split, name="split").key_by(len, name="by length")
        .count_by_key(name="count").print())
    t = b.build()
    assert sorted(t.components) == ["sentences", "split-by_length-count-print"]


def test_global_aggregation_runs_in_one_task_behind_a_global_grouping():
    b = StreamBuilder()
    source(b, 3).flat_map(str.split).count().print()
    t = b.build()
    assert wiring(t)["count-print"] == [("flat_map", "flat_map-1", "global", [])]
    assert t.components["count-print"].parallelism == 1


def test_a_window_moves_past_the_steps_that_set_its_aggregations_key():
    b = StreamBuilder()
    (source(b, 2, timestamp=lambda t: 0.0).window(TumblingWindows.of(Duration(5)).with_event_time(1))
        .flat_map(str.split).map_to_pair(lambda w: (w, 1)).count_by_key().print())
    t = b.build()
    window = t.components["window-count_by_key-print"]
    assert window.parallelism == 2
    assert [(s.component, s.grouping.kind) for s in window.inputs] == [("values-flat_map-map_to_pair", "fields")]


def test_state_query_runs_in_the_bolt_of_its_state():
    b = StreamBuilder()
    counts = source(b, 2).map_to_pair(lambda s: (s, 1)).update_state_by_key(0, lambda n, _: n + 1)
    source(b, 2).state_query(counts).print()
    t = b.build()
    state_bolt = t.components["update_state_by_key-state_query-print"]
    assert sorted((s.component, s.grouping.kind, tuple(s.grouping.fields or ())) for s in state_bolt.inputs
                  if s.component != "__checkpoint") == [
        ("map_to_pair", "fields", ("key",)), ("values", "fields", ("value",))]
    assert "__checkpoint" in t.components  # a stateful pipeline is checkpointed


def test_a_keyed_step_on_plain_values_names_the_missing_key_step():
    b = StreamBuilder()
    with pytest.raises(PipelineError) as err:
        source(b).flat_map(str.split).count_by_key()
    assert line_of("flat_map(str.split).count_by_key()") in str(err.value)
    assert "key it first with key_by(fn) or map_to_pair(fn)" in str(err.value)


def test_an_unpicklable_function_is_named_with_its_line():
    lock = threading.Lock()
    b = StreamBuilder()
    source(b).map(lambda s: (lock, s)).print()
    with pytest.raises(TopologyError) as err:
        b.build()
    assert f"map at {line_of('map(lambda s: (lock, s))')}" in str(err.value)
    assert "cannot be pickled" in str(err.value)


def test_lambdas_and_closures_travel_by_value():
    factor = 7
    b = StreamBuilder()
    source(b).map(lambda s: len(s) * factor).print()
    spec = b.build().components["map-print"]
    bolt = pickle.loads(spec.blob)
    assert bolt.program.fns[1]("abc") == 21


def test_an_event_time_window_without_timestamps():
    b = StreamBuilder()
    with pytest.raises(PipelineError) as err:
        source(b).window(TumblingWindows.of(Duration(10)).with_event_time(2))
    assert f"window at {line_of('source(b).window(TumblingWindows')}" in str(err.value)
    assert "timestamp=" in str(err.value)


def test_joins_and_group_by_key_need_windows():
    b = StreamBuilder()
    left = source(b).map_to_pair(lambda s: (s, 1))
    right = source(b).map_to_pair(lambda s: (s, 2))
    left.join(right).print()
    with pytest.raises(PipelineError, match="within windows"):
        b.build()
    b = StreamBuilder()
    source(b).map_to_pair(lambda s: (s, 1)).group_by_key().print()
    with pytest.raises(PipelineError, match="group_by_key works within windows"):
        b.build()


def test_a_count_window_cannot_move_past_steps_that_change_the_count():
    b = StreamBuilder()
    (source(b, 2).window(TumblingWindows.of(Count(10))).flat_map(str.split)
        .map_to_pair(lambda w: (w, 1)).count_by_key().print())
    with pytest.raises(PipelineError, match="count window"):
        b.build()


def test_late_needs_an_event_time_window():
    b = StreamBuilder()
    w = source(b).window(TumblingWindows.of(Count(10)))
    with pytest.raises(PipelineError, match="only event-time windows have late values"):
        w.late()


def test_a_spout_field_that_does_not_exist():
    b = StreamBuilder()
    source(b, value="nope").print()
    with pytest.raises(PipelineError, match="'nope' is not a field"):
        b.build()


def test_kafka_source_and_sink_are_the_contrib_spout_and_bolt():
    from squall.contrib.kafka import KafkaBolt, KafkaSpout, StringTranslator
    from squall.streams.kafka import kafka_sink, kafka_source

    b = StreamBuilder()
    words = kafka_source(b, "sentences", group_id="wc", event_time=True).flat_map(str.split)
    kafka_sink(words.map_to_pair(lambda w: (w, 1)).count_by_key(), "counts", encode=str)
    t = b.build()
    spout, sink = t.components["kafka"].instantiate(), t.components["kafka-2"].instantiate()
    assert isinstance(spout, KafkaSpout) and isinstance(spout.translator, StringTranslator)
    assert isinstance(sink, KafkaBolt)
    bolt = "flat_map-map_to_pair-count_by_key-encode"
    assert [(s.component, s.grouping.kind) for s in t.components["kafka-2"].inputs] == [(bolt, "shuffle")]
    assert list(t.stream_fields(bolt, "encode-4")) == ["key", "value", "ts"]
