"""Storm's worker API in worker processes: a worker hook that writes a file at the start and
shutdown of each worker and shares a resource with its tasks, a registered metric, and a
metrics consumer that records in files (the test registers it with -c).

numbers (test.numbers reliable tuples) -> count (2 tasks, a "seen" CountMetric; each task
writes which resource its worker's hook gave it). With WORKER_API_HOSTILE=1 in the
submitting environment the topology also has a hook that raises at start and one that
hangs at shutdown.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from squall import Bolt, Spout, TopologyBuilder, WorkerHook
from squall.metrics import CountMetric


class Numbers(Spout):
    def open(self, conf, context, collector):
        self.collector, self.n, self.limit = collector, 0, int(conf["test.numbers"])

    def next_tuple(self):
        if self.n < self.limit:
            self.n += 1
            self.collector.emit([self.n], msg_id=self.n)

    def declare_output_fields(self, declarer):
        declarer.declare(["n"])


class Count(Bolt):
    def prepare(self, conf, context, collector):
        self.collector = collector
        self.seen = context.register_metric("seen", CountMetric(), 0.5)
        record = {"task": context.this_task_id, "pid": os.getpid(), "resource": context.get_resource("hook")}
        (Path(conf["test.output.dir"]) / f"task-{context.this_task_id}.json").write_text(json.dumps(record))

    def execute(self, tup):
        self.seen.incr()
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        pass


class FileHook(WorkerHook):
    """start-<pid>.json at start (port, tasks), shutdown-<pid>.json at shutdown."""

    def start(self, conf, context):
        self.folder, self.port = Path(conf["test.output.dir"]), context.worker_port
        context.set_resource("hook", {"pid": os.getpid(), "port": context.worker_port})
        self._write("start", {"port": context.worker_port, "tasks": context.worker_tasks})

    def shutdown(self):
        self._write("shutdown", {"port": self.port})

    def _write(self, what, record):
        (self.folder / f"{what}-{os.getpid()}.json").write_text(json.dumps({**record, "at": time.time()}))


class RaisesAtStart(WorkerHook):
    def start(self, conf, context):
        raise RuntimeError("hook start failed on purpose")


class HangsAtShutdown(WorkerHook):
    def shutdown(self):
        time.sleep(600)


def topology():
    b = TopologyBuilder()
    b.set_spout("numbers", Numbers())
    b.set_bolt("count", Count(), 2).shuffle("numbers")
    b.add_worker_hook(FileHook())
    if os.environ.get("WORKER_API_HOSTILE") == "1":
        b.add_worker_hook(RaisesAtStart())
        b.add_worker_hook(HangsAtShutdown())
    return b.build()
