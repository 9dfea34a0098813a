"""A topology whose spout opens TCP connections to ZooKeeper (its address is in every
worker's config) until ZooKeeper refuses more from this address, holds them, and tops them up
every second: all a tenant can hold. It reports how many it held, once: ``held N``."""
import socket
import time

from tenant import Counting, one_spout


def _refused(sock):
    """ZooKeeper over its bound for an address accepts, then closes at once."""
    sock.settimeout(0.2)
    try:
        return sock.recv(1) == b""
    except socket.timeout:
        return False
    except OSError:
        return True


class ZkHog(Counting):
    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.address = (str(conf["zookeeper.servers"][0]), int(conf["zookeeper.port"]))
        self.held, self.at, self.told = [], 0.0, False
        self.most = int(conf.get("test.zkhog.max", 200))

    def next_tuple(self):
        now = time.monotonic()
        if now - self.at >= 1.0:
            self.at = now
            self.held = [s for s in self.held if not _refused(s) or s.close()]
            while len(self.held) < self.most:
                try:
                    sock = socket.create_connection(self.address, timeout=1.0)
                except OSError:
                    break
                if _refused(sock):
                    sock.close()
                    break
                self.held.append(sock)
            if not self.told and self.held:
                self.told = True
                self.collector.report_error(f"held {len(self.held)}")
        super().next_tuple()


def topology():
    return one_spout("zkhog", ZkHog())
