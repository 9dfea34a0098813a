"""The numbers `squall status --json` and the web UI show, computed from plain records:
capacity windows in the worker, latencies and per-stream counts in nimbus's status, and
the UI's static files (only those listed, with a locked-down content policy)."""
from __future__ import annotations

import pytest

from squall.daemons.nimbus import status, web
from squall.daemons.state import Assignment, TopologyInfo, WorkerBeat
from squall.daemons.worker.decisions import with_capacity
from squall.runtime.stats import ExecutorStats, WorkerStats


def bolt(busy: float) -> ExecutorStats:
    return ExecutorStats("work", (1, 1), "bolt", busy_secs=busy)


def test_capacity_is_busy_time_over_the_window():
    spout = ExecutorStats("src", (2, 2), "spout")
    first, marks = with_capacity([bolt(2.0), spout], {}, now=100.0)
    assert first[0].capacity is None and first[1] == spout
    second, marks = with_capacity([bolt(3.5)], marks, now=103.0)
    assert second[0].capacity == 0.5 and marks == {(1, 1): (3.5, 103.0)}
    third, _ = with_capacity([bolt(9.0)], marks, now=104.0)
    assert third[0].capacity == 1.0  # clamped: a window is never more than full


def test_status_latencies_capacity_streams_and_inputs():
    info = TopologyInfo("t-1", "t", "active", 2, {"src": 1, "work": 2, "__acker": 1}, "d", 0.0)
    placed = {(1, 1): ("n1", 1), (2, 2): ("n1", 1), (3, 3): ("n2", 2), (4, 4): ("n1", 1)}
    assignment = Assignment("t-1", placed, node_host={"n1": "h1", "n2": "h2"})
    components = {(1, 1): "__acker", (2, 2): "src", (3, 3): "work", (4, 4): "work"}
    stats_1 = {"executors": [
        {"executor": [2, 2], "emitted": {"default": 1000, "__ack_init": 1000}, "acked": 900,
         "complete_latency_ms": {"p50": 4.0, "p99": 9.0}},
        {"executor": [4, 4], "emitted": {"default": 10, "side": 5}, "executed": 300, "busy_secs": 0.03,
         "capacity": 0.2, "acked": 300}]}
    stats_2 = {"executors": [
        {"executor": [3, 3], "emitted": {"default": 20}, "executed": 700, "busy_secs": 0.14, "capacity": 0.6,
         "acked": 700}]}
    beats = {("n1", 1): WorkerBeat("t-1", "n1", 1, 10.0, [(1, 1), (2, 2), (4, 4)], 5.0, WorkerStats.from_dict(stats_1)),
             ("n2", 2): WorkerBeat("t-1", "n2", 2, 10.0, [(3, 3)], 5.0, WorkerStats.from_dict(stats_2))}
    structure = {"components": {"src": {"kind": "spout", "inputs": []},
                                "work": {"kind": "bolt", "inputs": [["src", "default", "shuffle"], ["bad"]]}}}
    st = status.topology_status(info, assignment, beats, components, structure, [], now=11.0).to_dict()
    comps = {c["id"]: c for c in st["components"]}
    work, src = comps["work"], comps["src"]
    assert work["inputs"] == [{"component": "src", "stream": "default", "grouping": "shuffle"}]
    assert work["streams"] == {"default": 30, "side": 5} and src["streams"] == {"default": 1000}
    assert work["capacity"] == 0.6  # the busiest executor's
    assert [e["execute_latency_ms"] for e in work["executors"]] == [0.2, 0.1]
    assert work["execute_latency_ms"] == pytest.approx(0.17)  # 0.17 s over 1000 tuples, weighted by executed
    assert src["complete_latency_ms"] == 4.0 and src["capacity"] is None and src["execute_latency_ms"] is None
    assert (work["tasks"], src["tasks"], comps["__acker"]["tasks"]) == (2, 1, 1)


def test_only_the_listed_ui_files_are_served_with_a_strict_policy():
    page = web.static_file("/")
    assert page is not None and b'<script src="/ui/app.js">' in page.data
    assert page.content_type.startswith("text/html")
    for path in ("/ui/app.js", "/ui/graph.js", "/ui/style.css"):
        assert web.static_file(path) is not None, path
    for path in ("/ui/../web.py", "/ui/", "/web.py", "/ui/webui/app.js", "/api/v1", "/favicon.ico"):
        assert web.static_file(path) is None, path
    seen: dict = {}
    body = web.respond(lambda status, headers: seen.update(status=status, headers=dict(headers)), page)
    assert seen["status"] == "200 OK" and body == [page.data]
    policy = seen["headers"]["Content-Security-Policy"]
    assert "default-src 'none'" in policy and "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
    assert seen["headers"]["X-Content-Type-Options"] == "nosniff"
    # Nothing is fetched from elsewhere: no absolute URLs in the UI's files.
    for path in web.FILES:
        assert b"http://" not in web.static_file(path).data.replace(b"http://www.w3.org/2000/svg", b"")
        assert b"https://" not in web.static_file(path).data
