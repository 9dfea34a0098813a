"""The ZooKeeper records and their checks, without a ZooKeeper: encoding, refusals, ordering."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from squall.daemons.state import Assignment, ErrorInfo, NodeAssignment, SupervisorInfo, TopologyInfo, WorkerBeat
from squall.daemons.state.election import contender_order
from squall.daemons.state.json_depth import check_depth, check_json_depth
from squall.daemons.state.records import (
    MAX_NODE_BYTES,
    PublishedTokens,
    check_name,
    encode,
    node_parts,
    parse_node,
    slot_name,
)
from squall.runtime.stats import ExecutorStats, WorkerStats

RECORDS = [
    TopologyInfo(id="wc-1-100", name="wc", status="inactive", num_workers=2,
                 component_parallelism={"spout": 2}, code_digest="sha256:ab",
                 submitted_at=1.5, conf={"nested": {"a": [1]}}),
    Assignment(topology_id="wc-1-100", executors={(1, 2): ("sup-a", 6700), (3, 3): ("sup-b", 6701)},
               node_host={"sup-a": "10.0.0.1"}, executor_start={(1, 2): 10.0}, code_digest="d",
               version=3),
    SupervisorInfo(id="sup-a", host="h", ports=[6700, 6701], started_at=1.0, used_ports=[6700], time=2.0),
    WorkerBeat("wc-1-100", "sup-a", 6700, time=5.0, executors=[(1, 2)], uptime=3.0, stats=WorkerStats(
        2.0, [ExecutorStats("count", (1, 2), "bolt", {"default": 3}, executed=3, acked=3, failed=0)])),
    ErrorInfo(time=1.0, component="count", task=3, host="h", port=6700, error="boom"),
    PublishedTokens(True, (("ab" * 32, "alice", "user"),)),
]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_records_survive_encoding(record) -> None:
    assert parse_node(encode("/p", record.to_dict()), type(record).from_dict) == record


@pytest.mark.parametrize("data, message", [
    (b"", "empty node"),
    (b"[1]", "JSON object"),
    (b'{"v": 2, "id": "x"}', "format version 2"),
    (b'{"v": 1, "time": 1, "component": "c", "task": 1, "host": "h", "port": 1}', "missing field 'error'"),
    (b'{"v": 1, "time": 1, "component": "c", "task": 1, "host": "h", "port": true, "error": ""}',
     "port must be an integer"),
    (b'{"v": 1, "time": 1, "component": ["c"], "task": 1, "host": "h", "port": 1, "error": ""}',
     "component must be a string"),
    (b'{"v": 1, "x": ' + b"[" * 50_000 + b"]" * 50_000 + b"}", "nested deeper"),
    (b'{"v": 1, "x": ' + b"[" * 65 + b"]" * 65 + b"}", "nested deeper than 64"),
    (b'{"v": 1, "time": 1, "component": "c", "task": 1e999, "host": "h", "port": 1, "error": ""}',
     "task must be an integer"),
])
def test_malformed_nodes_are_refused_naming_the_problem(data: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_node(data, ErrorInfo.from_dict)


def test_assignment_rows_are_checked() -> None:
    row = {"topology_id": "t", "node_host": {}, "executor_start": [], "code_digest": "", "version": 1}
    with pytest.raises(ValueError, match="start after end"):
        Assignment.from_dict({**row, "executors": [[5, 4, "n", 6700]]})
    with pytest.raises(ValueError, match="list of 4"):
        Assignment.from_dict({**row, "executors": [[1, 2, "n"]]})


@pytest.mark.parametrize("row, message", [
    ([1, 10**12, "n", 6700], "outside -1"),
    ([1, 200_000, "n", 6700], "more than 100000 tasks"),
    ([-5, 1, "n", 6700], "outside -1"),
    ([1, "2", "n", 6700], "end must be an integer"),
])
def test_assignment_task_ranges_are_bounded(row, message) -> None:
    base = {"topology_id": "t", "node_host": {}, "executor_start": [], "code_digest": "", "version": 1}
    with pytest.raises(ValueError, match=message):
        Assignment.from_dict({**base, "executors": [row]})


def test_beat_executor_runs_are_compact_and_bounded() -> None:
    executors = [(1, 1), (2, 2), (3, 3), (4, 5), (6, 7), (-1, -1)]
    beat = WorkerBeat("t", "n", 1, 0.0, executors, 0.0)
    assert beat.to_dict()["executor_runs"] == [[-1, 1, 1], [1, 1, 3], [4, 2, 2]]
    assert sorted(parse_node(encode("/b", beat.to_dict()), WorkerBeat.from_dict).executors) == sorted(executors)
    hostile = {**beat.to_dict(), "executor_runs": [[1, 1, 10**9]]}
    with pytest.raises(ValueError, match="more than 100000 executors"):
        WorkerBeat.from_dict(hostile)


def test_supervisor_away_flag_round_trips_and_is_checked() -> None:
    info = SupervisorInfo(id="s", host="h", ports=[1], started_at=0.0, away=True)
    assert parse_node(encode("/s", info.to_dict()), SupervisorInfo.from_dict).away is True
    with pytest.raises(ValueError, match="away must be true or false"):
        SupervisorInfo.from_dict({**info.to_dict(), "away": 1})


def test_unusable_ports_survive_encoding_are_left_out_of_scheduling_and_are_checked() -> None:
    info = SupervisorInfo(id="s", host="h", ports=[6700, 6701, 6702], started_at=0.0,
                          unusable={6701: "port 6701 is held by another process"})
    back = parse_node(encode("/s", info.to_dict()), SupervisorInfo.from_dict)
    assert back == info and back.usable_ports == [6700, 6702]
    assert SupervisorInfo.from_dict({**info.to_dict(), "unusable": {"6701": "x" * 5000}}).unusable[6701] == "x" * 500
    for bad, message in (({"http": "x"}, "not a port"), ({"0": "x"}, "not a port"), ([6701], "not an object"),
                         ({"6701": 7}, "unusable reason")):
        with pytest.raises(ValueError, match=message):
            SupervisorInfo.from_dict({**info.to_dict(), "unusable": bad})


def test_names_and_sizes_are_bounded() -> None:
    assert slot_name("sup-a", 6700) == "sup-a-6700"
    for bad in ("", "a/b", ".", "..", "a\nb", 7):
        with pytest.raises(ValueError, match="node name"):
            check_name(bad, "topology id")
    with pytest.raises(ValueError, match="above ZooKeeper"):
        encode("/big", {"blob": "x" * MAX_NODE_BYTES})


def test_contenders_are_ordered_by_lock_sequence() -> None:
    children = ["b__lock__0000000012", "junk", "a__lock__0000000009", "c__lock__0000000010"]
    assert contender_order(children) == ["a__lock__0000000009", "c__lock__0000000010",
                                         "b__lock__0000000012"]


def test_node_parts_split_an_assignment_by_supervisor() -> None:
    whole = Assignment("t", {(1, 2): ("a", 1), (3, 3): ("a", 2), (4, 4): ("b", 1), (5, 5): ("a", 1)},
                       code_digest="d", version=7)
    parts = node_parts(whole)
    assert parts == {"a": NodeAssignment("t", "d", {1: [(1, 2), (5, 5)], 2: [(3, 3)]}),
                     "b": NodeAssignment("t", "d", {1: [(4, 4)]})}
    for part in parts.values():
        assert parse_node(encode("/p", part.to_dict()), NodeAssignment.from_dict) == part
    # 1,000 equal executors on one port take a few bytes: runs, not rows.
    big = NodeAssignment("t", "d", {1: [(i, i) for i in range(1, 1001)]})
    assert len(encode("/p", big.to_dict())) < 100


@pytest.mark.parametrize("ports, message", [
    ([[1, [[1, 1, 1]]], [1, [[2, 1, 1]]]], "port 1 appears twice"),
    ([[1, []]], "port 1 has no executors"),
    ([[True, [[1, 1, 1]]]], "port must be an integer"),
    ([[1, [[1, 1, 10**9]]]], "more than"),
])
def test_malformed_node_parts_are_refused(ports, message) -> None:
    with pytest.raises(ValueError, match=message):
        NodeAssignment.from_dict({"topology_id": "t", "code_digest": "d", "ports": ports})


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(alphabet='ab"\\[]{} \n', max_size=5),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                               st.text(alphabet='k"\\[{', max_size=3), inner, max_size=3), max_leaves=30)


@settings(max_examples=300)
@given(json_values, st.integers(0, 8))
def test_the_depth_check_on_text_agrees_with_the_one_on_values(value, limit) -> None:
    data = json.dumps(value).encode()
    try:
        check_depth(value, limit)
        expected = None
    except ValueError as exc:
        expected = str(exc)
    try:
        check_json_depth(data, limit)
        got = None
    except ValueError as exc:
        got = str(exc)
    assert got == expected
