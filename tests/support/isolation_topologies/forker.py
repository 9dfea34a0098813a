"""A topology whose spout forks in open(): the child ignores SIGTERM, leaves the worker's
session and sleeps, holding every descriptor it inherited (the worker's receive socket, so
the slot's port, among them). Its pid is reported as an error: ``forked <pid>``."""
import os
import signal
import time

from squall import Spout, TopologyBuilder
from squall.testing.components import NullBolt


class Forker(Spout):
    def open(self, conf, context, collector):
        self.collector, self.n = collector, 0
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            os.setsid()
            while True:
                time.sleep(60)
        collector.report_error(f"forked {pid}")

    def next_tuple(self):
        self.n += 1
        self.collector.emit([self.n])

    def declare_output_fields(self, declarer):
        declarer.declare(["n"])


def topology():
    builder = TopologyBuilder()
    builder.set_spout("forker", Forker(), 1)
    builder.set_bolt("sink", NullBolt(), 1).shuffle("forker")
    return builder.build()
