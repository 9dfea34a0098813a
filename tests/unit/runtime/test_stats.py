"""The typed stats records: what a running topology's executors report survives its wire form,
a worker's stats file of an earlier squall reads the same, and hostile stats read as what
they hold of use, never as an error."""
from __future__ import annotations

import json

from squall import LocalCluster, TopologyBuilder
from squall.runtime.stats import ExecutorStats, Latency, TransportStats, WorkerStats
from squall.testing.components import FixedTupleSpout, RecordingBolt, unique_name
from squall.testing.waiting import wait_for


def test_what_a_running_topology_reports_survives_its_wire_form():
    name = unique_name("stats")
    builder = TopologyBuilder()
    builder.set_spout("src", FixedTupleSpout(name, [[i] for i in range(50)], fields=["n"]))
    builder.set_bolt("sink", RecordingBolt(name), 2).shuffle("src")
    with LocalCluster() as cluster:
        cluster.submit(name, {"topology.acker.executors": 1}, builder.build())
        # One snapshot that shows every tree acked and timed: the executor thread counts a batch's acks
        # before it adds the batch's latencies, so a snapshot between the two has the one, not the other.
        snapshots: list[list[dict]] = []

        def acked_and_timed() -> bool:
            snapshots.append(cluster.stats(name))
            spouts = [s for s in snapshots[-1] if s["kind"] == "spout"]
            return sum(s.get("acked", 0) for s in spouts) == 50 and all(s.get("complete_latency_ms") for s in spouts)

        wait_for(acked_and_timed, 20, "every tuple acked and its latency taken")
        wire = snapshots[-1]
    kinds = {s["kind"] for s in wire}
    assert kinds == {"spout", "bolt", "acker"}
    for entry in wire:
        again = ExecutorStats.from_dict(json.loads(json.dumps(entry)))
        assert again is not None and again.to_dict() == entry
    spout = ExecutorStats.from_dict(next(s for s in wire if s["kind"] == "spout"))
    assert spout.counters()[:4] == (50, 0, 50, 0) and spout.complete_latency is not None  # user streams only
    assert spout.counters()[5] > 0 and 0 < spout.counters()[6] <= 50  # complete latency: sum (micros), trees timed


def test_an_earlier_workers_stats_file_reads_the_same():
    # The stats a worker wrote before the records were typed (the same wire form).
    earlier = {"executors": [
        {"component": "count", "executor": [3, 4], "kind": "bolt", "emitted": {"default": 7, "__ack_ack": 9},
         "executed": 10, "errors": 0, "queue": 1, "queue_peak": 5, "metrics": {"3": {"hits": {"kind": "count",
                                                                                           "value": 4}}},
         "checkpoint": {"committed": 2, "phase": "commit"}, "acked": 9, "failed": 1, "busy_secs": 0.25,
         "dropped": {"bad_ids": 1}, "capacity": 0.1},
        {"component": "src", "executor": [1, 1], "kind": "spout", "emitted": {"default": 10}, "executed": 0,
         "errors": 0, "queue": 0, "queue_peak": 0, "metrics": {}, "acked": 9, "failed": 1, "pending": 0,
         "complete_latency_ms": {"p50": 1.5, "p99": 3.0}, "dropped": {}}],
        "transport": {"bad_frames": 1, "refused_connections": 0, "refused_keys": 0, "dropped_unknown_task": 2,
                      "dropped_bad_payload": 0, "dropped": {"unknown_task": 2}, "held_bytes": 0, "unserializable": 0},
        "time": 12.5, "executors_left_out": 3}
    stats = WorkerStats.from_dict(earlier)
    assert stats.to_dict() == earlier
    count, src = stats.executors
    assert count.sections == {"checkpoint": {"committed": 2, "phase": "commit"}}
    assert count.counters() == (7, 10, 9, 1, 250_000, 0, 0) and src.complete_latency == Latency(1.5, 3.0)
    assert stats.transport.counters()["dropped_unknown_task"] == 2 and stats.executors_left_out == 3
    assert stats.counters([(1, 1)]) == {(1, 1): (10, 0, 9, 1, 0, 0, 0)}  # only the executors asked for


def test_hostile_stats_read_as_what_they_hold_of_use():
    entries = [
        "not an object", {"executor": [1]}, {"executor": [True, 2]},  # name no executor: left out
        {"executor": [5, 5], "component": 3, "emitted": 12, "executed": "many", "acked": True, "failed": -1,
         "busy_secs": "slow", "complete_latency_ms": {"p50": "x"}, "dropped": {"bad": "x", "ok": 2},
         "metrics": {"5": {"good": {"kind": "gauge", "value": {"a": 1, "b": 2.5}}, "bad": {"value": [1]},
                           "worse": "x"}, "6": "no"},
         "nested": {"deep": {"deeper": 1}, "flat": 2}},
    ]
    stats = WorkerStats.from_dict({"executors": entries, "transport": [1], "time": "now", "executors_left_out": None})
    assert stats.time is None and stats.transport == TransportStats() and stats.executors_left_out == 0
    (entry,) = stats.executors
    assert entry == ExecutorStats(
        "?", (5, 5), "?", emitted={"default": 12}, failed=-1, dropped={"ok": 2},
        metrics={"5": {"good": {"kind": "gauge", "value": {"a": 1, "b": 2.5}}}}, sections={"nested": {"flat": 2}})
    assert WorkerStats.from_dict([1, 2]) == WorkerStats() and WorkerStats().to_dict() == {}
