"""The rules a backfill shares with live runs, and its planning, without Spark.

Line splitting and JSON-lines parsing (one implementation for JsonLinesSpout and
spark-run), how a plan is cut into fused stages and packed into Spark partitions, sink
column types that never change a value, JSON sink lines, and the progress listener's
refusal of foreign datagrams.
"""
from __future__ import annotations

import datetime as dt
import decimal
import io
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from squall import TopologyBuilder
from squall.contrib import JsonLineRules, JsonLinesSpout, MalformedLine, TextLineRules
from squall.contrib.columns import BOOL, DOUBLE, LONG, NULL, STRING, ColumnTypes, SchemaError, describe, merge
from squall.contrib.lines import TOO_LONG, LineReader
from squall.loader import load_module
from squall.spark import progress
from squall.spark.plan import make_plan
from squall.spark.sinks import JsonLines, SinkValueError
from squall.spark.stages import layout, plan_stages, stage_levels
from squall.testing.components import EchoBolt
from support.paths import SPARK_TOPOLOGIES

HERE = SPARK_TOPOLOGIES


# -- lines ----------------------------------------------------------------------------------
def reference_lines(data: bytes, limit: int) -> list:
    return [TOO_LONG if len(x) > limit else x for x in data.splitlines()]


@settings(max_examples=300)
@given(data=st.lists(st.sampled_from([b"a", b"bc", b"\n", b"\r", b"\r\n", b" ", b"\xff"]), max_size=40).map(b"".join),
       limit=st.integers(1, 6), chunk=st.integers(1, 7), cuts=st.lists(st.integers(0, 80), max_size=4))
def test_lines_split_like_universal_newlines_whatever_the_cut(data, limit, chunk, cuts):
    want = reference_lines(data, limit)
    assert list(LineReader(io.BytesIO(data), max_bytes=limit, chunk=chunk)) == want
    bounds = sorted({0, len(data), *(c for c in cuts if c <= len(data))})
    got = []
    for lo, hi in zip(bounds, bounds[1:]):
        got += list(LineReader(io.BytesIO(data), lo, hi, max_bytes=limit, chunk=chunk))
    assert got == want  # every line exactly once, in order, however the file is cut


def test_a_line_with_no_end_in_sight_is_reported_once_without_holding_it():
    data = b"ok\n" + b"x" * 5000 + b"\r\nnext"
    reader = LineReader(io.BytesIO(data), max_bytes=100, chunk=64)
    assert list(reader) == [b"ok", TOO_LONG, b"next"]


# -- JSON-lines rules -------------------------------------------------------------------------
RULES = JsonLineRules(["user", "cents"])


@pytest.mark.parametrize("raw, values", [
    (b'{"user": "ana", "cents": 12}', ["ana", 12]),
    (b'{"user": "ana", "cents": "12"}', ["ana", "12"]),          # a string stays a string
    (b'{"cents": 1.5}', [None, 1.5]),                             # a missing field is None
    (b'{"user": null, "cents": true}', [None, True]),
    (b'{"user": {"a": [1, 2.0, "x"]}, "other": 1}', [{"a": [1, 2.0, "x"]}, None]),
    (b'{"user": "a", "user": "b"}', ["b", None]),                 # the last of a repeated key
    (b' \t{"cents": -0}\t ', [None, 0]),
    (b'{"cents": 9223372036854775807}', [None, 2 ** 63 - 1]),
    (b'{"cents": -92233720368547758080}', [None, -(2 ** 63) * 10]),  # integers of any size are data
    (b'{"user": "\\ud83d\\ude00 \xc3\xa9"}', ["\U0001F600 \u00e9", None]),
])
def test_json_values_keep_the_type_json_gave_them(raw, values):
    got = RULES.parse(raw)
    assert got == values and [type(v) for v in got] == [type(v) for v in values]


@pytest.mark.parametrize("raw, why", [
    (b"{broken", "not JSON"),
    (b"[1, 2]", "a JSON array, not an object"),
    (b"42", "a JSON number, not an object"),
    (b'{"cents": NaN}', "NaN is not JSON"),
    (b'{"cents": 1e999}', "too large for a float"),
    (b'\xff\xfe{\x00}\x00', "not UTF-8"),                              # UTF-16 with its byte-order mark
    (b'{"user": "\\udc00"}', "lone surrogate"),
    (b'\xff{"user": 1}', "not UTF-8"),
    (b'{"a": 1} {"b": 2}', "extra data"),
    (b'{"user": ' + b"[" * 64 + b"]" * 64 + b"}", "nested deeper than 64 levels"),
    (b'{"user": ' + b"[" * 5000 + b"]" * 5000 + b"}", "nested deeper than 64 levels"),
])
def test_malformed_lines_are_refused_with_the_reason(raw, why):
    with pytest.raises(MalformedLine, match=why):
        RULES.parse(raw)


def test_blank_lines_are_skipped_and_63_levels_below_the_object_are_fine():
    assert RULES.parse(b"") is None and RULES.parse(b" \t ") is None
    assert RULES.parse(b'{"user": ' + b"[" * 63 + b"]" * 63 + b"}") is not None


def test_text_rules_keep_every_line_as_it_is():
    rules = TextLineRules(["line"])
    assert rules.parse(b"") == [""] and rules.parse(b" a b ") == [" a b "]
    with pytest.raises(MalformedLine, match="not UTF-8"):
        rules.parse(b"\xc3")
    with pytest.raises(ValueError, match="one field"):
        TextLineRules(["a", "b"])


def test_the_live_spout_hands_its_rules_to_the_backfill():
    spout = JsonLinesSpout(["a"], path="x", max_depth=5, max_line_bytes=99)
    rules = spout.line_rules()
    assert (rules.fields, rules.max_depth, rules.max_line_bytes) == (["a"], 5, 99)


# -- stages -----------------------------------------------------------------------------------
def chain(split_tasks: int, more_tasks: int):
    b = TopologyBuilder()
    b.set_spout("in", JsonLinesSpout(["k"], path="x"))
    b.set_bolt("split", EchoBolt(["k"]), split_tasks).shuffle("in")
    b.set_bolt("more", EchoBolt(["k"]), more_tasks).local_or_shuffle("split")
    b.set_bolt("count", EchoBolt(["k"]), 3).fields("more", ["k"])
    b.set_bolt("after", EchoBolt(["k"]), 4).shuffle("count")
    b.set_bolt("narrow", EchoBolt(["k"]), 2).shuffle("count")
    b.set_bolt("join", EchoBolt(["k"]), 2).shuffle("in").shuffle("count")
    return b.build()


def test_bolts_fuse_where_any_task_may_take_the_tuple():
    plan = make_plan(chain(2, 4), ["in"], None, {})
    stages = plan_stages(plan, {"in": None}, default_width=8)
    assert [s.components for s in stages] == [["in", "split", "more"], ["count", "after"], ["join"], ["narrow"]]
    # The input stage narrows to its bolts' fewest tasks; a keyed stage is as wide as its
    # head, and a shuffle-fed bolt with fewer tasks (narrow) cannot join it.
    assert [s.width for s in stages] == [2, 3, 2, 2]
    assert stages[0].partition_tasks([10, 11, 12, 13], 1) == [11, 13]
    assert stages[2].upstream == [0, 1]  # inputs from two stages: a stage of its own
    assert [[s.id for s in level] for level in stage_levels(stages)] == [[0], [1], [2, 3]]


def test_an_input_limits_its_stage_width_and_levels_pack_into_few_partitions():
    plan = make_plan(chain(4, 4), ["in"], None, {})
    stages = plan_stages(plan, {"in": 1}, default_width=8)
    assert stages[0].width == 1
    level = stage_levels(stages)[1]
    lay = layout(level, 2, set())
    assert sorted(slot for p in lay.keyed for slot in p) == sorted(
        (s.id, i) for s in level for i in range(s.width))
    assert len(lay.keyed) == 2 and lay.inputs == []
    heads = {s.head: plan.component_to_tasks[s.head] for s in level}
    where = lay.task_partition(stages, heads)
    assert sorted(where) == sorted(t for s in level for t in plan.component_to_tasks[s.head])


def test_the_messy_topology_fuses_cleaning_echo_and_router_with_their_spout():
    messy = load_module(HERE / "messy_topology.py")
    plan = make_plan(messy.build(messy.SHAPES[0]), ["events", "users"], None, {}, exclude=["record"])
    stages = plan_stages(plan, {}, default_width=2)
    assert stages[0].components == ["events", "clean", "echo", "router"]
    assert stages[0].width == 2


# -- sink types ---------------------------------------------------------------------------------
def test_column_types_never_widen_or_convert():
    assert merge(LONG, NULL) == LONG and merge(NULL, STRING) == STRING
    with pytest.raises(SchemaError, match=r"int \(bigint\) and float \(double\)"):
        merge(LONG, DOUBLE)
    with pytest.raises(SchemaError, match="bool"):
        merge(describe(True), describe(1))
    assert describe([1, None]) == ("array", LONG)
    with pytest.raises(SchemaError, match=r"int \(bigint\) and str \(string\) in map values"):
        describe({"a": 1, "b": "x"})
    assert describe(dt.datetime(2020, 1, 1)) == ("timestamp_ntz",)
    assert describe(dt.datetime(2020, 1, 1, tzinfo=dt.timezone.utc)) == ("timestamp",)
    assert merge(describe(decimal.Decimal("1.5")), describe(decimal.Decimal("-12.25"))) == ("decimal", 2, 2)
    with pytest.raises(SchemaError, match="64 bits"):
        describe(2 ** 64)


def test_column_types_name_the_field_that_mixes():
    types = ColumnTypes(["word", "count"])
    types.observe([["a", 1], ["b", None], [None, 3]])
    assert types.types == [STRING, LONG] and types.broken is None
    types.observe([["c", 2.5]])
    assert types.broken == "field 'count': values of type int (bigint) and float (double)"
    other = ColumnTypes(["flag"])
    other.observe([[True]])
    assert other.types == [BOOL]


def test_json_sink_lines_keep_json_values_and_refuse_the_rest():
    enc = JsonLines("out", ["a", "b"], {})
    line = enc.encode(["é", {"x": [1, 2.5, None, True, "12"]}])
    assert json.loads(line) == {"a": "é", "b": {"x": [1, 2.5, None, True, "12"]}}
    assert list(json.loads(line)) == ["a", "b"]
    for bad, why in [(b"x", "bytes value is not JSON"), (float("nan"), "nan is not JSON"),
                     ({1: "a"}, "dict key of type int"), (dt.date(2020, 1, 1), "date value is not JSON"),
                     ("\ud800", "lone surrogate")]:
        with pytest.raises(SinkValueError, match=f"sink 'out' field 'b': .*{why}"):
            enc.encode(["ok", bad])


# -- progress ---------------------------------------------------------------------------------
def test_progress_listener_takes_its_own_datagrams_and_drops_the_rest():
    listener = progress.Listener("127.0.0.1", "t0k")
    try:
        good = {"k": "t0k", "s": 0, "p": 1, "a": 0, "r": 10, "x": 30}
        assert listener.take(json.dumps(good).encode())
        for bad in [b"", b"\xff", b"[]", json.dumps({**good, "k": "other"}).encode(),
                    json.dumps({**good, "r": -1}).encode(), json.dumps({**good, "x": "30"}).encode(),
                    json.dumps({**good, "p": True}).encode(), b"{" + b" " * 600 + b"}"]:
            assert not listener.take(bad)
        assert listener.rejected == 8
        assert listener.take(json.dumps({**good, "r": 20}).encode())
        assert listener.totals({0}) == (20, 30) and listener.totals({1}) == (0, 0)
        # A real datagram through the socket, from a task's sender.
        sender = progress.Sender(progress.Address("127.0.0.1", listener.port, "t0k", 0.0), 1, 0, 0)
        sender.update(5, 7, force=True)
        sender.close()
        deadline = __import__("time").monotonic() + 10
        while listener.totals({1}) != (5, 7):
            assert __import__("time").monotonic() < deadline, "datagram not received"
            __import__("time").sleep(0.02)
    finally:
        listener.close()


def test_progress_renders_as_a_line_and_as_log_fields():
    p = progress.Progress(1, 3, 2, 5, 1234567, 89, 12.34, 1000.4, 20.0)
    assert progress.terminal_line(p) == ("backfill running: components 2/5 done, 1,234,567 rows read, "
                                         "89 tuples executed, 1,000 rows/s, 20 tuples/s, 12.3s")
    assert progress.log_fields(p)["rows"] == 1234567 and progress.log_fields(p)["components_done"] == 2


@settings(max_examples=40)
@given(files=st.lists(st.lists(st.sampled_from([b'{"k": 1}', b'{"k": "x"}', b"bad", b""]), max_size=6), min_size=1,
                      max_size=4),
       width=st.integers(1, 5), end=st.sampled_from([b"\n", b"\r\n", b"\r"]))
def test_file_inputs_cut_into_parts_read_every_line_once(tmp_path_factory, files, width, end):
    from squall.spark.inputs import FileInput, prepare_file_input

    d = tmp_path_factory.mktemp("parts")
    for i, lines in enumerate(files):
        (d / f"part-{i}.jsonl").write_bytes(b"".join(x + end for x in lines))
    (d / "_SUCCESS").write_bytes(b"not input")
    (d / ".hidden").write_bytes(b"not input either")
    source = prepare_file_input("in", FileInput(str(d)), ["k"], None)
    bad: list[str] = []
    got = [v for part in source.cut(width) for v in source.read(part, bad.append)]
    want = [RULES_K.parse(x) for lines in files for x in lines if x not in (b"bad", b"")]
    assert got == want
    assert len(bad) == sum(x == b"bad" for lines in files for x in lines)


RULES_K = JsonLineRules(["k"])


def test_terminal_progress_rewrites_one_line_and_ends_it_when_done():
    out = io.StringIO()
    report = progress.terminal_reporter(out)
    report(progress.Progress(0, 2, 0, 3, 1000, 0, 1.0, 1000.0, 0.0))
    report(progress.Progress(2, 2, 3, 3, 9, 9, 2.0, 9.0, 9.0, finished=True))
    first, second = out.getvalue().split("\r")[1:]
    assert first.startswith("backfill running: components 0/3 done, 1,000 rows read")
    assert second.startswith("backfill done: components 3/3 done, 9 rows read") and second.endswith("\n")
    assert len(second.rstrip("\n")) >= len(first)  # padded over the longer line before it


def test_a_bolt_that_writes_live_output_is_left_out_by_itself():
    from squall.contrib.kafka import KafkaBolt, KafkaSpout
    from squall.spark.plan import BackfillError

    b = TopologyBuilder()
    b.set_spout("in", KafkaSpout("t", group_id="g"))
    b.set_bolt("echo", EchoBolt(["topic", "partition", "offset", "key", "value", "timestamp"])).shuffle("in")
    b.set_bolt("out", KafkaBolt("t2", failed_stream=True)).shuffle("echo")
    b.set_bolt("dead", KafkaBolt("t3")).shuffle("out", "failed")
    plan = make_plan(b.build(), ["in"], None, {})
    assert plan.live == ["dead", "out"] and plan.excluded == ["dead", "out"]
    assert list(plan.sinks) == ["echo"] and not plan.ticks  # its ticks no longer stop the run
    with pytest.raises(BackfillError, match="'out' writes live output.*--sink COMPONENT"):
        make_plan(b.build(), ["in"], ["out:failed"], {})
