"""A stateful topology whose state can never be restored, on a real cluster: every recovery
fails at once. Before, the checkpoint spout sent the next ROLLBACK as fast as barriers went
round (34,426 "checkpoint failed; rolling back" lines, 14.5 MB of log, in 2.5 minutes); now
recoveries back off (1, 2, 4 ... 30 s apart) and the log says a repeated line once per 10 s
with how many it held back."""
from __future__ import annotations

import re
import time
from pathlib import Path

TOPOLOGY = '''\
from squall import StatefulBolt, TopologyBuilder
from squall.testing.components import FixedTupleSpout


class Ledger(StatefulBolt):
    def init_state(self, state):
        raise ValueError("the ledger cannot be read")

    def execute(self, tup):
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        declarer.declare([])


def topology():
    builder = TopologyBuilder()
    builder.set_spout("rows", FixedTupleSpout("rollback-rows", [[i] for i in range(100)], ["n"]), 1)
    builder.set_bolt("ledger", Ledger(), 1).shuffle("rows")
    return builder.build()
'''
CONFIG = {"topology.state.checkpoint.interval.ms": 100, "topology.workers": 1}
WATCH_SECS = 15.0
LINE = "checkpoint failed; rolling back"


def test_a_state_that_cannot_be_restored_backs_off_and_logs_little(start_cluster, tmp_path: Path):
    cluster = start_cluster(supervisors=1, slots=1)
    app = tmp_path / "app"
    app.mkdir()
    (app / "ledger.py").write_text(TOPOLOGY)
    overrides = [arg for key, value in CONFIG.items() for arg in ("-c", f"{key}={value}")]
    submitted = cluster.cli("submit", str(app / "ledger.py"), *overrides)
    assert submitted.returncode == 0, submitted.stderr
    cluster.wait_for(lambda: LINE in cluster.cli("logs", "ledger", "-n", "1000").stdout, 60, "a first rollback")
    time.sleep(WATCH_SECS)
    log = cluster.cli("logs", "ledger", "-n", "100000", timeout=120).stdout
    lines = [line for line in log.splitlines() if LINE in line]
    held = sum(int(m.group(1)) for line in lines if (m := re.search(r"repeated=(\d+)", line)))
    rollbacks = len(lines) + held
    # Backing off from the first failure: 0, 1, 2, 4, 8 s apart: about six within 15 s;
    # and one line per 10 s says so.
    assert rollbacks <= 10, f"{rollbacks} rollbacks in about {WATCH_SECS:g} s:\n" + "\n".join(lines[-5:])
    assert len(lines) <= 3, "\n".join(lines)
    assert "the ledger cannot be read" in str(cluster.client.topology_errors("ledger"))
