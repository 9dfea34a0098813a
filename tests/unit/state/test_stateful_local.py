"""Stateful topologies in local mode: exactly-once state updates through failures and
rollbacks, acks after commits, stateful windows, restarts, and what is refused (a Redis
store and the examples as scripts are in tests/cluster/state/test_stateful_processes.py)."""
import collections

import pytest

from squall import Bolt, Duration, LocalCluster, StatefulWindowedBolt, TopologyBuilder, TopologyError
from squall.state.inspect import read_record
from squall.testing.components import FixedTupleSpout, PositionedRowSpout, Recorder, StatefulKeyedCount
from squall.testing.state import committed_component, wait_committed
from squall.testing.waiting import wait_for
from support.keyed import KC, committed_counts, run_twice, spout_done, unique

MEMORY = {"topology.state.provider": "memory"}


def run_keyed(name, n, keys, extra):
    conf = {**KC.CONFIG, "keyed.events": n, "keyed.keys": keys, **extra}
    with LocalCluster() as cluster:
        cluster.submit(name, conf, KC.topology())
        record = wait_committed(MEMORY, name, spout_done(MEMORY, name, n), 60)
        errors = cluster.errors(name)
    return committed_counts(MEMORY, name, record.restore_point()), record, errors


def test_exactly_once_counts_through_failed_tuples_and_exceptions_on_two_workers():
    n, keys = 3000, 23
    counts, record, errors = run_keyed(unique("eo"), n, keys, {
        "topology.workers": 2, "keyed.fail.every": 401, "keyed.raise.every": 577})
    assert counts == KC.reference(n, keys)
    assert record.recoveries >= 2, record  # the first INIT, then rollbacks caused by the failures
    assert "injected failure" in str(errors.get("count"))


def test_plain_spouts_are_acked_only_after_a_commit_covers_their_tuples():
    name = unique("plain")
    rows = [[f"w{i % 5}"] for i in range(500)]
    b = TopologyBuilder()
    b.set_spout("rows", FixedTupleSpout(name, rows, ["w"]))
    b.set_bolt("count", StatefulKeyedCount("w")).fields("rows", ["w"])
    with LocalCluster() as cluster:
        cluster.submit(name, {"topology.state.checkpoint.interval.ms": 200, "topology.max.spout.pending": 1000},
                       b.build())
        wait_for(lambda: len(Recorder.get(name + ".acked")) == len(rows), 30, "every row acked")
        record = read_record(MEMORY, name)
        state = committed_component(MEMORY, name, "count", 1, record.restore_point())[0]
    # Acked means counted in a committed checkpoint: read right after the last ack, the
    # committed state already holds every row.
    assert state == {f"w{k}": 100 for k in range(5)}
    assert not Recorder.get(name + ".failed")


class WindowSums(StatefulWindowedBolt):
    """Adds each event-time window's sum of values to its state: counted twice if a window
    ran twice, missed if one were lost."""

    def execute(self, window):
        self.state.put(window.end, self.state.get(window.end, 0) + sum(t["v"] for t in window))


class FlakyRelay(Bolt):
    def prepare(self, conf, context, collector):
        self.collector, self.failed = collector, set()

    def execute(self, t):
        if t["i"] % 37 == 0 and t["i"] not in self.failed:
            self.failed.add(t["i"])
            self.collector.fail(t)
            return
        self.collector.emit(list(t.values), anchors=t)
        self.collector.ack(t)

    def declare_output_fields(self, d):
        d.declare(["i", "ts", "v"])


def test_stateful_windows_keep_their_contents_through_rollbacks():
    name = unique("swin")
    rows = [[i, i // 4, i % 11] for i in range(400)] + [[400, 10_000, 0]]  # the last one closes the windows
    b = TopologyBuilder()
    b.set_spout("rows", PositionedRowSpout(name, rows, ["i", "ts", "v"]))
    b.set_bolt("relay", FlakyRelay()).global_("rows")
    b.set_bolt("sums", WindowSums().with_tumbling_window(Duration(10)).with_timestamp_field("ts")).global_("relay")
    want = collections.Counter()
    for _i, ts, v in rows[:-1]:
        want[(ts // 10 + 1) * 10] += v
    with LocalCluster() as cluster:
        cluster.submit(name, {"topology.state.checkpoint.interval.ms": 100, "topology.max.spout.pending": 50,
                              "topology.message.timeout.secs": 60}, b.build())

        def summed(txid):
            state = committed_component(MEMORY, name, "sums", 1, txid)[0]
            return {k: v for k, v in state.items() if k != "__window__"} == dict(want)
        record = wait_committed(MEMORY, name, summed, 60, "every window summed once")
    assert record.recoveries >= 2


def test_state_survives_killing_and_resubmitting_the_topology(tmp_path):
    name = unique("again")
    run_twice({"topology.state.provider": "embedded", "supervisor.state.dir": str(tmp_path)}, name)
    assert sorted(p.name for p in (tmp_path / name).iterdir() if p.suffix == ".sqlite") == [
        "__checkpoint.0.sqlite", "count.0.sqlite", "count.1.sqlite", "count.2.sqlite",
        "events.0.sqlite", "events.1.sqlite"]


def test_stateful_topologies_that_cannot_work_are_refused():
    with LocalCluster() as cluster:
        with pytest.raises(TopologyError, match="needs ackers"):
            cluster.submit("s1", {"topology.acker.executors": 0}, KC.topology())
    b = TopologyBuilder()
    b.set_spout("s", FixedTupleSpout("x", [[1]], ["w"]))
    b.set_bolt("a", KC.Relay()).shuffle("s").shuffle("b")
    b.set_bolt("b", KC.Relay()).shuffle("a")
    b.set_bolt("c", StatefulKeyedCount("w")).shuffle("b")
    with pytest.raises(TopologyError, match="cycle"):
        b.build()
    b = TopologyBuilder()
    b.set_spout("s", FixedTupleSpout("x", [[1]], ["w"]))
    b.set_bolt("lonely", StatefulKeyedCount("w"))
    with pytest.raises(TopologyError, match="subscribes to nothing"):
        b.build()
