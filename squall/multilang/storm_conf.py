"""Storm topology config keys that mean nothing to squall (JVM, Kryo, resource-aware
scheduling, ...). A Flux file or streamparse topology written for Storm may carry them; they
are dropped with a warning instead of failing validation. Any other unknown key in squall's
namespaces is still an error."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

STORM_ONLY_KEYS = frozenset({
    "topology.worker.childopts", "topology.worker.gc.childopts", "topology.worker.logwriter.childopts",
    "topology.classpath", "topology.classpath.beginning", "topology.python.path",
    "topology.kryo.register", "topology.kryo.decorators", "topology.kryo.factory",
    "topology.fall.back.on.java.serialization", "topology.skip.missing.kryo.registrations",
    "topology.skip.missing.serializations",
    "topology.worker.max.heap.size.mb", "topology.component.resources.onheap.memory.mb",
    "topology.component.resources.offheap.memory.mb", "topology.component.cpu.pcore.percent",
    "topology.scheduler.strategy", "topology.priority", "topology.eventlogger.executors",
    "topology.stats.sample.rate", "topology.builtin.metrics.bucket.size.secs",
    "topology.bolts.outgoing.overflow.buffer.enable", "topology.multilang.log.handler",
    "topology.tuple.compression.enable", "topology.disruptor.batch.size",
    "topology.disruptor.wait.timeout.millis", "topology.backpressure.enable",
})


def split_storm_conf(conf: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """(``conf`` without Storm-only keys, the keys dropped)."""
    kept = {k: v for k, v in conf.items() if k not in STORM_ONLY_KEYS}
    return kept, sorted(k for k in conf if k in STORM_ONLY_KEYS)
