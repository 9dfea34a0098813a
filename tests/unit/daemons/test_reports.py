"""A supervisor's report, without sockets: what goes in, how it is bounded, and what nimbus
refuses (each refusal names the problem)."""
from __future__ import annotations

import json

import pytest

from squall.daemons.nimbus.status import topology_status
from squall.daemons.reports import (
    MAX_REPORT_BYTES,
    MAX_REPORT_EXECUTORS,
    MAX_REPORT_WORKERS,
    ReportedBeat,
    SupervisorReport,
    build_report,
    parse_report,
)
from squall.daemons.state import Assignment, TopologyInfo, WorkerBeat
from squall.runtime.stats import WorkerStats


def beat(port: int, stats_bytes: int = 0, node: str = "s1", executors=((1, 1), (2, 3))) -> ReportedBeat:
    stats = {"time": 99.0, "executors": [{"executor": [1, 1], "emitted": {"default": 5, "__ack_init": 7},
                                          "executed": 4, "acked": 3, "failed": 1, "pad": {"x": "x" * stats_bytes}}]}
    return ReportedBeat.of(WorkerBeat("wc-1-1", node, port, 100.0 + port, list(executors), 5.0,
                                      WorkerStats.from_dict(stats)))


def test_a_report_round_trips_with_counters_and_stats_as_text():
    report = build_report("s1", 42.0, [beat(6701, 10), beat(6700, 10)])
    parsed = parse_report(report.to_json(), "s1")
    assert parsed == SupervisorReport("s1", 42.0, [beat(6700, 10), beat(6701, 10)], 0)
    first = parsed.beats[0]
    assert first.counters == {(1, 1): (5, 4, 3, 1, 0, 0, 0)}  # user streams only: acker traffic left out
    assert first.samples() == {(1, 1): (99.0, (5, 4, 3, 1, 0, 0, 0))}
    assert first.decoded().stats.executors[0].acked == 3  # decoded only where shown


def test_latency_sums_travel_as_integer_micros_and_six_wide_rows_still_parse():
    stats = {"time": 5.0, "executors": [{"executor": [1, 1], "emitted": {"default": 2}, "executed": 8,
                                         "acked": 2, "failed": 0, "busy_secs": 0.25,
                                         "complete_latency_sum_secs": 1.5, "complete_latency_count": 3}]}
    b = ReportedBeat.of(WorkerBeat("wc-1-1", "s1", 6700, 6.0, [(1, 1)], 5.0, WorkerStats.from_dict(stats)))
    assert b.counters == {(1, 1): (2, 8, 2, 0, 250_000, 1_500_000, 3)}
    old = {**b.to_dict(), "counters": [[1, 1, 2, 8, 2, 0]]}  # a supervisor of an earlier squall
    report = {"v": 1, "supervisor": "s1", "time": 1.0, "workers": [old]}
    assert parse_report(json.dumps(report).encode(), "s1").beats[0].counters == {(1, 1): (2, 8, 2, 0, 0, 0, 0)}


def test_every_beat_and_its_counters_stay_and_stats_fill_the_budget_smallest_first():
    beats = [beat(6700, 50_000), beat(6701, 1_000), beat(6702, 200_000), beat(6703)]
    report = build_report("s1", 1.0, beats, budget=60_000)
    assert [b.port for b in report.beats] == [6700, 6701, 6702, 6703]  # nobody's beat is lost
    assert [bool(b.stats) for b in report.beats] == [True, True, False, True]
    assert all(b.counters == {(1, 1): (5, 4, 3, 1, 0, 0, 0)} for b in report.beats)  # rates go on
    assert report.stats_left_out == 1
    assert len(report.to_json()) <= 60_000
    everything = build_report("s1", 1.0, beats)
    assert everything.stats_left_out == 0 and len(everything.to_json()) < MAX_REPORT_BYTES


def _report(workers, supervisor="s1", **extra) -> bytes:
    return json.dumps({"v": 1, "supervisor": supervisor, "time": 1.0, "workers": workers, **extra}).encode()


@pytest.mark.parametrize("data, message", [
    (b"{not json", "not JSON"),
    (b"[1]", "report must be an object"),
    (b'{"v": 2}', "unsupported report version 2"),
    (_report([], supervisor="s2"), "report of supervisor 's2' sent for 's1'"),
    (_report([], supervisor="a/b"), "cannot be used as a ZooKeeper node name"),
    (_report([beat(6700, node="s9").to_dict()]), "names node 's9'"),
    (_report([beat(6700).to_dict(), beat(6700).to_dict()]), "named twice"),
    (_report([beat(0).to_dict()]), "out of range"),
    (_report([beat(p).to_dict() for p in range(1, MAX_REPORT_WORKERS + 2)]), "workers, more than"),
    (_report([{**beat(6700).to_dict(), "executor_runs": [[1, 1, MAX_REPORT_EXECUTORS]], "counters": []},
              {**beat(6701).to_dict(), "executor_runs": [[1, 1, 10]], "counters": []}]),
     f"worker 1 \\(of at most {MAX_REPORT_EXECUTORS} executors in all\\)"),
    (_report([{**beat(6700).to_dict(), "topology_id": ".."}]), "node name"),
    (_report([{**beat(6700).to_dict(), "stats": {"a": 1}}]), "stats must be a string"),
    (_report([{**beat(6700).to_dict(), "counters": [[9, 9, 1, 1, 1, 1]]}]), "does not run"),
    (_report([{**beat(6700).to_dict(), "counters": [[1, 1, 1, 1, True, 1]]}]), "six or nine integers"),
    (b'{"v": 1, "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested deeper"),
    (b" " * (MAX_REPORT_BYTES + 1), "above"),
])
def test_hostile_reports_are_refused_naming_the_problem(data: bytes, message: str):
    with pytest.raises(ValueError, match=message):
        parse_report(data, "s1")


def test_stats_stay_opaque_until_shown_and_are_checked_there():
    deep: dict = {}
    for _ in range(200):
        deep = {"x": deep}
    odd = [ReportedBeat("t", "s1", 6700, 2.0, [(1, 1)], 1.0, stats=text)
           for text in ("[1, 2]", "{not json", "[" * 5000 + "]" * 5000)]
    assert all(b.decoded().stats == WorkerStats() for b in odd)  # not an object: no stats, never an error
    good = ReportedBeat("t", "s1", 6700, 2.0, [(1, 1)], 1.0, stats=json.dumps(
        {"executors": [deep, {"executor": [1, 1], "acked": 3}]}))
    st = topology_status(TopologyInfo("t", "t", "active", 1, {}, "d", 0.0), Assignment("t", {(1, 1): ("s1", 6700)}),
                         {("s1", 6700): good.decoded()}, {(1, 1): "c"}, {}, [], now=3.0)
    assert st.to_dict()["components"][0]["acked"] == 3  # shown field by field; the deep entry ignored
