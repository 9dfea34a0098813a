"""A topology whose spout allocates 10 MB every 100 ms (and touches it) up to
``test.hog.max.mb`` (a bound of the test's own, should no limit hold it), then holds it."""
import time

from tenant import Counting, one_spout

CHUNK = 10 << 20


class Hog(Counting):
    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.held, self.at = [], 0.0
        self.most = int(conf.get("test.hog.max.mb", 1024)) << 20

    def next_tuple(self):
        now = time.monotonic()
        if now - self.at >= 0.1 and len(self.held) * CHUNK < self.most:
            self.held.append(bytearray(b"\x01") * CHUNK)
            self.at = now
        super().next_tuple()


def topology():
    return one_spout("hog", Hog())
