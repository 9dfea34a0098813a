"""TransactionalKafkaBolt: exactly-once writes to Kafka, tied to the topology's checkpoints.

Each task writes through a transactional producer whose ``transactional.id`` is fixed by
the topology's name, the component and the task's index, so the task that replaces one on
a dead or cut-off worker fences it: the broker refuses the old one's commits from then on.
One Kafka transaction per checkpoint period:

- records go out as tuples arrive, inside the period's transaction (begun at its first
  record); a reader with ``isolation.level=read_committed`` sees none of them yet;
- PREPARE: every record is delivered (or the checkpoint fails), and the period's records are
  saved in the task's checkpointed state with the transaction's checkpoint id;
- COMMIT: the transaction commits, and with it (``send_offsets_to_transaction``) a marker:
  the consumer group named by the transactional id gets offset ``txid + 1`` on partition 0
  of the period's first topic, so the broker itself records which periods committed;
  input that arrived between PREPARE and COMMIT goes out in the next transaction;
- ROLLBACK: the transaction is aborted; the spouts replay from the last committed checkpoint.

A worker can die after a checkpoint's commit was decided and before its Kafka transaction
committed; the new task cannot finish the old transaction (the client cannot resume one).
So recovery looks at the state it restores: if it holds a period whose marker the broker
does not have, the task writes that period's records again in a transaction of its own,
with the marker, before it takes input. Either way every record is committed exactly once.
The cost: each task's state holds one checkpoint period of its output.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from squall.contrib.kafka.bolt import KafkaBolt
from squall.contrib.kafka.client import KafkaConfigError, client_config
from squall.metrics import CountMetric
from squall.state.components import StatefulBolt
from squall.tuple import TICK_STREAM

PENDING_KEY = "__kafka_period"   # state: [txid, marker topic, records of the period]
CALL_SECS = 5.0                  # the longest a transaction call (init, flush, commit, abort) may wait


class TransactionalKafkaBolt(StatefulBolt, KafkaBolt):
    """KafkaBolt's arguments; writes are exactly once through checkpoints (the topology is
    checkpointed because of it). Readers must use ``isolation.level=read_committed``. A
    record the broker rejects spoils its transaction, so the checkpoint rolls back: set
    ``message.max.bytes`` in ``client_config`` to refuse large ones before they are sent."""

    background_reports = False  # its transaction calls and its polls stay on one thread

    def transactional_id(self, conf: Mapping[str, Any], context: Any) -> str:
        return f"squall.{conf['topology.name']}.{context.this_component_id}.{context.this_task_index}"

    def producer_config(self, conf: Mapping[str, Any]) -> dict[str, Any]:
        props = super().producer_config(conf)
        props["transactional.id"] = self.txn_id
        props.setdefault("transaction.timeout.ms", 60_000)
        return props

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self.txn_id = self.transactional_id(conf, context)
        super().prepare(conf, context, collector)
        self.conf_seen = conf
        self.initialized = False   # init_transactions done (fences the task's previous producer)
        self.in_doubt = False      # a commit was asked and its answer has not come
        self.txn_open = False
        self.spoiled = False       # a record of the open transaction failed: it cannot commit
        self.period: list[list[Any]] = []             # records of the open transaction
        self.after: list[tuple[Any, Any]] = []        # input between PREPARE and COMMIT
        self.prepared_txid: int | None = None
        props = client_config(conf, None, self.bootstrap_servers)
        props.update({"group.id": self.txn_id, "enable.auto.commit": False})
        try:  # never fetches: answers the marker's committed offset, names the group
            self.marker_client = self.ck.Consumer(props)
        except self.ck.KafkaException as exc:
            raise KafkaConfigError(f"cannot make a Kafka consumer: {exc}") from None
        b = float(conf["kafka.spout.metrics.time.bucket.secs"])
        self.m_commits = context.register_metric("kafka_transactions_committed", CountMetric(), b)
        self.m_aborts = context.register_metric("kafka_transactions_aborted", CountMetric(), b)
        self.m_rewritten = context.register_metric("kafka_transactions_rewritten", CountMetric(), b)

    def ready(self) -> bool:
        if len(self.after) >= self.max_in_flight:
            return False
        return super().ready()

    # -- input --------------------------------------------------------------------------------
    def execute(self, tup: Any) -> None:
        if tup.source.stream == TICK_STREAM:
            self._serve(0)
            return
        record = self.map(tup)
        if record is None:
            return
        if self.prepared_txid is not None:  # the open transaction is prepared: the next one takes it
            self.after.append((tup, record))
            return
        self._write(tup, record)
        self._serve(0)

    def _write(self, tup: Any, record: tuple[str, Any, Any, Any]) -> None:
        if not self.txn_open:
            self.producer.begin_transaction()
            self.txn_open = True
        if self.send(tup, record):
            self.period.append(list(record))

    def settle(self, done: list[tuple[Any, Any, Any]]) -> None:
        if any(err is not None for _, err, _ in done):
            self.spoiled = True  # the transaction cannot commit: the next PREPARE fails
        super().settle(done)

    # -- checkpoints --------------------------------------------------------------------------
    def pre_prepare(self, txid: int) -> None:
        if self.txn_open:
            self.producer.flush(CALL_SECS)
            self._serve(0)
            if self.in_flight:
                raise TimeoutError(f"{self.in_flight} records not delivered within {CALL_SECS:.0f}s")
        if self.spoiled:
            raise RuntimeError("a record of this checkpoint's transaction failed; rolling back")
        topic = self.period[0][0] if self.period else None
        self.state.put(PENDING_KEY, [txid, topic, self.period])
        self.prepared_txid = txid

    def pre_commit(self, txid: int) -> None:
        if self.prepared_txid != txid:
            raise RuntimeError(f"commit of checkpoint {txid}, but {self.prepared_txid} was prepared")
        if self.txn_open:
            self._commit(txid, self.period[0][0])
            self.txn_open = False
        self.period, self.prepared_txid = [], None
        after, self.after = self.after, []
        for tup, record in after:
            self._write(tup, record)

    def _commit(self, txid: int, topic: str) -> None:
        marker = [self.ck.TopicPartition(topic, 0, txid + 1)]
        self.producer.send_offsets_to_transaction(marker, self.marker_client.consumer_group_metadata(), CALL_SECS)
        # From here the commit is in doubt until the broker answers: a timed-out call goes on
        # in the client, so recovery finishes it rather than aborting (see _end).
        self.in_doubt = True
        self.producer.commit_transaction(CALL_SECS)
        self.in_doubt = False
        self.m_commits.incr()

    def pre_rollback(self) -> None:
        self._abort()

    def init_state(self, state: Any) -> None:
        """Start or recover: fence the task's previous producer, end what is open, and
        write again the restored period whose transaction the broker does not have."""
        self.state = state
        self._abort()
        if not self.initialized:
            self.producer.init_transactions(CALL_SECS)
            self.initialized = True
        pending = state.get(PENDING_KEY)
        if not (isinstance(pending, list) and len(pending) == 3 and pending[2]):
            return
        txid, topic, records = pending
        got = self.marker_client.committed([self.ck.TopicPartition(topic, 0)], timeout=CALL_SECS)[0]
        if got.error is not None:
            raise RuntimeError(f"cannot read the transaction marker of {self.txn_id}: {got.error}")
        if got.offset >= txid + 1:
            self.log.info("checkpoint's transaction found committed", txid=txid, marker=got.offset)
            return  # the broker has that period's transaction
        self.producer.begin_transaction()
        self.txn_open = True
        for t, key, value, headers in records:
            self.producer.produce(t, value, key, headers=headers)
        self.producer.flush(CALL_SECS)
        if len(self.producer):
            raise TimeoutError(f"checkpoint {txid}'s records not delivered again within {CALL_SECS:.0f}s")
        self._commit(txid, topic)
        self.txn_open = False
        self.m_rewritten.incr()
        self.log.info("a committed checkpoint's records written again", txid=txid, records=len(records),
                      marker=got.offset)

    def _abort(self) -> None:
        """End the open transaction, if any, and forget its records and the input held."""
        self.period, self.after, self.prepared_txid, self.spoiled = [], [], None, False
        if self.txn_open:
            try:
                self._end()
            except self.ck.KafkaException as exc:
                if not (exc.args and getattr(exc.args[0], "fatal", lambda: False)()):
                    raise  # the broker away: the recovery fails and is tried again
                self._new_producer()  # fenced or broken: a new one fences in turn at init
                self.in_doubt = False
            self.txn_open = False
        try:  # reports of the aborted records: from the rolled-back past, not failures now
            self.producer.poll(0)
        finally:
            self._reports.clear()
            self.in_flight = 0

    def _end(self) -> None:
        """Abort the open transaction; but one whose commit was asked and not answered
        (COMMIT came, so the checkpoint's commit was decided) is committed: a commit that
        timed out goes on in the client, and an abort now could not undo one that landed.
        Either way the transaction is over when this returns (recovery then reads the
        marker to see which)."""
        if self.in_doubt:
            try:
                self.producer.commit_transaction(CALL_SECS)
                self.in_doubt = False
                self.m_commits.incr()
                self.log.info("an in-doubt transaction's commit finished")
                return
            except self.ck.KafkaException as exc:
                err = exc.args[0] if exc.args else None
                if err is None or not err.txn_requires_abort():
                    raise
                self.in_doubt = False  # the broker refused it: it is aborted below
        self.producer.abort_transaction(CALL_SECS)
        self.m_aborts.incr()
        self.log.info("transaction aborted")

    def _new_producer(self) -> None:
        try:
            self.producer.purge()
        except Exception:  # noqa: BLE001 - replaced anyway
            pass
        self.producer = self.ck.Producer(self.producer_config(self.conf_seen))
        self.initialized = False

    def cleanup(self) -> None:
        try:
            if self.txn_open:
                self.producer.abort_transaction(CALL_SECS)
        except Exception:  # noqa: BLE001 - shutting down: the broker aborts it at its timeout
            pass
        finally:
            self.marker_client.close()
