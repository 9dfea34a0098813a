"""User errors reach the log with their traceback, bounded, starting at the user's code."""
from __future__ import annotations

import structlog

from squall import Bolt, LocalCluster, TopologyBuilder
from squall.cli.errors import render
from squall.logs import MAX_ERROR_TEXT, error_text, last_line
from squall.testing.components import FixedTupleSpout
from squall.testing.waiting import wait_for


def no_moons(n):
    raise ValueError(f"no moons here ({n})")


class Moons(Bolt):
    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        no_moons(tup["n"])

    def declare_output_fields(self, declarer):
        declarer.declare([])


def test_the_log_line_carries_the_traceback() -> None:
    builder = TopologyBuilder()
    builder.set_spout("rows", FixedTupleSpout("error-texts", [[1]], ["n"]), 1)
    builder.set_bolt("moons", Moons(), 1).shuffle("rows")
    with structlog.testing.capture_logs() as logs, LocalCluster() as cluster:
        cluster.submit("moons", {"topology.max.spout.pending": 10}, builder.build())
        wait_for(lambda: cluster.errors("moons").get("moons"), timeout=30, what="an error report")
        reported = cluster.errors("moons")["moons"][0]["error"]
    line = next(e for e in logs if e["event"] == "user code raised")
    assert line["error"] == "ValueError: no moons here (1)"
    trace = line["exception"]
    assert trace.startswith("Traceback (most recent call last):\n  File \"" + __file__)
    assert "in execute\n    no_moons(tup[\"n\"])" in trace and trace.endswith("ValueError: no moons here (1)")
    assert reported == trace


def chained(n):
    """A traceback of ``n`` chained exceptions: long, and not folded by Python."""
    try:
        if n:
            chained(n - 1)
        else:
            raise KeyError("the first")
    except Exception as exc:
        if n == 300:
            raise ZeroDivisionError("division by zero") from exc
        raise RuntimeError(f"level {n}") from exc


def test_a_long_traceback_is_bounded_keeping_both_ends() -> None:
    try:
        chained(300)
    except ZeroDivisionError as exc:
        text = error_text(exc)
    assert len(text) <= MAX_ERROR_TEXT + 80
    assert text.startswith("Traceback (most recent call last):")
    assert "characters left out" in text and last_line(text) == "ZeroDivisionError: division by zero"
    assert error_text("x" * 10) == "x" * 10


def test_squall_errors_prints_tracebacks_or_one_line_each() -> None:
    rows = [{"time": 0, "component": "moons", "task": 2, "host": "h", "port": 6700,
             "error": "Traceback (most recent call last):\n  File \"t.py\", line 3\nValueError: no moons"}]
    text = render(rows)
    assert "moons task 2 on h:6700\n    Traceback (most recent call last):\n" in text
    assert text.endswith("    ValueError: no moons")
    assert render(rows, brief=True).endswith("moons task 2 on h:6700: ValueError: no moons")
    assert render([]) == "no errors reported"
