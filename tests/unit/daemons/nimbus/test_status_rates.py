"""``squall status`` for people: rates over the last minute from the counters in worker
beats (plain functions), and the command against a real nimbus fed with beats."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from squall.cli.status_view import render
from squall.daemons.nimbus.rates import RateHistory, window_rates
from squall.daemons.nimbus.process import NimbusProcess
from squall.daemons.state import ClusterState, SupervisorInfo, WorkerBeat
from support.paths import TOPOLOGIES

T0 = 1_000_000.0


def test_rates_over_the_window_of_steady_counters():
    # executed grows 50/s, emitted 100/s, for 90 s sampled every 3 s: the last minute counts.
    samples = [(T0 + t, (100 * t, 50 * t, 50 * t, 0)) for t in range(0, 91, 3)]
    assert window_rates(samples, now=T0 + 91) == {"emitted": 100.0, "executed": 50.0, "acked": 50.0, "failed": 0.0}
    # A burst more than a minute ago does not count.
    burst = [(T0, (0, 0, 0, 0)), (T0 + 1, (10_000, 0, 0, 0))] + [(T0 + t, (10_000 + t, 0, 0, 0)) for t in range(70, 131, 3)]
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
        history.record("a", {(1, 1): (T0 + t, (t, t, t, t)), (2, 2): (T0 + t, (0, 2 * t, 0, 0))})
    history.record("a", {(1, 1): (T0 + 9, (99, 99, 99, 99))})  # not newer: ignored; (2, 2) unassigned
    rates = history.rates("a", now=T0 + 9)
    assert list(rates) == [(1, 1)] and rates[(1, 1)]["executed"] == pytest.approx(1.0)  # 4 samples: 6..9
    history.record("b", {(1, 1): (T0, (0, 0, 0, 0))})
    history.record("c", {(1, 1): (T0, (0, 0, 0, 0))})
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


# --- against a real nimbus --------------------------------------------------------------

TOPOLOGY = TOPOLOGIES / "words_topo.py"  # words -> count (2 executors)


def squall(conf_path: Path, *args: str, **kw) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SQUALL_CONF": str(conf_path)}
    return subprocess.run([sys.executable, "-m", "squall.cli", *args], env=env, capture_output=True, text=True,
                          timeout=60, **kw)


@pytest.mark.cluster
def test_status_shows_rates_from_beats_and_watch_redraws(cluster_conf, tmp_path):
    nimbus = NimbusProcess({**cluster_conf, "nimbus.monitor.freq.secs": 0.3}, tmp_path / "nimbus")
    nimbus.start(leader=True)
    state = ClusterState(cluster_conf).start()
    try:
        now = time.time()
        state.register_supervisor(SupervisorInfo("s1", "s1.example", [7001], now, [], now))
        conf = nimbus.client_conf_path  # the CLI: admin token and CA
        assert squall(conf, "submit", str(TOPOLOGY), "--name", "words").returncode == 0
        tid = state.topology_ids()[0]
        assignment = state.assignment(tid)
        execs = assignment.executors_on("s1", 7001)
        # Task ids: the acker (1), count (2, 3), words (4), one executor each.
        assert sorted(execs) == [(1, 1), (2, 2), (3, 3), (4, 4)]

        def beat(t: float, n: int) -> None:
            # What a worker writes: totals since start, read at t. Each count executor executes
            # n, words emits n.
            stats = [{"executor": list(ex), "emitted": {"default": n} if ex == (4, 4) else {},
                      "executed": n if ex in ((2, 2), (3, 3)) else 0, "acked": 0, "failed": 0} for ex in execs]
            state.worker_beat(WorkerBeat(tid, "s1", 7001, time.time(), execs, 30.0,
                                         {"executors": stats, "time": t}))

        start = time.time() - 20
        beat(start, 1000)
        first = json.loads(squall(conf, "status", "words", "--json").stdout)
        count = next(c for c in first["components"] if c["id"] == "count")
        assert count["executed"] == 2000 and count["rates"] is None  # one sample: no rate yet
        beat(start + 10, 1000 + 2500)  # 250 tuples/s over the 10 s between the two reads
        st = json.loads(squall(conf, "status", "words", "--json").stdout)
        count = next(c for c in st["components"] if c["id"] == "count")
        words = next(c for c in st["components"] if c["id"] == "words")
        assert count["rates"]["executed"] == 500.0 and words["rates"]["emitted"] == 250.0
        assert count["executors"][0]["rates"]["executed"] == 250.0 and st["rate_window_secs"] == 60.0
        # Only additions: every key the JSON had before is still there.
        assert {"emitted", "executed", "acked", "failed", "executors", "last_error", "kind"} <= set(count)

        human = squall(conf, "status", "words").stdout
        row = next(line for line in human.splitlines() if line.startswith("count (bolt)"))
        assert row.split()[-9:-1] == ["0", "0", "7,000", "500", "0", "0", "0", "0"]

        # --watch redraws until Ctrl-C, then exits 0.
        env = {**os.environ, "SQUALL_CONF": str(conf)}
        proc = subprocess.Popen([sys.executable, "-m", "squall.cli", "status", "words", "--watch",
                                 "--interval", "0.5"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        try:
            time.sleep(4)
            beat(start + 20, 1000 + 5000)
            time.sleep(2.5)
        finally:
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=20)
        assert proc.returncode == 0, err
        frames = out.split("every 0.5s, Ctrl-C to stop")
        assert len(frames) >= 4, out
        assert "7,000" in frames[1] and "12,000" in frames[-1], out  # the later frames saw the new beat
        assert "Traceback" not in err

        usage = squall(conf, "status", "words", "--watch", "--json")
        assert usage.returncode == 2 and "--watch" in usage.stderr
    finally:
        state.close()
        assert nimbus.stop() == 0, nimbus.log_tail()
