"""A topology whose spout allocates 10 MB every 100 ms (and touches it) up to
``test.hog.max.mb`` (a bound of the test's own, should no limit hold it), then holds it."""
import time

from squall import Spout, TopologyBuilder
from squall.testing.components import NullBolt

CHUNK = 10 << 20


class Hog(Spout):
    def open(self, conf, context, collector):
        self.collector, self.n, self.held, self.at = collector, 0, [], 0.0
        self.most = int(conf.get("test.hog.max.mb", 1024)) << 20

    def next_tuple(self):
        now = time.monotonic()
        if now - self.at >= 0.1 and len(self.held) * CHUNK < self.most:
            self.held.append(bytearray(b"\x01") * CHUNK)
            self.at = now
        self.n += 1
        self.collector.emit([self.n])

    def declare_output_fields(self, declarer):
        declarer.declare(["n"])


def topology():
    builder = TopologyBuilder()
    builder.set_spout("hog", Hog(), 1)
    builder.set_bolt("sink", NullBolt(), 1).shuffle("hog")
    return builder.build()
