"""Generated values through a real cluster (tests/cluster/test_values_across_workers.py).

The rows come from the pickle file ``VALUES_ROWS`` names when the topology is built (the
CLI's process), so they ship inside the topology as they are. ``rows`` (a StatefulSpout,
its position in its state) emits row i as ``[i, value]``; ``keep`` (a StatefulBolt in the
other worker) puts each value into its state under i and appends what it received, pickled
(which keeps every type as it is), to ``received-<pid>.pkl`` in ``test.output.dir``.
Both write their pid there, so the test can see that every tuple crossed between workers.
"""
from __future__ import annotations

import os
import pickle
from pathlib import Path

from squall import StatefulBolt, StatefulSpout, TopologyBuilder


def _note_pid(conf, role):
    out = Path(conf["test.output.dir"])
    (out / f"{role}-{os.getpid()}.pid").write_text(str(os.getpid()))
    return out


class Rows(StatefulSpout):
    def __init__(self, rows):
        self.rows = rows

    def open(self, conf, context, collector):
        self.collector = collector
        _note_pid(conf, "rows")

    def init_state(self, state):
        self.state = state
        self.position = state.get("position", 0)

    def next_tuple(self):
        if self.position < len(self.rows):
            self.collector.emit([self.position, self.rows[self.position]], msg_id=self.position)
            self.position += 1

    def pre_prepare(self, txid):
        self.state.put("position", self.position)

    def declare_output_fields(self, declarer):
        declarer.declare(["i", "value"])


class Keep(StatefulBolt):
    def prepare(self, conf, context, collector):
        self.collector = collector
        self.out = _note_pid(conf, "keep") / f"received-{os.getpid()}.pkl"

    def execute(self, t):
        i, value = t.values
        self.state.put(i, value)
        with open(self.out, "ab") as f:
            pickle.dump((i, value), f)
        self.collector.ack(t)


def topology():
    with open(os.environ["VALUES_ROWS"], "rb") as f:
        rows = pickle.load(f)
    b = TopologyBuilder()
    b.set_spout("rows", Rows(rows))
    b.set_bolt("keep", Keep()).shuffle("rows")
    return b.build()
