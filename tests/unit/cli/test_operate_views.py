"""What the operator commands print: plain functions of nimbus's replies."""
from __future__ import annotations

import re

from squall.cli.errors import render_groups
from squall.cli.live_rates import line, totals
from squall.cli.operate import monitor_rows, render_samples, render_windows
from squall.cli.status_view import render
from squall.daemons.nimbus.status import group_errors


def test_samples_render_one_line_each():
    text = render_samples([{"time": 10.25, "component": "split", "task": 3, "stream": "default", "target": 7,
                            "anchors": {"abc": "10"}, "values": ["w\x1b", 2]}])
    header, row = text.splitlines()
    assert row.split()[1:] == ["split", "3", "default", "7", "abc", '["w\\u001b",', "2]"]


def test_monitor_rows_are_rates_between_two_statuses():
    def st(n):
        return {"components": [{"id": "numbers", "executors": [{}], "emitted": n, "executed": 0, "acked": n,
                                "failed": 0, "execute_latency_ms": None, "complete_latency_ms": 1.5},
                               {"id": "__acker", "executors": [{}], "emitted": 0, "executed": n, "acked": 0,
                                "failed": 0}]}
    [row] = monitor_rows(st(100), st(300), 2.0, None)
    assert row[1:] == ["numbers", "1", "100", "0", "100", "0", "-", "1.500"]
    assert monitor_rows(st(300), st(100), 2.0, None)[0][3] == "0"  # a restart shows as 0, never negative


def test_windows_table_and_the_footer_says_rates_are_missing_only_when_they_are():
    window = {"secs": 600.0, "emitted": 6000, "acked": 6000, "failed": 0, "emitted_per_sec": 10.0,
              "executed_per_sec": 0.0, "acked_per_sec": 10.0, "failed_per_sec": 0.0,
              "execute_latency_ms": None, "complete_latency_ms": 3.25}
    ex = {"executor": [1, 1], "host": "h", "port": 1, "uptime": 5.0, "emitted": 1, "executed": 0, "acked": 1,
          "failed": 0, "dropped": 0, "rates": {"emitted": 1.0, "executed": 0, "acked": 1, "failed": 0}}
    st = {"name": "t", "id": "t-1", "status": "active", "workers": [], "requested_workers": 1, "executors": 1,
          "uptime": 9, "rate_window_secs": 60,
          "components": [{"id": "numbers", "kind": "spout", "executors": [ex], "emitted": 1, "executed": 0,
                          "acked": 1, "failed": 0, "dropped": 0, "rates": ex["rates"],
                          "windows": {"10m": window, "3h": None, "all": {**window, "secs": None}}}]}
    assert render(st).splitlines()[-1] == "rates: per second over the last 1m0s"
    st["components"][0]["executors"][0]["rates"] = None
    assert render(st).splitlines()[-1] == "rates: per second over the last 1m0s ('-': not enough beats yet)"
    rows = render_windows(st).splitlines()
    assert rows[1].split()[:5] == ["numbers", "10m", "(10m0s)", "10", "0"]
    assert rows[1].split()[-5:] == ["-", "3.250", "6,000", "6,000", "0"]
    assert len(rows) == 3  # 10m and all; the 3h window has no figures yet


def test_identical_errors_grouped_newest_first_with_a_count():
    def tb(local_dir: str) -> str:
        return (f'Traceback (most recent call last):\n  File "{local_dir}/topologies/t-1-9/code/app.py", line 3, '
                'in execute\nValueError: E')
    errors = [{"component": "c", "error": tb(f"/var/{host}"), "time": t, "task": task, "host": host, "port": 1}
              for t, task, host in ((5, 2, "h"), (3, 1, "g"), (1, 2, "h"))] + [
        {"component": "c", "error": "other", "time": 4, "task": 1, "host": "g", "port": 2}]
    groups = group_errors(errors)
    assert [(g["error"], g["count"], g["first"], g["last"], g["tasks"], g["workers"]) for g in groups] == [
        (tb("/var/h"), 3, 1, 5, [1, 2], ["g:1", "h:1"]), ("other", 1, 4, 4, [1], ["g:2"])]
    # Nimbus keeps a component's last topology.errors.kept errors: when they are full, older
    # ones were let go and a count is a lower bound, shown as such.
    assert [g["at_least"] for g in group_errors(errors, kept=4)] == [True, True]
    assert [g["at_least"] for g in group_errors(errors, kept=10)] == [False, False]
    text = render_groups(group_errors(errors, kept=4), brief=True).splitlines()
    assert re.search(r"^c tasks 1, 2 on g:1, h:1: 3\+ times, .*: ValueError: E$", text[0]), text
    assert re.search(r"^c task 1 on g:2: 1\+ times, ", text[1]), text
    assert ": once, " in render_groups(group_errors(errors, kept=10), brief=True).splitlines()[1]


def test_live_rates_line_of_a_local_run():
    stats = [{"kind": "spout", "component": "s", "emitted": {"default": 50, "__ack_init": 9}, "acked": 40,
              "failed": 1, "errors": 0},
             {"kind": "bolt", "component": "b", "emitted": {}, "errors": 2}]
    now = totals(stats)
    assert now == (50, 40, 1, 2)
    assert line((0, 0, 0, 0), now, 5.0, 10.0) == ("[   10s] spouts: 10 emitted/s, 8.0 acked/s, 0.2 failed/s "
                                                   "(50 emitted, 40 acked, 1 failed); errors 2")
