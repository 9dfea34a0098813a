"""Stateful topologies in local mode: exactly-once state updates through failures and
rollbacks, acks after commits, stateful windows, restarts, and what is refused."""
import collections
import time

import pytest

from squall import Bolt, Duration, LocalCluster, StatefulBolt, StatefulWindowedBolt, TopologyBuilder, TopologyError
from squall.loader import load_module
from squall.state.inspect import read_record
from squall.testing.components import FixedTupleSpout, PositionedRowSpout, Recorder
from squall.testing.state import committed_component, wait_committed
from squall.testing.waiting import wait_for
from support.paths import CLUSTER_TOPOLOGIES, REPO

KC = load_module(CLUSTER_TOPOLOGIES / "keyed_count.py")
MEMORY = {"topology.state.provider": "memory"}


def unique(prefix):
    return f"{prefix}-{time.monotonic_ns()}"


def spout_done(conf, name, n, tasks=2):
    return lambda txid: sum(s.get("offset", 0) >= n for s in committed_component(conf, name, "events", tasks, txid)) == tasks


def run_keyed(name, n, keys, extra):
    conf = {**KC.CONFIG, "keyed.events": n, "keyed.keys": keys, **extra}
    with LocalCluster() as cluster:
        cluster.submit(name, conf, KC.topology())
        record = wait_committed(MEMORY, name, spout_done(MEMORY, name, n), 60)
        errors = cluster.errors(name)
    counts = collections.Counter()
    for part in committed_component(MEMORY, name, "count", 3, record.restore_point()):
        counts.update(part)
    return dict(counts), record, errors


def test_exactly_once_counts_through_failed_tuples_and_exceptions_on_two_workers():
    n, keys = 3000, 23
    counts, record, errors = run_keyed(unique("eo"), n, keys, {
        "topology.workers": 2, "keyed.fail.every": 401, "keyed.raise.every": 577})
    assert counts == KC.reference(n, keys)
    assert record.recoveries >= 2, record  # the first INIT, then rollbacks caused by the failures
    assert "injected failure" in str(errors.get("count"))


class CountOnce(StatefulBolt):
    def execute(self, t):
        self.state.put(t["w"], self.state.get(t["w"], 0) + 1)
        self.collector.ack(t)


def test_plain_spouts_are_acked_only_after_a_commit_covers_their_tuples():
    name = unique("plain")
    rows = [[f"w{i % 5}"] for i in range(500)]
    b = TopologyBuilder()
    b.set_spout("rows", FixedTupleSpout(name, rows, ["w"]))
    b.set_bolt("count", CountOnce()).fields("rows", ["w"])
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
    for i, ts, v in rows[:-1]:
        want[(ts // 10 + 1) * 10] += v
    with LocalCluster() as cluster:
        cluster.submit(name, {"topology.state.checkpoint.interval.ms": 100, "topology.max.spout.pending": 50,
                              "topology.message.timeout.secs": 60}, b.build())

        def summed(txid):
            state = committed_component(MEMORY, name, "sums", 1, txid)[0]
            return {k: v for k, v in state.items() if k != "__window__"} == dict(want)
        record = wait_committed(MEMORY, name, summed, 60, "every window summed once")
    assert record.recoveries >= 2


@pytest.mark.parametrize("provider", ["embedded", "redis"])
def test_state_survives_killing_and_resubmitting_the_topology(provider, tmp_path, request):
    name = unique("again")
    if provider == "redis":
        store = {"topology.state.provider": "redis",
                 "topology.state.redis.url": request.getfixturevalue("redis_server").url}
    else:
        store = {"topology.state.provider": "embedded", "supervisor.state.dir": str(tmp_path)}
    conf = {**KC.CONFIG, **store, "keyed.events": 600, "keyed.keys": 7}
    before = 0
    for run in (1, 2):
        with LocalCluster() as cluster:
            cluster.submit(name, conf, KC.topology())
            done = spout_done(store, name, 600)
            # This run's own checkpoints: after its INIT (one per start), past the last run's.
            record = wait_committed(store, name, lambda txid: txid > before and done(txid), 60)
            assert read_record(store, name).recoveries == run
            before = record.restore_point() + 2
            wait_committed(store, name, lambda txid: txid >= before, 30)  # more checkpoints: nothing more counted
        counts = collections.Counter()
        for part in committed_component(store, name, "count", 3, read_record(store, name).restore_point()):
            counts.update(part)
        assert dict(counts) == KC.reference(600, 7)
    if provider == "embedded":
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
    b.set_bolt("c", CountOnce()).shuffle("b")
    with pytest.raises(TopologyError, match="cycle"):
        b.build()
    b = TopologyBuilder()
    b.set_spout("s", FixedTupleSpout("x", [[1]], ["w"]))
    b.set_bolt("lonely", CountOnce())
    with pytest.raises(TopologyError, match="subscribes to nothing"):
        b.build()


def test_the_examples_run():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, str(REPO / "examples" / "stateful_counter.py"), "--events", "3000",
                          "--fail-every", "1000"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "counted 3,000 of 3,000 events" in out.stdout and "keys counted wrong: 0" in out.stdout
    from squall.checks import check_runnable
    from squall.config import build_config

    words = load_module(REPO / "examples" / "rolling_top_words.py")
    check_runnable(words.topology(), build_config(words.CONFIG, user_file=False))


def test_a_store_that_stops_answering_costs_rollbacks_not_counts(tmp_path):
    """Redis frozen (SIGSTOP) mid-run: checkpoints fail and roll back until it answers again."""
    import os
    import signal

    from squall.testing.redis import RedisServer

    n, keys, name = 4000, 11, unique("frozen")
    with RedisServer(tmp_path / "redis") as redis:
        store = {"topology.state.provider": "redis", "topology.state.redis.url": redis.url,
                 "topology.state.redis.timeout.secs": 0.5}
        conf = {**KC.CONFIG, **store, "keyed.events": n, "keyed.keys": keys, "keyed.rate": 500}
        with LocalCluster() as cluster:
            cluster.submit(name, conf, KC.topology())
            wait_committed(store, name, lambda txid: txid >= 2, 30, "checkpoints committing")
            os.kill(redis.proc.pid, signal.SIGSTOP)
            try:
                time.sleep(1.5)
            finally:
                os.kill(redis.proc.pid, signal.SIGCONT)
            record = wait_committed(store, name, spout_done(store, name, n), 60)
            errors = cluster.errors(name)
        counts = collections.Counter()
        for part in committed_component(store, name, "count", 3, record.restore_point()):
            counts.update(part)
    assert dict(counts) == KC.reference(n, keys)
    assert "redis state" in str(errors)  # the freeze was felt (and reported), not counted
