"""CheckpointedKafkaSpout: a KafkaSpout whose read positions live in its checkpointed state.

In a checkpointed topology (one with stateful components) downstream state is exactly
once: the spout saves each partition's next offset with every checkpoint (``pre_prepare``)
and, after a rollback, seeks every partition back to the last committed checkpoint's
positions (``init_state``) instead of retrying single records. When a checkpoint commits,
its positions are committed to the consumer group too (``pre_commit``), so lag tools and a
backfill's default range see the progress. The runtime acks a tuple only once a commit
covers it, so ``topology.max.spout.pending`` bounds what is not yet checkpointed.
"""
from __future__ import annotations

from typing import Any

from squall.components import Spout
from squall.contrib.kafka.failures import MAX_ASIDE, MAX_REASON, Key, label
from squall.contrib.kafka.offsets import OffsetManager
from squall.contrib.kafka.spout import KafkaSpout
from squall.state.components import StatefulSpout

STATE_KEY = "offsets"
MAX_PREPARED = 16  # checkpoints prepared and not yet committed that are remembered


class CheckpointedKafkaSpout(StatefulSpout, KafkaSpout):
    """Takes KafkaSpout's arguments; retries and the ``failed`` stream of given-up records
    do not apply (a failure rolls the topology back). Undecodable records still go there,
    and so do undeliverable ones (a value that cannot cross between workers): the rollback
    that follows replays the partition, and that record goes to the ``failed`` stream with
    its reason instead of its tuple (without the stream it is skipped, and reported)."""

    ack = Spout.ack   # acks come after commits; the runtime skips the call altogether
    fail = Spout.fail  # a failure means a rollback, and init_state rewinds

    def undeliverable(self, msg_id: Any, reason: str) -> None:
        """Set the record aside: when the replay reads it again, its reason is reported."""
        topic, part, off = msg_id
        key = (topic, part)
        if key not in self.managers:
            return
        reason = reason[:MAX_REASON]
        self.m_undeliverable.incr(label(key))
        self.log.error("kafka record undeliverable", partition=label(key), offset=off, error=reason)
        self.collector.report_error(f"kafka record {label(key)}@{off} undeliverable: {reason}")
        aside = self.aside.setdefault(key, {})
        if len(aside) >= MAX_ASIDE:
            aside.pop(min(aside))
        aside[off] = reason

    def open(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self.prepared: dict[int, dict[Key, int]] = {}
        super().open(conf, context, collector)

    def init_state(self, state: Any) -> None:
        """Start, or roll back: every partition to its position in the committed state."""
        self.state = state
        raw = state.get(STATE_KEY) or {}
        self.restored = {}
        for name, offset in raw.items() if isinstance(raw, dict) else ():
            topic, _, part = str(name).rpartition("-")
            if topic and part.isdigit() and isinstance(offset, int) and offset >= 0:
                self.restored[(topic, int(part))] = offset
        self.prepared.clear()
        for key, old in list(self.managers.items()):
            start = self.restored.get(key, self.starts[key])
            here = old.last_emitted + 1 if old is not None else self.starts[key]
            self.starts[key] = start
            self.managers[key] = OffsetManager(start) if start >= 0 else None
            self.dead.pop(key, None)
            if start != here:  # emitted past the state's position, or restored to another
                self._seek(key, start)

    def positions(self) -> dict[Key, int]:
        """Each partition's next offset to emit, where known."""
        out = {}
        for key, mgr in self.managers.items():
            if mgr is not None:
                out[key] = mgr.last_emitted + 1
            elif key in self.restored:
                out[key] = self.restored[key]
        return out

    def pre_prepare(self, txid: int) -> None:
        pos = self.positions()
        self.state.put(STATE_KEY, {label(k): v for k, v in sorted(pos.items())})
        self.prepared[txid] = pos
        while len(self.prepared) > MAX_PREPARED:
            self.prepared.pop(min(self.prepared))

    def pre_commit(self, txid: int) -> None:
        pos = self.prepared.pop(txid, None)
        for t in [t for t in self.prepared if t < txid]:
            del self.prepared[t]
        if not pos:
            return
        for key, offset in pos.items():
            mgr = self.managers.get(key)
            if mgr is not None:
                mgr.commit(offset)  # what the state covers is no longer uncommitted
                self.m_committed.set(label(key), offset)
        self._send_commit([self._TP(k[0], k[1], v, metadata=self._metadata) for k, v in sorted(pos.items())])

    def _commit(self, handover: bool = False, keys: list[Key] | None = None) -> None:
        """Group commits follow checkpoint commits only (pre_commit)."""

    def _on_commit(self, err: Any, partitions: list[Any]) -> None:
        """A group commit confirmed: the positions are the state's already, and a late
        confirmation from before a rollback must not move them."""
        if err is not None:
            self._on_client_error(err)
