"""The chaos suite's topology: a durable source of ids -> relay -> store, acked end to end.

* ``ids`` (spout) sends ids ``0 .. chaos.ids - 1`` at ``chaos.rate`` per second. Ids whose
  tuple tree completed are committed to a SQLite ledger (``<chaos.dir>/ledger.sqlite``), like
  a consumer's committed offsets: a spout restarted anywhere reopens the ledger and sends
  only ids that were never acked (an ack not yet committed when its worker died is sent
  again: at-least-once). A failed or timed-out id is sent again.
* ``relay`` (bolt, shuffle) passes each id on, anchored, with its own task id.
* ``store`` (bolt, fields grouping on the id) appends ``id relay-task store-task unix-time``
  to ``<chaos.dir>/store-<task>-<pid>.txt`` (flushed before the ack), so the harness can
  count every id, every duplicate, and when each task last processed something.

The files live in the harness's directory; this module is shipped as the topology's code.
"""
from __future__ import annotations

import os
import sqlite3
import time
from collections import deque

from squall import Bolt, Spout, TopologyBuilder

COMMIT_EVERY = 200  # acks per ledger commit
COMMIT_SECS = 0.2  # ... or this long after the first uncommitted ack


def open_ledger(path: str) -> sqlite3.Connection:
    db = sqlite3.connect(path, timeout=30, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("CREATE TABLE IF NOT EXISTS acked (id INTEGER PRIMARY KEY)")
    return db


class DurableIds(Spout):
    def open(self, conf, context, collector):
        self.collector = collector
        self.db = open_ledger(os.path.join(conf["chaos.dir"], "ledger.sqlite"))
        self.done = {row[0] for row in self.db.execute("SELECT id FROM acked")}
        self.total = int(conf["chaos.ids"])
        self.next_id = 0  # ids below it were sent (or acked before this spout opened)
        self.replay: deque[int] = deque()
        self.gap = 1.0 / float(conf["chaos.rate"])
        self.next_at = time.monotonic()
        self.uncommitted: list[int] = []
        self.first_uncommitted = 0.0

    def next_tuple(self):
        self._commit(False)
        now = time.monotonic()
        if now < self.next_at:
            return
        # Catch up after a pause, but never by more than 0.1 s worth of ids at once.
        self.next_at = max(self.next_at + self.gap, now - 0.1)
        if self.replay:
            i = self.replay.popleft()
        else:
            while self.next_id < self.total and self.next_id in self.done:
                self.next_id += 1
            if self.next_id >= self.total:
                return
            i, self.next_id = self.next_id, self.next_id + 1
        self.collector.emit([i], msg_id=i)

    def ack(self, msg_id):
        if not self.uncommitted:
            self.first_uncommitted = time.monotonic()
        self.uncommitted.append(msg_id)
        self._commit(False)

    def fail(self, msg_id):
        self.replay.append(msg_id)

    def _commit(self, force):
        if not self.uncommitted:
            return
        if not force and len(self.uncommitted) < COMMIT_EVERY and \
                time.monotonic() - self.first_uncommitted < COMMIT_SECS:
            return
        self.db.execute("BEGIN")
        self.db.executemany("INSERT OR IGNORE INTO acked (id) VALUES (?)", [(i,) for i in self.uncommitted])
        self.db.execute("COMMIT")
        self.uncommitted = []

    def close(self):
        self._commit(True)
        self.db.close()

    def declare_output_fields(self, declarer):
        declarer.declare(["id"])


class Relay(Bolt):
    def prepare(self, conf, context, collector):
        self.collector = collector
        self.task = context.this_task_id

    def execute(self, tuple):
        self.collector.emit([tuple.values[0], self.task], anchors=tuple)
        self.collector.ack(tuple)

    def declare_output_fields(self, declarer):
        declarer.declare(["id", "relay"])


class Store(Bolt):
    def prepare(self, conf, context, collector):
        self.collector = collector
        self.task = context.this_task_id
        path = os.path.join(conf["chaos.dir"], f"store-{self.task}-{os.getpid()}.txt")
        self.out = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in cleanup

    def execute(self, tuple):
        self.out.write(f"{tuple.values[0]} {tuple.values[1]} {self.task} {time.time():.3f}\n")
        self.out.flush()
        self.collector.ack(tuple)

    def cleanup(self):
        self.out.close()

    def declare_output_fields(self, declarer):
        pass


def topology():
    builder = TopologyBuilder()
    builder.set_spout("ids", DurableIds(), 1)
    builder.set_bolt("relay", Relay(), 2).shuffle("ids")
    builder.set_bolt("store", Store(), 2).fields("relay", ["id"])
    return builder.build()


CONFIG = {"topology.workers": 3, "topology.max.spout.pending": 500, "topology.message.timeout.secs": 10}
