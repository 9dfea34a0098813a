"""Windowed and stateful bolts in a batch run (no pyspark here).

A batch run has no checkpoint spout and no clock. A stateful bolt's task gets a
KeyValueState in memory that starts empty, or, with ``topology.state.snapshot: NAME``
(``spark-run --state-from NAME``), holds what task of the same index last committed in
the live topology NAME, read from the configured store (a window's own contents are not
carried over). A windowed bolt takes its task's whole input, then fires every window:
with event time nothing is late, so each window holds what a live run without late tuples
gives it (a bolt with ``batch_watermark`` moves its watermark as tuples arrive instead, as
live, and finds the same late tuples when they arrive in the same order). Processing-time
windows need a clock and are refused.
"""
from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from squall.model import CHECKPOINT
from squall.state.components import is_stateful
from squall.state.inspect import committed_state, read_record
from squall.state.kv import KeyValueState, encode
from squall.state.stores import MemoryStore
from squall.topology import Topology
from squall.values import ValueCodec
from squall.windowing.runner import WINDOW_KEY, WindowedBoltRunner

SNAPSHOT_KEY = "topology.state.snapshot"


def system_components() -> set[str]:
    """Components a batch run never runs."""
    return {CHECKPOINT}


def batch_problem(topology: Topology, running: set[str], conf: Mapping[str, Any]) -> str | None:
    """Why ``topology`` cannot run in batch (a processing-time window, a snapshot that is
    not there), or None."""
    snapshot = conf.get(SNAPSHOT_KEY)
    if snapshot and read_record(conf, str(snapshot)) is None:
        return (f"{SNAPSHOT_KEY}: topology {snapshot!r} has no checkpoint in the configured store "
                f"({conf.get('topology.state.provider') or 'embedded'}, see topology.state.*)")
    for spec in topology.bolts():
        if spec.id not in running:
            continue
        bolt = spec.instantiate()
        if isinstance(bolt, WindowedBoltRunner) and not bolt.spec.counted and not bolt.spec.event_time:
            return (f"windowed bolt {spec.id!r} has processing-time windows, and a batch run has no clock: "
                    "give it a timestamp field (with_timestamp_field) for event time, or exclude it")
    return None


class BatchTask:
    """Starts a bolt task's state and windows; ``finish`` runs after its last input."""

    def __init__(self, bolt: Any, conf: Mapping[str, Any], component: str, index: int) -> None:
        self.bolt = bolt
        self.prefix = ""
        if isinstance(bolt, WindowedBoltRunner):
            bolt.batch = True
        if is_stateful(bolt):
            self.prefix = f"batch-{uuid.uuid4().hex}/"
            name = f"{self.prefix}{component}/{index}"
            store = MemoryStore(name)
            snapshot = conf.get(SNAPSHOT_KEY)
            codec = ValueCodec(conf.get("topology.serializers") or {})
            if snapshot:
                entries = load_snapshot(conf, str(snapshot), component, index)
                store.prepare(1, {encode(k, codec): encode(v, codec) for k, v in entries.items() if k != WINDOW_KEY})
                store.commit(1)
            state = KeyValueState(store, name, codec)
            state.restore(1 if snapshot else 0)
            bolt.init_state(state)

    def finish(self) -> None:
        if isinstance(self.bolt, WindowedBoltRunner):
            self.bolt.end_of_input()

    def close(self) -> None:
        if self.prefix:
            MemoryStore.drop(self.prefix)


def load_snapshot(conf: Mapping[str, Any], topology: str, component: str, index: int) -> dict[Any, Any]:
    """What task ``index`` of ``component`` committed last in the live topology ``topology``."""
    record = read_record(conf, topology)
    if record is None:
        raise ValueError(f"{SNAPSHOT_KEY}: topology {topology!r} has no checkpoint in the configured store")
    return committed_state(conf, topology, component, index, record.restore_point())[1]
