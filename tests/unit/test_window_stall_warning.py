"""An event-time window that can stall its spouts is warned about at submit, naming the
cause: window span, topology.max.spout.pending and the message timeout."""
from __future__ import annotations

import structlog

from squall import Bolt, Duration, LocalCluster, TopologyBuilder, WindowedBolt
from squall.checks import check_runnable
from squall.config import build_config
from squall.testing.components import FixedTupleSpout


class Windows(WindowedBolt):
    def execute(self, window):
        pass

    def declare_output_fields(self, declarer):
        declarer.declare([])


class Sink(Bolt):
    def declare_output_fields(self, declarer):
        declarer.declare([])


def topology(event_time: bool):
    builder = TopologyBuilder()
    builder.set_spout("rows", FixedTupleSpout("stall-rows", [[1, 0.0]], ["n", "ts"]), 2)
    bolt = Windows().with_window(Duration(5))
    if event_time:
        bolt = bolt.with_timestamp_field("ts").with_lateness(Duration(1))
    builder.set_bolt("windows", bolt, 1).shuffle("rows")
    return builder.build()


CONF = {"topology.max.spout.pending": 500, "topology.message.timeout.secs": 30}


def test_event_time_windows_warn_with_the_numbers() -> None:
    warnings = check_runnable(topology(True), build_config(CONF, user_file=False))
    assert len(warnings) == 1
    text = warnings[0]
    assert text.startswith("windowed bolt 'windows' may stall: an event-time window fires only when")
    assert "the spouts may have 1,000 pending (topology.max.spout.pending 500 x 2 spout tasks)" in text
    assert "above about 91 tuples/s (1,000 in the 11 s a tuple may wait)" in text
    assert "topology.message.timeout.secs (30 s)" in text


def test_processing_time_windows_do_not_stall() -> None:
    assert check_runnable(topology(False), build_config(CONF, user_file=False)) == []


def test_local_submit_logs_the_warning() -> None:
    with structlog.testing.capture_logs() as logs, LocalCluster() as cluster:
        cluster.submit("stall", CONF, topology(True))
    assert any(e["event"].startswith("windowed bolt 'windows' may stall") and e["log_level"] == "warning"
               for e in logs)
