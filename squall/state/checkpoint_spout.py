"""The checkpoint spout (``__checkpoint``): the system spout that drives checkpoints.

``TopologyBuilder.build`` adds it to any topology with a stateful component. Every
``topology.state.checkpoint.interval.ms`` it sends PREPARE, then COMMIT once every task
has prepared; on start it sends INIT, and after a failed checkpoint ROLLBACK (see
squall.state.protocol). Its own record (txid, phase, epoch) is saved in the state store
before each barrier that depends on it is sent.

It runs in an ordinary spout executor, configured to call ``next_tuple`` once per turn
and to idle 100 ms when there is nothing to send (it sends one barrier at a time): a
``next_tuple`` that sent nothing is not called again for 100 ms, whatever wakes the
executor (squall.runtime.spout_pacing). So the barrier that follows a completed or failed
one (COMMIT after PREPARE, the first PREPARE after INIT, ROLLBACK after a failure) is sent
from ``ack``/``fail`` at once, not from the next ``next_tuple``. Its tuples time out after
``topology.state.checkpoint.timeout.secs`` when that is set (squall.model.checkpoint_edges).
"""
from __future__ import annotations

from typing import Any

import structlog

from squall.components import Spout
from squall.model import CHECKPOINT
from squall.runtime.wrapping import StatsSections
from squall.state.kv import decode, encode
from squall.state.protocol import CHECKPOINT_STREAM, COMMIT, PREPARE, Coordinator, TxRecord
from squall.state.stores import Store, StoreError, namespace, open_store, state_name

RECORD_KEY = encode("record")
log = structlog.get_logger("squall.state")


def load_record(store: Store) -> tuple[TxRecord, int]:
    """(the saved record, the store's write counter). A write cut short is dropped."""
    held, entries = store.load(-1)
    raw = entries.get(RECORD_KEY)
    return (TxRecord() if raw is None else TxRecord.from_dict(decode(raw))), held or 0


class CheckpointSpout(StatsSections, Spout):
    def component_config(self) -> dict[str, Any]:
        return {"topology.spout.batch.size": 1, "topology.sleep.spout.wait.strategy.time.ms": 100}

    def open(self, conf, context, collector):
        self.collector = collector
        self.clock = context.clock
        self.log = log.bind(topology=context.topology_id, component=CHECKPOINT)
        self.store = open_store(conf, namespace(state_name(conf), CHECKPOINT, 0))
        record, self.writes = load_record(self.store)
        interval = float(conf["topology.state.checkpoint.interval.ms"]) / 1000.0
        self.coordinator = Coordinator(record, interval)
        self.log.info("checkpoint spout starting", txid=record.txid, phase=record.phase,
                      restore_to=record.restore_point())

    def _save(self, record: TxRecord) -> bool:
        try:
            self.writes += 1
            self.store.prepare(self.writes, {RECORD_KEY: encode(record.to_dict())})
            self.store.commit(self.writes)
            return True
        except StoreError as exc:
            self.collector.report_error(f"checkpoint record not saved: {exc}")
            return False

    def next_tuple(self):
        now = self.clock.monotonic()
        step = self.coordinator.next(now, int(self.clock.time() * 1000))
        if step is None:
            return
        record, barrier = step
        if self.coordinator.durable(record) and not self._save(record):
            return  # nothing is sent that the saved record does not back
        self.coordinator.sent(record, barrier, now)
        if barrier[1] not in (PREPARE, COMMIT):
            self.log.info("restoring state", action=barrier[1], txid=barrier[0], epoch=barrier[2])
        self.collector.emit(list(barrier), stream=CHECKPOINT_STREAM, msg_id=barrier)

    def ack(self, msg_id):
        record = self.coordinator.acked(msg_id)
        if record is not None:
            if not self.coordinator.durable(record) or self._save(record):
                self.coordinator.saved(record)
            else:
                self.coordinator.unsaved()
        self.next_tuple()  # what follows at once: COMMIT after PREPARE, PREPARE after INIT if due

    def fail(self, msg_id):
        ours = msg_id == self.coordinator.in_flight
        self.coordinator.failed(msg_id)
        if ours:
            coordinator = self.coordinator
            self.log.warning("checkpoint failed; rolling back", txid=msg_id[0], action=msg_id[1],
                             failures=coordinator.failures,
                             retry_in=round(max(0.0, coordinator.retry_at - self.clock.monotonic()), 1))
            self.next_tuple()  # the first ROLLBACK goes at once (later ones back off)

    def close(self):
        self.store.close()

    def executor_stats(self) -> dict[str, dict[str, Any]]:
        rec = self.coordinator.record
        return {"checkpoint": {"txid": rec.txid, "phase": rec.phase, "recoveries": rec.recoveries}}

    # Its one stream, __checkpoint, is declared by TopologyBuilder.build (user code may not
    # declare streams starting with "__").
