"""Storm's windows and the plot's points, from component totals over time (plain code)."""
from __future__ import annotations

import pytest

from squall.daemons.nimbus.history import (
    MAX_SERIES,
    TIERS,
    CounterHistory,
    RunningTotals,
    Series,
    rate_points,
    summed,
    windows_of,
)


def totals(emitted: float, executed: float = 0, acked: float = 0, failed: float = 0, busy_us: float = 0,
           complete_us: float = 0, completed: float = 0) -> tuple[float, ...]:
    return (emitted, executed, acked, failed, busy_us, complete_us, completed)


def test_windows_rates_and_latencies_from_the_oldest_point_inside_each():
    s = Series()
    for t in range(0, 1201, 5):  # 20 minutes, 100 emitted a second, 10 ms per complete tree
        s.record(float(t), totals(100 * t, acked=100 * t, complete_us=10_000 * 100 * t, completed=100 * t,
                                  executed=50 * t, busy_us=2_000 * 50 * t))
    w = windows_of(s, 1200.0)
    assert w["10m"]["secs"] == 600.0 and w["10m"]["emitted_per_sec"] == 100.0 and w["10m"]["emitted"] == 60_000
    assert w["10m"]["complete_latency_ms"] == 10.0 and w["10m"]["execute_latency_ms"] == 2.0
    assert w["3h"]["secs"] == 1200.0  # younger than the window: what there is
    assert w["all"]["emitted"] == 120_000 and "secs" not in w["all"]


def test_tiers_are_bounded_and_a_day_reaches_back_a_day():
    s = Series()
    for t in range(0, 2 * 86_400, 60):
        s.record(float(t), totals(t))
    for (_step, keep), tier in zip(TIERS, s.tiers):
        assert len(tier) <= keep * 8
    w = windows_of(s, 2 * 86_400 - 60.0)
    assert 86_400 - 900 <= w["1d"]["secs"] <= 86_400 and w["1d"]["emitted_per_sec"] == pytest.approx(1.0)
    points = s.points(2 * 86_400 - 600.0)
    assert points[-1][0] == 2 * 86_400 - 60.0 and len(points) >= 9  # the finest tier covers 10 minutes


def test_totals_survive_a_worker_restart_and_a_rebalance():
    running = RunningTotals()
    running.add("t", {(1, 1): (1.0, (100, 0, 0, 0))}, 1.0)  # the first sample counts what came before
    running.set_components("t", {(1, 1): "spout", (2, 2): "bolt"})
    assert running.by_component("t") == (1.0, {"spout": (100.0, 0, 0, 0, 0, 0, 0)})
    running.add("t", {(1, 1): (2.0, (150, 0, 0, 0)), (2, 2): (2.0, (0, 9, 0, 0, 50, 0, 0))}, 2.0)
    running.add("t", {(1, 1): (3.0, (20, 0, 0, 0))}, 3.0)  # restarted: counters start over
    running.add("t", {(1, 1): (4.0, (20, 0, 0, 0))}, 4.0)  # the same again adds nothing
    assert running.by_component("t") == (4.0, {"spout": (170.0, 0, 0, 0, 0, 0, 0),
                                                "bolt": (0, 9.0, 0, 0, 50.0, 0, 0)})
    # A rebalance: bolt's executor (2, 2) becomes (2, 3); its totals stay with the bolt.
    running.set_components("t", {(1, 1): "spout", (2, 3): "bolt"})
    running.add("t", {(2, 3): (5.0, (0, 4, 0, 0))}, 5.0)
    assert running.by_component("t") == (5.0, {"spout": (170.0, 0, 0, 0, 0, 0, 0),
                                                "bolt": (0, 13.0, 0, 0, 50.0, 0, 0)})
    running.retain(set())
    assert running.by_component("t") == (None, {})


def test_a_late_report_makes_no_dip_in_the_plot():
    """Reports every 5 s at 100 emitted a second, one of them 4 s late; the leader's rounds
    come every 5 s in between. Timed by the reports, every plotted rate is 100 (timed by the
    rounds, the round that no report reached would plot 0, and the next one 200)."""
    running, history = RunningTotals(), CounterHistory()
    running.set_components("t", {(1, 1): "spout"})
    reports = (0.0, 5.0, 14.0, 15.0, 20.0)  # the one due at 10 came at 14
    for round_at in (2.0, 7.0, 12.0, 17.0, 22.0):
        for at in reports:
            if round_at - 5.0 < at <= round_at:
                running.add("t", {(1, 1): (at, (int(100 * at), 0, 0, 0))}, at)
        heard, totals = running.by_component("t")
        history.record("t", totals, heard)
    rows = rate_points(summed(history.points("t", 0.0), ["spout"]))
    assert [r["emitted_per_sec"] for r in rows] == [100.0, 100.0, 100.0]
    assert [r["time"] for r in rows] == [5.0, 15.0, 20.0]


def test_plot_points_rates_between_points_and_the_topology_summed_over_spouts():
    history = CounterHistory()
    for t in (0.0, 5.0, 10.0):
        history.record("t", {"a": totals(10 * t, failed=t), "b": totals(30 * t), "bolt": totals(0)}, t)
    points = history.points("t", 0.0)
    rows = rate_points(summed(points, ["a", "b"]))
    assert [(r["time"], r["emitted_per_sec"], r["failed_per_sec"]) for r in rows] == [(5.0, 40.0, 1.0),
                                                                                      (10.0, 40.0, 1.0)]
    history.retain(set())
    assert history.points("t", 0.0) == {}


def test_series_are_bounded_dropping_the_least_recent_topology():
    history = CounterHistory(max_series=4)
    history.record("old", {"a": totals(1), "b": totals(1)}, 1.0)
    history.record("mid", {"a": totals(1), "b": totals(1)}, 2.0)
    history.record("new", {"a": totals(1)}, 3.0)
    assert history.points("old", 0.0) == {} and set(history.points("mid", 0.0)) == {"a", "b"}
    assert MAX_SERIES >= 1000
