"""A topology whose spout forks in open(): the child ignores SIGTERM, leaves the worker's
session and sleeps, holding every descriptor it inherited (the worker's receive socket, so
the slot's port, among them). Its pid is reported as an error: ``forked <pid>``."""
import os
import signal
import time

from tenant import Counting, one_spout


class Forker(Counting):
    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            os.setsid()
            while True:
                time.sleep(60)
        collector.report_error(f"forked {pid}")


def topology():
    return one_spout("forker", Forker())
