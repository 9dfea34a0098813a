"""What a supervisor reports and when, without sockets: beats from the files its workers
leave (hostile input), the retry schedule, and the reporter end to end against a stand-in link."""
from __future__ import annotations

import random

from squall.daemons import local_state
from squall.daemons.local_state import LocalHeartbeat, LocalLayout, StatsFile
from squall.daemons.reports import parse_report
from squall.daemons.supervisor.processes import WorkerProc
from squall.daemons.supervisor.reporter import Reporter, ReportRefused
from squall.daemons.supervisor.reporting import RetrySchedule, worker_beat
from squall.daemons.timers import FakeClock
from squall.runtime.stats import ExecutorStats, WorkerStats


def heartbeat(executors, time: float = 50.0) -> LocalHeartbeat:
    return LocalHeartbeat(time, "claimed-topology", 9999, "w1", 123, frozenset(executors))


def test_a_beat_takes_topology_port_and_executors_from_the_launch_record():
    stats = WorkerStats(49.0, [ExecutorStats("c", (1, 1), "bolt", executed=7), ExecutorStats("c", (7, 9), "bolt")])
    beat = worker_beat("s1", "wc-1-1", 6700, [(1, 1), (2, 2)], heartbeat({(1, 1), (2, 2), (7, 9)}),
                       StatsFile(12.0, stats), launch_time=10.0)
    assert (beat.topology_id, beat.node, beat.port) == ("wc-1-1", "s1", 6700)
    assert beat.executors == [(1, 1), (2, 2)]  # (7, 9) is not this worker's to claim
    assert beat.counters == {(1, 1): (0, 7, 0, 0, 0, 0, 0)} and beat.counters_time == 49.0
    assert (beat.time, beat.uptime, beat.decoded().stats) == (50.0, 12.0, stats)


def test_a_worker_without_stats_still_beats_and_deep_stats_are_left_out(tmp_path):
    beat = worker_beat("s1", "t", 6700, [(1, 1)], heartbeat({(1, 1)}), None, launch_time=40.0)
    assert beat.uptime == 10.0 and beat.stats == "" and beat.counters == {}
    layout = LocalLayout(tmp_path)
    deep = '{"x": ' * 40 + "{}" + "}" * 40
    local_state.write_atomic(layout.stats_file("w1"), ('{"uptime": 1, "stats": ' + deep + "}").encode())
    beat = worker_beat("s1", "t", 6700, [(1, 1)], heartbeat({(1, 1)}), local_state.read_stats(layout, "w1"), 0.0)
    assert beat.stats == "" and beat.executors == [(1, 1)]  # read as typed: nothing of use, nothing sent
    assert worker_beat("s1", "t", 6700, [(1, 1)], None, None, 0.0) is None  # not started yet


def test_retries_come_sooner_than_the_interval_and_back_off():
    schedule = RetrySchedule(5.0, random.Random(1))
    assert schedule.due(0.0)
    delays = [schedule.failed(0.0) for _ in range(6)]
    for delay, base in zip(delays, (0.5, 1, 2, 4, 5, 5)):  # doubling, capped at the interval, +-10%
        assert 0.9 * base <= delay <= 1.1 * base
    schedule.sent(100.0)
    assert schedule.failures == 0 and 104.5 <= schedule.due_at <= 105.5


class Link:
    """Stands in for the HTTP link to nimbus: records what was posted where."""

    def __init__(self, answers):
        self.answers, self.posted = list(answers), []

    def post(self, address, path, body):
        self.posted.append((address, path, parse_report(body, "s1")))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def close(self):
        pass


def make_reporter(tmp_path, answers, leader="10.0.0.2:6627"):
    layout = LocalLayout(tmp_path)
    rec = WorkerProc("w1", 6700, "wc-1-1", [[1, 1], [2, 3]], "d", 1, 1.0, 0.0)
    local_state.write_heartbeat(layout, LocalHeartbeat(7.0, "wc-1-1", 6700, "w1", 1, frozenset({(1, 1), (2, 3)})))
    stats = WorkerStats(5.0, [ExecutorStats("c", (1, 1), "bolt", acked=3)])
    local_state.write_stats(layout, "w1", StatsFile(6.0, stats))
    conf = {"supervisor.heartbeat.frequency.secs": 5, "nimbus.host": "127.0.0.1", "nimbus.port": 6627}
    reporter = Reporter(conf, "s1", layout, lambda: [rec], lambda: leader, FakeClock())
    reporter.link = Link(answers)
    return reporter


def test_the_reporter_sends_its_workers_and_follows_a_standby_to_the_leader(tmp_path):
    reporter = make_reporter(tmp_path, [ReportRefused(503, "standby", leader="10.0.0.9:6627"), {"beats": 1}])
    assert reporter.report_once()
    (first, _, report), (second, path, again) = reporter.link.posted
    assert (first, second, path) == ("127.0.0.1:6627", "10.0.0.9:6627", "/supervisors/s1/report")
    assert report == again and [(b.port, b.executors, b.decoded().stats.executors[0].acked)
                                for b in report.beats] == [(6700, [(1, 1), (2, 3)], 3)]
    assert reporter.address == "10.0.0.9:6627" and reporter.counts["sent"] == 1


def test_an_unreachable_nimbus_is_retried_with_the_newest_report_at_the_leader_zookeeper_names(tmp_path):
    reporter = make_reporter(tmp_path, [OSError("connection refused"), {"beats": 1}])
    assert not reporter.report_once()
    assert reporter.address == "10.0.0.2:6627" and reporter.schedule.failures == 1
    local_state.write_heartbeat(reporter.layout, LocalHeartbeat(8.0, "wc-1-1", 6700, "w1", 1, frozenset({(1, 1)})))
    assert reporter.report_once()
    assert reporter.link.posted[-1][2].beats[0].time == 8.0  # built anew: nothing stale queued
    assert reporter.schedule.failures == 0


def test_unusable_worker_files_cost_that_worker_only(tmp_path):
    reporter = make_reporter(tmp_path, [{"beats": 0}])
    LocalLayout(tmp_path).heartbeat_file("w1").write_bytes(b"[" * 100_000)
    assert reporter.report_once()
    assert reporter.link.posted[0][2].beats == [] and reporter.counts["bad_files"] == 1
