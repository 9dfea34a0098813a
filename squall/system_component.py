"""The ``__system`` component (Storm's SystemBolt): one task, id -1, in every worker of a
topology that registers a metrics consumer (squall.metrics_consumer).

Once a second (a tick) it reads the metrics of every task of its worker whose bucket has
ended, its own worker metrics among them, and sends each task's data points on the
``__metrics`` stream to the consumer bolts: one tuple per task and bucket length, with
fields ``task_info`` ([host, port, component, task, time, bucket secs]) and
``data_points`` ([[name, value], ...]). The tuples carry no message id: a data point lost
with a worker is not replayed, as in Storm.
"""
from __future__ import annotations

import gc
import os
import time
from typing import Any

from squall.components import Bolt
from squall.context import WorkerContext
from squall.metrics import CountMetric, GaugeMetric, MultiGaugeMetric
from squall.tuple import Fields, Tuple

SYSTEM_TASK = -1  # every worker's __system task has this id, as in Storm
METRICS_STREAM = "__metrics"
METRICS_FIELDS = Fields(["task_info", "data_points"])
TICK_SECS = 1.0  # how often __system reads its worker's metrics (each keeps its own bucket)
MAX_VALUE_CHARS = 1000  # a value that is not plain data goes as its repr, cut to this


class SystemBolt(Bolt):
    """Reads its worker's task metrics and sends their data points to the consumers."""

    def prepare(self, conf, context, collector):
        self.collector = collector
        worker = context.worker
        if worker is None:
            raise RuntimeError("the __system component runs only in a worker")
        self.worker: WorkerContext = worker
        self.names = worker.task_to_component
        bucket = float(conf.get("topology.builtin.metrics.bucket.size.secs", 60))
        # Storm's worker metrics, under names a Prometheus series may carry.
        self.uptime = context.register_metric("uptimeSecs", GaugeMetric(), bucket)
        context.register_metric("startTimeSecs", GaugeMetric(round(worker.started_at, 3)), bucket)
        context.register_metric("newWorkerEvent", CountMetric(), bucket).incr()
        self.rss = context.register_metric("memoryRssBytes", GaugeMetric(), bucket)
        self.gc = context.register_metric("gcCollections", MultiGaugeMetric("generation"), bucket)
        self._sample()

    def _sample(self) -> None:
        self.uptime.set(round(time.time() - self.worker.started_at, 3))
        self.rss.set(_rss_bytes())
        for generation, stats in enumerate(gc.get_stats()):
            self.gc.set(str(generation), stats["collections"])

    def execute(self, tup: Tuple) -> None:
        if not tup.is_tick():
            return
        self._sample()
        now = time.time()
        host, port = self.worker.worker_host, self.worker.worker_port
        for task, registry in sorted(self.worker.task_metrics().items()):
            registry.collect()
            by_bucket: dict[float, list[list[Any]]] = {}
            for bucket, name, value in registry.drain():
                by_bucket.setdefault(bucket, []).append([name, _plain(value)])
            for bucket, points in by_bucket.items():
                info = [host, port, self.names.get(task, "?"), task, now, bucket]
                self.collector.emit([info, points], stream=METRICS_STREAM)


def _rss_bytes() -> int | None:
    """This process's resident memory (Linux's /proc; None elsewhere)."""
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _plain(value: Any) -> Any:
    """``value`` if it crosses the wire as it is (numbers, text, None, maps and lists of
    them), else its repr."""
    if value is None or isinstance(value, (int, float, str, bool)):
        return value
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return repr(value)[:MAX_VALUE_CHARS]
