"""The worker's decisions as plain functions: its verdict on an assignment, task endpoints,
conf merging, outage logging, the size of its beats, and the checks of its code bundle."""
from __future__ import annotations

import json

import pytest

from squall.config import build_config
from squall.daemons.state import Assignment, TopologyInfo, WorkerBeat
from squall.daemons.state.records import MAX_NODE_BYTES, encode, parse_node
from squall.daemons.worker.bundle import WorkerError, load_bundle_topology, read_topology_conf
from squall.daemons.worker.decisions import (
    CHANGED,
    GONE,
    KEEP,
    UNREADABLE,
    OutageLog,
    assignment_verdict,
    check_executors,
    fit_stats,
    is_active,
    merge_worker_conf,
    missing_tasks,
    nodes_without_host,
    task_endpoints,
)
from squall.daemons.worker.local_files import STATS_BUDGET_BYTES
from squall.runtime.stats import ExecutorStats, WorkerStats

A = Assignment("t1", {(1, 1): ("n1", 6700), (2, 3): ("n1", 6700), (4, 4): ("n2", 6701)},
               node_host={"n1": "10.0.0.1", "n2": "10.0.0.2"})


class TestDecisions:
    def test_verdict_keep_when_the_slot_holds_exactly_our_executors(self):
        assert assignment_verdict(A, True, "n1", 6700, [(2, 3), (1, 1)]) == KEEP

    def test_verdict_gone_when_nothing_is_left_for_our_slot(self):
        moved = Assignment("t1", {(1, 1): ("n2", 6701), (2, 3): ("n2", 6701), (4, 4): ("n2", 6701)})
        assert assignment_verdict(moved, True, "n1", 6700, [(1, 1), (2, 3)]) == GONE

    def test_verdict_gone_when_the_assignment_is_removed(self):
        assert assignment_verdict(None, False, "n1", 6700, [(1, 1)]) == GONE

    def test_verdict_unreadable_when_the_node_exists_but_does_not_decode(self):
        assert assignment_verdict(None, True, "n1", 6700, [(1, 1)]) == UNREADABLE

    def test_verdict_changed_when_our_slot_holds_another_set(self):
        assert assignment_verdict(A, True, "n1", 6700, [(1, 1)]) == CHANGED
        assert assignment_verdict(A, True, "n2", 6701, [(4, 4), (5, 5)]) == CHANGED

    def test_task_endpoints_resolve_node_to_host(self):
        assert task_endpoints(A) == {1: ("10.0.0.1", 6700), 2: ("10.0.0.1", 6700),
                                     3: ("10.0.0.1", 6700), 4: ("10.0.0.2", 6701)}

    def test_a_node_without_host_is_left_out_and_named(self):
        a = Assignment("t1", {(1, 1): ("n1", 6700), (2, 2): ("ghost", 6700)}, node_host={"n1": "h1"})
        assert task_endpoints(a) == {1: ("h1", 6700)}
        assert nodes_without_host(a) == ["ghost"]

    def test_missing_tasks_skips_local_and_known(self):
        assert missing_tasks([1, 2, 3, 7, 9], local=[1], endpoints={2: ("h", 1), 3: ("h", 1)}) == [7, 9]

    @pytest.mark.parametrize("status,active", [("active", True), ("inactive", False),
                                               ("rebalancing", False), ("killed", False)])
    def test_only_an_active_status_runs_spouts(self, status, active):
        info = TopologyInfo("t1", "t", status, 1, {}, "d", 0.0)
        assert is_active(info) is active

    def test_a_gone_topology_is_inactive(self):
        assert is_active(None) is False

    def test_check_executors_names_bad_ranges(self):
        t2c = {1: "a", 2: "a", 3: "b"}
        assert check_executors([(1, 2), (3, 3)], t2c) == []
        problems = check_executors([(2, 3), (4, 5)], t2c)
        assert "executor [2, 3] spans components ['a', 'b']" in problems
        assert "executor [4, 5] names tasks the topology does not have" in problems

    def test_merge_conf_topology_overrides_but_not_daemon_keys(self):
        base = build_config({"zookeeper.root": "/mine", "topology.workers": 1}, user_file=False)
        conf, ignored = merge_worker_conf(
            base, {"topology.workers": 3, "zookeeper.root": "/elsewhere", "squall.local.dir": "/x",
                   "my.key": 1}, {"topology.workers": 4})
        assert conf["topology.workers"] == 4  # -c beats the topology conf
        assert conf["zookeeper.root"] == "/mine"
        assert conf["squall.local.dir"] == base["squall.local.dir"]
        assert conf["my.key"] == 1
        assert ignored == ["squall.local.dir", "zookeeper.root"]


class TestOutageLog:
    def test_an_outage_is_logged_once_when_it_starts_and_once_when_it_ends(self):
        outage = OutageLog()
        assert outage.recovered(1.0) is None  # nothing to end
        assert outage.failed(10.0) is True
        assert outage.failed(16.0) is False and outage.failed(22.0) is False
        assert outage.recovered(70.0) == 60.0
        assert outage.recovered(71.0) is None
        assert outage.failed(80.0) is True and outage.failures == 4


class TestBeatSize:
    def test_stats_are_trimmed_to_the_budget_and_the_rest_counted(self):
        entries = [ExecutorStats("c", (i, i), "bolt", emitted={"default": i}) for i in range(1000)]
        kept, dropped = fit_stats(entries, 5_000)
        assert kept == entries[:len(kept)] and dropped == 1000 - len(kept)
        compact = lambda v: len(json.dumps([e.to_dict() for e in v], separators=(",", ":")))  # noqa: E731
        assert compact(kept) <= 5_000 < compact(entries[:len(kept) + 1])
        assert fit_stats(entries[:3], 5_000) == (entries[:3], 0)

    def test_a_beat_of_twenty_thousand_executors_stays_far_below_the_node_limit(self):
        executors = [(i, i) for i in range(1, 20_001)]
        stats = [ExecutorStats("bolt", (i, i), "bolt", emitted={"default": 10**9}, executed=10**9, acked=1, failed=0)
                 for i, _ in executors]
        kept, dropped = fit_stats(stats, STATS_BUDGET_BYTES)
        beat = WorkerBeat("t1", "n1", 6700, 1.0, executors, 1.0, WorkerStats(1.0, kept, executors_left_out=dropped))
        size = len(encode("/squall/workerbeats/t1/n1-6700", beat.to_dict()))
        assert dropped > 0 and size < MAX_NODE_BYTES // 2
        assert parse_node(encode("/b", beat.to_dict()), WorkerBeat.from_dict).executors == executors


def test_task_endpoints_skip_rows_outside_the_topology_without_iterating_them():
    hostile = Assignment("t1", {(1, 1): ("n1", 6700), (2, 100_000 - 1 + 2): ("n1", 6700)},
                         node_host={"n1": "h1"})
    assert task_endpoints(hostile, known_tasks=frozenset({1, 2, 3})) == {1: ("h1", 6700)}


class TestBundleFiles:
    def test_missing_code_dir(self, tmp_path):
        with pytest.raises(WorkerError, match="has no code/ directory"):
            load_bundle_topology(tmp_path)

    def test_garbage_topology_bin(self, tmp_path):
        (tmp_path / "code").mkdir()
        (tmp_path / "topology.bin").write_bytes(b"not a pickle")
        with pytest.raises(WorkerError, match="topology.bin"):
            load_bundle_topology(tmp_path)

    def test_conf_json_errors_name_the_problem(self, tmp_path):
        with pytest.raises(WorkerError, match="has no conf.json"):
            read_topology_conf(tmp_path)
        (tmp_path / "conf.json").write_text("[1, 2]")
        with pytest.raises(WorkerError, match="must hold a JSON object"):
            read_topology_conf(tmp_path)
        (tmp_path / "conf.json").write_text(json.dumps({"topology.workers": "two"}))
        with pytest.raises(WorkerError, match="topology.workers"):
            read_topology_conf(tmp_path)
