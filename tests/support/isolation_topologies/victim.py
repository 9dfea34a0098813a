"""The topology another tenant snoops on: it keeps a secret in its worker's directory and a
count in embedded state (so it has a state directory on the host)."""
from pathlib import Path

from tenant import one_spout

from squall import StatefulSpout

SECRET = "victim-secret-0123456789"


class Ticks(StatefulSpout):
    def open(self, conf, context, collector):
        self.collector = collector
        Path("victim-secret.txt").write_text(SECRET)  # the cwd is the worker's own directory

    def init_state(self, state):
        self.state = state
        self.n = state.get("n", 0)

    def next_tuple(self):
        self.n += 1
        self.collector.emit([self.n])

    def pre_prepare(self, txid):
        self.state.put("n", self.n)

    def declare_output_fields(self, declarer):
        declarer.declare(["n"])


def topology():
    return one_spout("ticks", Ticks())


CONFIG = {"topology.state.provider": "embedded"}
