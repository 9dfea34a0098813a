"""``squall status`` for people: rates over the last minute from the counters in worker
beats, as plain functions (the command against a real nimbus fed with beats is in
tests/cluster/cli/test_cluster_cli.py)."""
from __future__ import annotations

import pytest

from squall.cli.status_view import render
from squall.daemons.nimbus.rates import RateHistory, window_rates

T0 = 1_000_000.0


def test_rates_over_the_window_of_steady_counters():
    # executed grows 50/s, emitted 100/s, for 90 s sampled every 3 s: the last minute counts.
    samples = [(T0 + t, (100 * t, 50 * t, 50 * t, 0)) for t in range(0, 91, 3)]
    assert window_rates(samples, now=T0 + 91) == {"emitted": 100.0, "executed": 50.0, "acked": 50.0, "failed": 0.0}
    # A burst more than a minute ago does not count.
    burst = [(T0, (0, 0, 0, 0)), (T0 + 1, (10_000, 0, 0, 0))]
    burst += [(T0 + t, (10_000 + t, 0, 0, 0)) for t in range(70, 131, 3)]
    assert window_rates(burst, now=T0 + 131)["emitted"] == pytest.approx(1.0)


def test_rates_start_over_when_a_worker_restarts_and_vanish_when_beats_stop():
    before = [(T0 + t, (0, 1000 + 10 * t, 0, 0)) for t in range(0, 30, 3)]
    after = [(T0 + 30 + t, (0, 20 * t, 0, 0)) for t in range(0, 15, 3)]  # counters from zero again
    assert window_rates(before + after, now=T0 + 45)["executed"] == pytest.approx(20.0)
    assert window_rates(before + after[:1], now=T0 + 31) is None  # one sample since the restart
    assert window_rates(before, now=T0 + 27 + 61) is None  # the worker stopped beating a minute ago
    assert window_rates(before[:1], now=T0) is None


def test_history_is_bounded_and_forgets_what_is_gone():
    history = RateHistory(window=60, max_samples=4, max_topologies=2)
    for t in range(10):
        history.add("a", {(1, 1): (T0 + t, (t, t, t, t)), (2, 2): (T0 + t, (0, 2 * t, 0, 0))})
    history.add("a", {(1, 1): (T0 + 9, (99, 99, 99, 99))})  # not newer: ignored
    rates = history.rates("a", now=T0 + 9)
    assert rates[(1, 1)]["executed"] == pytest.approx(1.0)  # 4 samples: 6..9
    history.add("a", {(1, 1): (T0 + 100, (100, 100, 100, 100))})  # a minute on: the old samples go
    assert history.rates("a", now=T0 + 100)[(1, 1)] is None  # one sample left in the window
    history.forget_stale(now=T0 + 135)  # (2, 2) stopped beating more than two windows ago
    assert list(history.rates("a", now=T0 + 135)) == [(1, 1)]
    history.add("b", {(1, 1): (T0, (0, 0, 0, 0))})
    history.add("c", {(1, 1): (T0, (0, 0, 0, 0))})
    assert history.rates("a", now=T0 + 9) == {}  # the least recently updated topology went first
    history.retain(["c"])
    assert history.rates("b", now=T0) == {} and list(history.rates("c", now=T0)) == [(1, 1)]


def test_table_shows_totals_and_rates():
    st = {"name": "words", "id": "words-1", "status": "active", "workers": [{}], "requested_workers": 1,
          "executors": 1, "uptime": 75, "rate_window_secs": 60.0, "components": [
              {"id": "count", "kind": "bolt", "emitted": 0, "executed": 1234567, "acked": 1234567, "failed": 3,
               "rates": {"emitted": 0.0, "executed": 1500.4, "acked": 1500.4, "failed": 0.05},
               "executors": [{"executor": [1, 1], "host": "h", "port": 7000, "uptime": 75, "emitted": 0,
                              "executed": 1234567, "acked": 1234567, "failed": 3, "rates": None}]}]}
    lines = render(st).splitlines()
    assert lines[1].split() == ["COMPONENT", "EXECUTOR", "HOST:PORT", "UPTIME", "EMITTED", "EMIT/S", "EXECUTED",
                                "EXEC/S", "ACKED", "ACK/S", "FAILED", "FAIL/S", "DROPPED"]
    assert lines[2].split()[-9:-1] == ["0", "0", "1,234,567", "1,500", "1,234,567", "1,500", "3", "0.1"]
    assert lines[3].split()[-9:-1] == ["0", "-", "1,234,567", "-", "1,234,567", "-", "3", "-"]
    assert "per second over the last 1m0s" in lines[-1]
