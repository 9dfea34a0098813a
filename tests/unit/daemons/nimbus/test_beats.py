"""The leader's table of what supervisors reported, on a plain clock: newest beats win and
are timed by nimbus, a report is the supervisor's whole picture, bounds hold, and a worker of
an earlier squall beating in ZooKeeper counts too."""
from __future__ import annotations

from squall.daemons.nimbus.beats import BeatTable, Heard
from squall.daemons.reports import ReportedBeat, SupervisorReport
from squall.daemons.state import WorkerBeat
from squall.runtime.stats import ExecutorStats, WorkerStats


def acked_stats(executor: tuple[int, int], acked: int) -> WorkerStats:
    return WorkerStats(executors=[ExecutorStats("c", executor, "bolt", acked=acked)])


def beat(port: int, time: float, topology: str = "t", node: str = "s1", stats=None) -> ReportedBeat:
    return ReportedBeat(topology, node, port, time, [(port, port)], 1.0,
                        stats='{"executors":[1]}' if stats is None else stats)


def report(*beats: WorkerBeat, node: str = "s1") -> SupervisorReport:
    return SupervisorReport(node, 0.0, list(beats))


def test_a_beat_is_seen_when_its_time_advances_not_when_it_is_repeated():
    table = BeatTable()
    assert table.take(report(beat(1, 10.0)), now=500.0) == 1
    table.take(report(beat(1, 10.0)), now=520.0)  # the same beat again: the worker is stuck
    assert table.heard("t")[("s1", 1)].seen == 500.0
    table.take(report(beat(1, 9.0)), now=525.0)  # an older one (a late retry) changes nothing
    assert table.heard("t")[("s1", 1)] == Heard(beat(1, 10.0), 500.0)
    table.take(report(beat(1, 11.0)), now=530.0)
    assert table.heard("t")[("s1", 1)] == Heard(beat(1, 11.0), 530.0)
    assert table.reported_at() == {"s1": 530.0}


def test_a_slot_missing_from_a_report_has_no_worker_any_more():
    table = BeatTable()
    table.take(report(beat(1, 1.0), beat(2, 1.0, topology="u")), now=1.0)
    table.take(report(beat(3, 1.0, node="s2"), node="s2"), now=1.0)
    table.take(report(beat(1, 2.0)), now=2.0)  # s1's worker of "u" ended
    assert table.heard("u") == {}
    assert set(table.heard("t")) == {("s1", 1), ("s2", 3)}  # another supervisor's slot stays
    assert table.beats("t")[("s1", 1)].time == 2.0


def test_stats_left_out_keep_the_last_ones_heard():
    table = BeatTable()
    table.take(report(beat(1, 1.0, stats='{"executors":[{"executor":[1,1],"acked":4}]}')), now=1.0)
    table.take(report(beat(1, 2.0, stats="")), now=2.0)
    assert table.beats("t")[("s1", 1)].stats.executors[0].acked == 4  # decoded for a status
    assert table.beats("t")[("s1", 1)].time == 2.0


def test_bounds_refuse_and_count_never_grow():
    table = BeatTable(max_supervisors=1, max_slots=2)
    assert table.take(report(beat(1, 1.0), beat(2, 1.0), beat(3, 1.0)), now=1.0) == 2
    assert table.counts["refused:slots"] == 1
    assert table.take(report(beat(9, 1.0, node="s2"), node="s2"), now=1.0) == 0
    assert table.counts["refused:supervisors"] == 1 and set(table.reported_at()) == {"s1"}
    big = BeatTable(max_stats_bytes=25)  # room for one stats text of 18 characters
    big.take(report(beat(1, 1.0)), now=1.0)
    big.take(report(beat(2, 1.0, node="s2"), node="s2"), now=1.0)
    assert big.heard("t")[("s2", 2)].beat.stats == "" and big.counts["stats_dropped"] == 1
    assert big.heard("t")[("s1", 1)].beat.stats  # the first one's stats stay
    big.take(report(beat(1, 2.0, stats=""), node="s1"), now=2.0)  # s1's worker went
    big.take(report(node="s1"), now=3.0)
    big.take(report(beat(2, 3.0, node="s2"), node="s2"), now=3.0)
    assert big.heard("t")[("s2", 2)].beat.stats  # its room was given back


def test_retain_forgets_removed_topologies_and_unregistered_supervisors():
    table = BeatTable()
    table.take(report(beat(1, 1.0), beat(2, 1.0, topology="gone")), now=1.0)
    table.take(report(beat(3, 1.0, node="s2"), node="s2"), now=1.0)
    table.retain(["t"], ["s1"])
    assert set(table.heard("t")) == {("s1", 1)} and table.heard("gone") == {}
    assert set(table.reported_at()) == {"s1"}
    table.take(report(beat(1, 2.0), beat(2, 2.0, topology="gone")), now=2.0)  # it comes back
    assert len(table.seen_times()) == 2


def test_silence_restarts_and_a_new_leadership_forgets():
    table = BeatTable()
    table.take(report(beat(1, 1.0)), now=1.0)
    table.restart_silence(now=50.0)
    assert table.heard("t")[("s1", 1)].seen == 50.0 and table.reported_at() == {"s1": 50.0}
    table.clear()
    assert table.heard("t") == {} and table.reported_at() == {} and table.seen_times() == []


def test_beats_of_earlier_workers_from_zookeeper_count_until_they_go():
    table = BeatTable()
    old = WorkerBeat("t", "old", 5, 1.0, [(5, 5)], 1.0, acked_stats((5, 5), 2))
    table.take_legacy("t", {("old", 5): old}, now=10.0)
    assert table.heard("t")[("old", 5)].beat.counters == {(5, 5): (0, 0, 2, 0, 0, 0, 0)}
    assert table.heard("t")[("old", 5)].seen == 10.0
    table.take(report(beat(1, 1.0)), now=11.0)
    table.take_legacy("t", {}, now=12.0)  # the old worker removed its beat: it stopped
    assert set(table.heard("t")) == {("s1", 1)}  # a reported slot is not the legacy read's to drop


def test_zookeeper_is_read_for_slots_no_report_covers_with_stats_and_only_those():
    table = BeatTable()
    table.take(report(beat(1, 1.0), beat(2, 1.0, stats="")), now=1.0)  # 2: a worker writing no stats
    assert not table.wants_legacy("t", [("s1", 1)])
    assert table.wants_legacy("t", [("s1", 1), ("s1", 2)])
    assert table.wants_legacy("t", [("s9", 1)])  # a supervisor that does not report (an earlier squall)
    old = WorkerBeat("t", "s9", 1, 5.0, [(1, 1)], 1.0, acked_stats((1, 1), 2))
    table.take_legacy("t", {("s9", 1): old}, now=2.0)
    assert table.wants_legacy("t", [("s9", 1)])  # still: what ZooKeeper holds must be read every round
    newer = WorkerBeat("t", "s9", 1, 6.0, [(1, 1)], 1.0)
    table.take_legacy("t", {("s9", 1): newer}, now=3.0)
    heard = table.heard("t")[("s9", 1)]
    assert heard.seen == 3.0 and heard.beat.decoded().stats.executors[0].acked == 2  # stats carried
    table.retain(["u"], ["s1"])
    assert table.wants_legacy("t", [("s1", 1)])
