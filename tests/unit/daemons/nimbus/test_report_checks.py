"""The leader's checks of a supervisor's report: order (no replays), and counters that
neither run backwards nor jump beyond what a rate allows."""
from __future__ import annotations

import pytest

from squall.daemons.nimbus.report_checks import MAX_RATE, SLACK, ReportChecks, ReportRefused
from squall.daemons.reports import ReportedBeat, SupervisorReport


def report(counters: int, uptime: float = 10.0, sid: str = "s1", port: int = 6700) -> SupervisorReport:
    beat = ReportedBeat(topology_id="t-1", node=sid, port=port, time=0.0, executors=[(1, 1)], uptime=uptime,
                        counters={(1, 1): (counters, counters, counters, 0)})
    return SupervisorReport(sid, 0.0, [beat])


def age(_topology: str) -> float:
    return 3600.0


def take(checks: ReportChecks, rep: SupervisorReport, order: tuple[int, int], now: float) -> None:
    checks.check(rep, order, now, age)
    checks.taken(rep, order, now)


def test_a_replayed_report_is_refused():
    checks = ReportChecks()
    take(checks, report(10), (1000, 1), 0.0)
    take(checks, report(20), (1000, 2), 5.0)
    for order in ((1000, 2), (1000, 1)):
        with pytest.raises(ReportRefused, match="not after the last one taken"):
            checks.check(report(30), order, 10.0, age)
    take(checks, report(30), (2000, 1), 10.0)  # the supervisor restarted: another run counts afresh
    take(checks, report(31), (1500, 1), 15.0)  # even one whose clock went back (its node says so)
    checks.check(report(1, sid="s2"), (1, 1), 10.0, age)  # others have their own order


def test_counters_may_not_run_backwards_or_jump():
    checks = ReportChecks()
    take(checks, report(1_000_000, uptime=100), (1, 1), 0.0)
    with pytest.raises(ReportRefused, match="moved backwards"):
        checks.check(report(999_999, uptime=105), (1, 2), 5.0, age)
    with pytest.raises(ReportRefused, match="more than"):  # 3,000,000,000,000 emitted in 5 s
        checks.check(report(3_000_000_000_000, uptime=105), (1, 2), 5.0, age)
    most = 1_000_000 + MAX_RATE * 5 + SLACK
    take(checks, report(most, uptime=105), (1, 3), 5.0)  # as fast as the rate allows: taken
    # The worker started again (its uptime fell): counts from zero, bounded by its uptime.
    with pytest.raises(ReportRefused, match="after 2s of uptime"):
        checks.check(report(MAX_RATE * 10, uptime=2), (1, 4), 10.0, age)
    take(checks, report(5, uptime=1), (1, 4), 10.0)


def test_no_worker_is_older_than_its_topology():
    checks = ReportChecks()
    with pytest.raises(ReportRefused, match="its topology is 60s old"):
        checks.check(report(1, uptime=100_000), (1, 1), 0.0, lambda _t: 60.0)
    checks.check(report(1, uptime=100), (1, 1), 0.0, lambda _t: 60.0)  # within the clocks' slack


def test_what_is_remembered_is_bounded():
    checks = ReportChecks(max_supervisors=10)
    for i in range(50):
        take(checks, report(1, sid=f"s{i}"), (1, 1), 0.0)
    assert len(checks._order) == 10 and len(checks._workers) == 10


def test_time_and_latency_counters_have_bounds_of_their_own():
    """Execute time and complete latency sums grow far faster than counts (microseconds):
    a real worker's are taken; time beyond one thread's or latency beyond a day a tree is not."""
    def timed(busy_us: int, complete_us: int, completed: int) -> SupervisorReport:
        beat = ReportedBeat(topology_id="t-1", node="s1", port=6700, time=0.0, executors=[(1, 1)], uptime=10.0,
                            counters={(1, 1): (completed, 0, completed, 0, busy_us, complete_us, completed)})
        return SupervisorReport("s1", 0.0, [beat])

    checks = ReportChecks()
    # 10 s of a busy thread, 100,000 trees of 2 s each: far above MAX_RATE, and real
    checks.check(timed(10_000_000, 200_000_000_000, 100_000), (1, 1), 0.0, age)
    with pytest.raises(ReportRefused, match="busy"):
        checks.check(timed(3_000_000_000_000, 0, 0), (1, 1), 0.0, age)
    with pytest.raises(ReportRefused, match="complete latency"):
        checks.check(timed(0, 3_000_000_000_000, 1), (1, 1), 0.0, age)
