"""Metrics without a cluster: a local topology's counters through the worker snapshot, the
supervisor's parsing (hostile files refused whole) and the exposition text Prometheus reads."""
from __future__ import annotations

import collections
import json
import math
import time
from pathlib import Path

import psutil
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from squall import Bolt, LocalCluster, TopologyBuilder
from squall.daemons import local_state
from squall.daemons.metrics.exposition import SnapshotCollector
from squall.daemons.metrics.families import Series, add_worker_snapshot
from squall.daemons.supervisor.metrics import SupervisorMetrics
from squall.daemons.supervisor.processes import WorkerProc
from squall.daemons.worker import metrics as worker_metrics
from squall.runtime.histogram import Histogram
from squall.testing.components import FixedTupleSpout, Recorder, RecordingBolt, unique_name
from squall.testing.waiting import wait_for

ROWS = 600


class Double(Bolt):
    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, t):
        self.collector.emit([t["n"]], anchors=t)
        self.collector.emit([-t["n"]], anchors=t)
        self.collector.ack(t)

    def declare_output_fields(self, declarer):
        declarer.declare(["n"])


def exposition(series: Series) -> dict[str, list]:
    """Render as Prometheus would scrape it, parse it back: sample name -> samples."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(lambda: series))
    out: dict[str, list] = collections.defaultdict(list)
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            out[sample.name].append(sample)
    return out


def total(samples, **labels) -> float:
    return sum(s.value for s in samples if all(s.labels.get(k) == v for k, v in labels.items()))


def snapshot_of(runtime_metrics: dict, topology: str = "t", port: int = 7000) -> dict:
    data = worker_metrics.snapshot(runtime_metrics, worker_metrics.process_stats(psutil.Process()),
                                   time.time(), 3.0, topology, port, "w1")
    return json.loads(data)


def test_local_topology_counters_reach_the_exposition_exactly():
    name = unique_name("metrics")
    b = TopologyBuilder()
    b.set_spout("nums", FixedTupleSpout(name, [[i] for i in range(ROWS)], ["n"]))
    b.set_bolt("double", Double(), 1, num_tasks=2).shuffle("nums")
    b.set_bolt("sink", RecordingBolt(name + ".sink"), 2).shuffle("double")
    with LocalCluster() as cluster:
        cluster.submit(name, {"topology.workers": 2}, b.build())
        wait_for(lambda: len(Recorder.get(name + ".acked")) == ROWS, 30, what="every row acked")

        def exported() -> dict[str, list]:
            series = Series()
            for port, m in enumerate(cluster.metrics(name), start=7000):
                add_worker_snapshot(series, snapshot_of(m, name, port), name, port, time.time())
            return exposition(series)

        # Counters are bumped after the user calls in their batch: wait until they settle.
        last: list = [None, None]

        def settled() -> bool:
            now = exported()
            counters = {k: v for k, v in now.items() if k.startswith("squall_task_")}
            same = counters == last[1]
            last[:] = [now, counters]
            return same and total(now["squall_task_acked_total"], component="nums") == ROWS

        wait_for(settled, 10, what="counters settled", interval=0.3)
    m = last[0]
    executed = m["squall_task_executed_total"]
    assert total(executed, component="double") == ROWS
    per_task = [s.value for s in executed if s.labels["component"] == "double"]
    assert len(per_task) == 2 and min(per_task) > 0  # one executor, two tasks, each counted
    assert total(executed, component="sink") == 2 * ROWS
    assert total(m["squall_task_emitted_total"], component="nums", stream="default") == ROWS
    assert total(m["squall_task_emitted_total"], component="double", stream="default") == 2 * ROWS
    assert total(m["squall_executor_transferred_total"], component="double") == 2 * ROWS
    assert total(m["squall_task_acked_total"], component="sink") == 2 * ROWS
    assert total(m["squall_task_failed_total"]) == 0
    # The acker counts finished trees: every row's tree finished once.
    assert total(executed, component="__acker") == ROWS
    # Histograms: cumulative buckets ending in +Inf == count; a bolt's execute latency counts
    # every tuple, a spout's complete latency a sample of the trees.
    for hist, component, most in (("complete_latency", "nums", ROWS), ("execute_latency", "sink", 2 * ROWS)):
        name_ = f"squall_executor_{hist}_seconds"
        count = total(m[f"{name_}_count"], component=component)
        by_le: dict[float, float] = collections.Counter()
        for s in m[f"{name_}_bucket"]:
            if s.labels["component"] == component:
                by_le[float(s.labels["le"])] += s.value
        buckets = sorted(by_le.items())
        assert buckets[-1] == (math.inf, count) and 0 < count <= most
        assert [v for _, v in buckets] == sorted(v for _, v in buckets)
    assert total(m["squall_executor_execute_latency_seconds_count"], component="double") == ROWS
    assert total(m["squall_worker_resident_memory_bytes"]) > 10_000_000
    assert {s.value for s in m["squall_executor_receive_queue_capacity"]} == {32768}  # the default bound


def good_snapshot() -> dict:
    return {"version": 1, "time": time.time(), "uptime": 5.0, "topology_id": "t", "port": 1, "worker_id": "w",
            "process": {"rss": 1000, "cpu_user": 1.5, "cpu_system": 0.5, "gc_collections": [3, 1, 0]},
            "executors": [{"component": "count", "executor": [3, 4], "kind": "bolt", "transferred": 0,
                           "errors": 0, "queue": 2, "queue_capacity": 100, "backpressure": False,
                           "tasks": {"3": {"executed": 10, "emitted": {"default": 4}, "acked": 10, "failed": 0},
                                     "4": {"executed": 7, "emitted": {}, "acked": 7, "failed": 0}},
                           "execute_latency": {"bounds": [0.001, 0.01], "counts": [1, 2, 3], "sum": 0.5}}],
            "transport": {"frames_in": 1, "bytes_in": 10, "frames_out": 2, "bytes_out": 20,
                          "reconnects": 0, "blocked_sends": 0, "refused_connections": 3, "refused_keys": 1},
            "dropped": {"unknown_task": 0, "bad_frame": 1}, "transfer_queue": 0, "transfer_queue_capacity": 10}


def mutate(path: str, value) -> dict:
    snap = good_snapshot()
    *parents, key = path.split(".")
    node = snap
    for p in parents:
        node = node[int(p)] if isinstance(node, list) else node[p]
    node[key] = value
    return snap


@pytest.mark.parametrize("snap, problem", [
    (mutate("version", 2), "version"),
    (mutate("executors", {"a": 1}), "executors is not a list"),
    (mutate("process.rss", -5), "negative"),
    (mutate("process.cpu_user", float("nan")), "finite"),
    (mutate("process.gc_collections", list(range(100))), "gc_collections"),
    (mutate("executors.0.component", "bad\nname"), "label"),
    (mutate("executors.0.tasks", {"3": {"executed": "ten"}}), "executed"),
    (mutate("executors.0.execute_latency", {"bounds": [0.01, 0.001], "counts": [1, 1, 1], "sum": 1}),
     "increasing"),
    (mutate("executors.0.execute_latency", {"bounds": [0.01], "counts": [1], "sum": 1}), "one more count"),
    (mutate("dropped", []), "must be an object"),
    ("garbage", "must be an object"),
])
def test_malformed_snapshot_is_refused_whole(snap, problem):
    series = Series()
    with pytest.raises(ValueError, match=problem):
        add_worker_snapshot(series, snap, "t", 1, time.time())
    assert series.samples == {}


def test_histogram_buckets_follow_prometheus_le():
    h = Histogram((0.001, 0.01, 0.1))
    values = [0.0005, 0.001, 0.002, 0.01, 0.05, 0.1, 0.2, 5.0]
    h.observe_many(values)
    # le is inclusive: a value equal to a bound is in that bound's bucket.
    expected = [sum(1 for v in values if (lo < v <= hi)) for lo, hi in
                zip((-math.inf, 0.001, 0.01, 0.1), (0.001, 0.01, 0.1, math.inf))]
    assert h.counts == expected == [2, 2, 2, 2]
    assert h.sum == pytest.approx(sum(values))
    h.observe_batch(0.03, 10)  # ten tuples in 30 ms: ten counts in the 3 ms bucket
    assert h.counts == [2, 12, 2, 2] and h.sum == pytest.approx(sum(values) + 0.03)


def test_supervisor_exports_good_workers_and_counts_a_bad_snapshot(tmp_path: Path):
    layout = local_state.LocalLayout(tmp_path)
    good, bad, silent = (WorkerProc(w, p, "topo-1", [], "", 1, None, 0.0)
                         for w, p in (("wgood", 6701), ("wbad", 6702), ("wnew", 6703)))
    snap = good_snapshot()
    snap["topology_id"] = "someone-else"  # labels come from the supervisor's record, not the file
    local_state.write_metrics(layout, "wgood", json.dumps(snap).encode())
    local_state.write_metrics(layout, "wbad", b"{not json")
    metrics = SupervisorMetrics(layout, time.time)
    metrics.counts.update({"launches": 3, "restarts": 1, "kill:SIGTERM": 2})
    workers = {w.worker_id: w for w in (good, bad, silent)}
    m = exposition(metrics.series([6701, 6702, 6703, 6704], [6701, 6702, 6703], workers, 0))
    executed = m["squall_task_executed_total"]
    assert {(s.labels["topology"], s.labels["task"], s.value) for s in executed} == {
        ("topo-1", "3", 10.0), ("topo-1", "4", 7.0)}
    assert {s.labels["port"] for s in m["squall_worker_frames_sent_total"]} == {"6701"}
    assert total(m["squall_supervisor_bad_worker_snapshots_total"]) == 1
    assert total(m["squall_supervisor_slots_used"]) == 3 and total(m["squall_supervisor_slots_free"]) == 1
    assert total(m["squall_supervisor_worker_launches_total"]) == 3
    assert total(m["squall_supervisor_worker_restarts_total"]) == 1
    assert total(m["squall_supervisor_worker_kills_total"], signal="SIGTERM") == 2
    assert total(m["squall_worker_dropped_total"], cause="bad_frame") == 1
    assert total(m["squall_worker_refused_connections_total"]) == 3
    assert total(m["squall_worker_refused_keys_total"]) == 1
    # An oversized file is refused unread.
    (layout.metrics_file("wgood")).write_bytes(b" " * (local_state.METRICS_MAX_BYTES + 1))
    m = exposition(metrics.series([6701], [6701], {"wgood": good}, 0))
    assert "squall_task_executed_total" not in m
    assert total(m["squall_supervisor_bad_worker_snapshots_total"]) == 2
