"""KafkaSpout: records of topics (or a topic pattern) as reliable tuples, committed only
when done (Storm's KafkaSpout with manual partition assignment).

Each task reads the partitions ``assignment.task_partitions`` gives it, with its own
consumer (``assign``, no group rebalance) in the component's consumer group; a second
client of its own, which never fetches, answers the periodic metadata requests. A record's
message id is ``(topic, partition, offset)``. Acks feed the partition's
``OffsetManager``; every ``kafka.spout.offset.commit.period.ms`` (and on deactivate and
close) the task commits, per partition, the offset past the highest contiguous acked one.
A failed record is read again after an exponential back-off (``RetrySchedule``; the
partition is sought back to it); after ``kafka.spout.retry.max.count`` failures it is
*reported*, like a record the translator cannot decode: counted, logged, reported as an
error and, when the spout has a ``failed`` stream, emitted there; its offset is committed
once that tuple is done (at once without the stream).

This module has the assignment, the emit loop and housekeeping; ``failures`` the acks,
fails and reports, ``commits`` the group commits and lag (mixed into KafkaSpout).
"""
from __future__ import annotations

import re
import time
from collections import deque
from collections.abc import Sequence
from typing import Any, Literal

import structlog

from squall.components import OutputFieldsDeclarer, Spout
from squall.contrib.kafka import assignment
from squall.contrib.kafka.client import (
    CONSUMER_FIXED,
    ClientErrors,
    KafkaConfigError,
    client_config,
    component_conf,
    confluent,
)
from squall.contrib.kafka.commits import SYNC_COMMIT_SECS, GroupCommits
from squall.contrib.kafka.failures import Key, RecordFailures, label
from squall.contrib.kafka.lookups import COMMIT, COMMITTED, METADATA, Backoff, BrokerLookups
from squall.contrib.kafka.offsets import OffsetManager
from squall.contrib.kafka.retry import RetrySchedule
from squall.contrib.kafka.settings import SpoutSettings, commit_metadata, committed_by, start_offset
from squall.contrib.kafka.translator import FAILED_FIELDS, FAILED_STREAM, RecordTranslator, checked
from squall.metrics import MultiCountMetric, MultiGaugeMetric

log = structlog.get_logger("squall.contrib.kafka")
HOUSEKEEPING_SECS = 0.05   # commits, retries, pauses, answers and refreshes are looked at this often
RESEEK_SECS = 5.0          # a due retry not read back by then is sought again
BEHIND_SECS = 0.5          # the longest empty polls in a row still count as "records on their way"


class KafkaSpout(RecordFailures, GroupCommits, Spout):
    """Reads ``topics`` (or the topics matching ``pattern``) in consumer group ``group_id``.

    translator: a ``RecordTranslator`` (default: raw records); its ``fields`` are the
      default stream's. failed_stream: declare the ``failed`` stream (FAILED_FIELDS), where
      undecodable and given-up records go. conf: ``kafka.*`` keys for this component only
      (``kafka.client.config`` here replaces the topology's). client_config: librdkafka
      properties for this spout's consumer (no secrets; see ``kafka.secrets``).
    """

    def __init__(self, topics: Sequence[str] | str | None = None, *, group_id: str, pattern: str | None = None,
                 translator: Any = None, failed_stream: bool = False, bootstrap_servers: str | None = None,
                 client_config: dict[str, Any] | None = None, conf: dict[str, Any] | None = None) -> None:
        if isinstance(topics, str):
            topics = [topics]
        if bool(topics) == (pattern is not None):
            raise ValueError("KafkaSpout needs topics or a pattern (not both)")
        if not isinstance(group_id, str) or not group_id:
            raise ValueError("KafkaSpout needs a group_id")
        if pattern is not None:
            re.compile(pattern)  # a bad pattern fails at build time
        self.topics = list(topics) if topics else None
        self.pattern = pattern
        self.group_id = group_id
        self.translator = checked(translator if translator is not None else RecordTranslator())
        self.failed_stream = failed_stream
        self.bootstrap_servers = bootstrap_servers
        self.conf = component_conf(conf, client_config, "KafkaSpout")

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(list(self.translator.fields))
        if self.failed_stream:
            declarer.declare_stream(FAILED_STREAM, list(FAILED_FIELDS))

    def component_config(self) -> dict[str, Any] | None:
        return dict(self.conf) or None

    # -- open and close ----------------------------------------------------------------------
    def open(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self.collector = collector
        self._emit = collector.emit
        self.context = context
        self.settings = s = SpoutSettings.from_conf(conf)
        self.topology_id = context.topology_id
        self.task_index = context.this_task_index
        self.n_tasks = len(context.component_tasks(context.this_component_id))
        self.log = log.bind(topology=context.topology_id, component=context.this_component_id,
                            task=context.this_task_id)
        self._has_failed_stream = FAILED_STREAM in context.this_output_streams()
        self._translate = self.translator.translate
        self._raw = type(self.translator) is RecordTranslator
        self._metadata = commit_metadata(self.topology_id)
        ck = confluent()
        self._TP = ck.TopicPartition
        props = client_config(conf, None, self.bootstrap_servers)
        props.setdefault("queued.max.messages.kbytes", 16384)  # prefetch per task: 16 MB, not 64
        props.update(CONSUMER_FIXED)
        props["group.id"] = self.group_id
        b = s.metrics_bucket
        what = f"read {', '.join(self.topics) if self.topics else 'topics matching ' + repr(self.pattern)}"
        self._on_client_error = ClientErrors(context, self.log, b, str(props["bootstrap.servers"]), what,
                                             collector.report_error)
        self.consumer = _consumer(ck, {**props, "auto.offset.reset": "earliest", "on_commit": self._on_commit,
                                       "error_cb": lambda err: self._on_client_error(err)})
        # Metadata, committed offsets and the commits that must land come from a client that
        # never fetches, on a thread of its own (squall.contrib.kafka.lookups): a broker
        # answers one connection's requests in order, so on the consumer's connection they
        # would wait behind the fetch the broker holds open, and on this thread they would
        # hold every executor that shares it. A consumer, not an admin client, so that the
        # consumer properties in the configuration raise no warnings.
        self.metadata_client = _consumer(ck, props)
        self.lookups = BrokerLookups(self.metadata_client, self._TP)
        self.meta_backoff, self.offsets_backoff = Backoff(), Backoff()
        delays = (s.retry_initial, s.retry_multiplier, s.retry_max_delay)
        self.retry: RetrySchedule[Key] = RetrySchedule(*delays, s.retry_max_count)
        self.dead_retry: RetrySchedule[Key] = RetrySchedule(*delays, None)
        self.managers: dict[Key, OffsetManager | None] = {}   # None until the first record shows where it starts
        self.awaiting: set[Key] = set()        # partitions of this task whose committed offset is being asked
        self.starts: dict[Key, int] = {}       # where each assigned partition was started (logical or real)
        self.dead: dict[Key, dict[int, str]] = {}   # offsets reported -> why: the failed stream carries them
        self.aside: dict[Key, dict[int, str]] = {}  # offsets to report when read again (after a rollback)
        self.paused: set[Key] = set()
        self.sought: dict[Key, tuple[int, float]] = {}  # the last retry seek per partition
        self.tps: dict[Key, Any] = {}
        self.buf: deque[Any] = deque()
        self.committing: dict[Key, int] = {}   # commits sent and not yet confirmed
        self.restored: dict[Key, int] = {}     # checkpointed mode: positions from the state
        self._next_house = 0.0
        self._dry_since: float | None = None  # when polls began to come back empty (None: the last had records)
        self._next_commit = time.monotonic() + s.commit_period
        self.refresh_timer = assignment.RefreshTimer(s.refresh_period)
        self.m_lag = context.register_metric("kafka_lag", MultiGaugeMetric("partition"), b)
        self.m_committed = context.register_metric("kafka_committed_offset", MultiGaugeMetric("partition"), b)
        self.m_retries = context.register_metric("kafka_retries", MultiCountMetric("partition"), b)
        self.m_decode = context.register_metric("kafka_decode_failures", MultiCountMetric("partition"), b)
        self.m_given_up = context.register_metric("kafka_given_up", MultiCountMetric("partition"), b)
        self.m_undeliverable = context.register_metric("kafka_undeliverable", MultiCountMetric("partition"), b)
        self.lookups.metadata()  # the first look; its answer assigns the partitions

    def deactivate(self) -> None:
        self._commit(handover=True)

    def close(self) -> None:
        """The last commit, waited for at most SYNC_COMMIT_SECS (the executor is ending)."""
        try:
            self._commit(handover=True)
            if self.committing:
                for ans in self.lookups.wait(COMMIT, SYNC_COMMIT_SECS):
                    self._answer(ans)
        finally:
            self.lookups.stop()
            try:
                self.consumer.close()
            finally:
                self.metadata_client.close()

    # -- assignment ------------------------------------------------------------------------
    def _answer(self, ans: tuple[str, Any, Any]) -> None:
        """Apply one answer of the lookup thread (on the spout's own thread)."""
        kind, result, err = ans
        now = time.monotonic()
        if err is not None:
            self._on_client_error(err)
            if kind == METADATA:
                self.refresh_timer.looked(now)
                self.meta_backoff.failed(now)
            elif kind == COMMITTED:
                self.offsets_backoff.failed(now)
            else:
                self.committing.clear()  # not committed: the next period (or hand-over) tries again
            return
        self._on_client_error.answered()
        if kind == METADATA:
            self.refresh_timer.looked(now)
            self.meta_backoff.succeeded()
            self._reassign(result)
        elif kind == COMMITTED:
            self.offsets_backoff.succeeded()
            self._assign(result)
        else:
            self._confirmed(result)

    def _reassign(self, md: Any) -> None:
        """Recompute this task's partitions from the broker's metadata: ask the committed
        offsets of new ones (assigned when the answer comes), drop the revoked ones
        (committing what they finished)."""
        topics = assignment.subscribed_topics(md.topics, self.topics, self.pattern)
        parts = {t: [p for p in md.topics[t].partitions] for t in topics if md.topics[t].error is None}
        mine = assignment.task_partitions(assignment.all_partitions(parts, topics), self.task_index, self.n_tasks)
        added, revoked = assignment.changes(set(self.managers) | self.awaiting, mine)
        revoked_now = [k for k in revoked if k in self.managers]
        self.awaiting.difference_update(revoked)
        if revoked_now:
            self._commit(handover=True, keys=revoked_now)
            try:
                self.consumer.incremental_unassign([self._tp(k) for k in revoked_now])
            except Exception as exc:  # noqa: BLE001 - forgotten anyway: records of it are dropped
                self._on_client_error(exc)
            for key in revoked_now:
                self._forget(key)
        if added:
            self.awaiting.update(added)
            self.lookups.committed(sorted(self.awaiting))
        if added or revoked:
            self.log.info("partitions assigned", partitions=[label(k) for k in mine],
                          added=[label(k) for k in added], revoked=[label(k) for k in revoked])

    def _assign(self, committed: dict[Key, tuple[int, Any]]) -> None:
        """Start the partitions whose committed offsets came (and are still ours)."""
        tps = []
        for key, (off, meta) in sorted(committed.items()):
            if key not in self.awaiting:
                continue  # revoked meanwhile, or assigned already
            self.awaiting.discard(key)
            offset = self.restored.get(key)
            if offset is None:
                offset = start_offset(self.settings.strategy, off, committed_by(meta), self.topology_id)
            self.starts[key] = offset
            self.managers[key] = OffsetManager(offset) if offset >= 0 else None
            if offset >= 0:
                self.m_committed.set(label(key), offset)
            tps.append(self._TP(key[0], key[1], offset))
        if tps:
            try:
                self.consumer.incremental_assign(tps)
            except Exception as exc:  # noqa: BLE001 - a local call; asked again at the next refresh
                self._on_client_error(exc)
                for tp in tps:
                    self._forget((tp.topic, tp.partition))

    def _forget(self, key: Key) -> None:
        self.managers.pop(key, None)
        self.starts.pop(key, None)
        self.dead.pop(key, None)
        self.aside.pop(key, None)
        self.paused.discard(key)
        self.sought.pop(key, None)
        self.retry.forget_partition(key)
        self.dead_retry.forget_partition(key)
        self._drop_buffered(key)
        for m in (self.m_lag, self.m_committed):
            m.remove(label(key))

    def _tp(self, key: Key, offset: int | None = None) -> Any:
        if offset is not None:
            return self._TP(key[0], key[1], offset)
        tp = self.tps.get(key)
        if tp is None:
            tp = self.tps[key] = self._TP(key[0], key[1])
        return tp

    def _drop_buffered(self, key: Key) -> None:
        buf = self.buf  # in place: the emit loop holds this deque
        if buf:
            kept = [m for m in buf if (m.topic(), m.partition()) != key]
            buf.clear()
            buf.extend(kept)

    # -- the emit loop -----------------------------------------------------------------------
    def next_tuple(self) -> None:
        buf = self.buf
        while True:
            if not buf:
                if not self._fill():
                    return
                buf = self.buf
            msg = buf.popleft()
            err = msg.error()
            if err is not None:
                self._on_client_error(err)
                continue
            off, topic, part = msg.offset(), msg.topic(), msg.partition()
            key = (topic, part)
            mgr: OffsetManager | None | Literal[False] = self.managers.get(key, False)
            if mgr is None:  # the first record of a partition started at a logical offset
                mgr = self.managers[key] = OffsetManager(off)
            elif mgr is False:
                continue  # revoked meanwhile
            if off <= mgr._last_emitted:  # a re-read after a seek: a retry, or nothing to do
                if self._emit_again(msg, key, mgr, off):
                    return
                continue
            if self.aside and off in self.aside.get(key, ()):  # undeliverable before a rollback
                if self._emit_aside(msg, key, mgr, off):
                    return
                continue
            if self._raw:  # RecordTranslator.translate, inlined: it cannot fail
                kind, ms = msg.timestamp()
                values: list[Any] | None = [topic, part, off, msg.key(), msg.value(), ms / 1000.0 if kind else None]
            else:
                try:
                    values = self._translate(msg)
                except Exception as exc:  # noqa: BLE001 - the record is undecodable: reported, not retried
                    self._undecodable(msg, key, mgr, exc)
                    if self._has_failed_stream:
                        return
                    continue
                if values is None:
                    mgr.done(off)
                    continue
            # OffsetManager.emitted, inlined: a record never emitted before (the hot path)
            mgr._order.append(off)
            mgr._last_emitted = off
            mgr._pending.add(off)
            self._emit(values, msg_id=(topic, part, off))
            return

    def _fill(self) -> bool:
        now = time.monotonic()
        if now >= self._next_house:
            self._housekeeping(now)
        else:
            self._pause_over_bound()  # per poll, not per housekeeping: a poll is up to 500 records
        try:
            msgs = self.consumer.consume(self.settings.poll_records, 0)
        except Exception as exc:  # noqa: BLE001 - a client error: counted, polled again later
            self._on_client_error(exc)
            return False
        if not msgs:
            if self._dry_since is None:
                self._dry_since = now
            return False
        self._dry_since = None
        if self._on_client_error.down_since is not None:
            self._on_client_error.answered()
        self.buf.extend(msgs)
        return True

    def behind(self) -> bool:
        """Records known to be waiting although the last poll was empty: a partition of this
        task, not paused, whose high watermark (as the client's last fetch response gave
        it) is above the consumer's position, so the next fetch brings records; the executor
        then asks again at once instead of after its wait strategy's time. Believed for at
        most BEHIND_SECS of empty polls in a row (a broker whose watermark is wrong never
        makes the spout spin for long); a caught-up spout is not behind, and waits."""
        since = self._dry_since
        if since is None or time.monotonic() - since > BEHIND_SECS:
            return False
        keys = [k for k in self.managers if k not in self.paused]
        if not keys:
            return False
        try:
            positions = self.consumer.position([self._tp(k) for k in keys])
            for tp in positions:
                if tp.offset < 0:
                    continue  # not fetched yet: nothing known
                high = self.consumer.get_watermark_offsets(tp, cached=True)[1]
                if high is not None and high > tp.offset:
                    return True
        except Exception:  # noqa: BLE001 - unknown: wait as a caught-up spout does
            return False
        return False

    def _housekeeping(self, now: float) -> None:
        self._next_house = now + HOUSEKEEPING_SECS
        lookups = self.lookups
        if not lookups.answers.empty():
            for ans in lookups.drain():
                self._answer(ans)
        if self.refresh_timer.due(now) and self.meta_backoff.due(now) and METADATA not in lookups.pending:
            lookups.metadata()
        if self.awaiting and COMMITTED not in lookups.pending and self.offsets_backoff.due(now):
            lookups.committed(sorted(self.awaiting))
        if now >= self._next_commit:
            self._next_commit = now + self.settings.commit_period
            self._commit()
            self._update_lag()
        due = self.retry.ready(now)
        for key, off in self.dead_retry.ready(now).items():
            due[key] = min(off, due.get(key, off))
        for key, off in due.items():
            # One seek per retry: a re-read slower than a housekeeping turn is not cut short
            # (a fetch purged by every new seek would never arrive); again after RESEEK_SECS.
            prev = self.sought.get(key)
            if prev is not None and prev[0] <= off and now - prev[1] < RESEEK_SECS:
                continue
            self.sought[key] = (off, now)
            self._seek(key, off)
        self._pause_over_bound()

    def _seek(self, key: Key, offset: int) -> None:
        if key not in self.managers:
            return
        self._drop_buffered(key)
        try:
            self.consumer.seek(self._tp(key, offset))
        except Exception:  # noqa: BLE001 - not fetching yet: assign at the offset instead
            try:
                self.consumer.incremental_unassign([self._tp(key)])
                self.consumer.incremental_assign([self._tp(key, offset)])
            except Exception as exc:  # noqa: BLE001 - tried again at the next housekeeping
                self._on_client_error(exc)

    def _pause_over_bound(self) -> None:
        bound = self.settings.max_uncommitted
        half = bound // 2
        over: dict[Key, OffsetManager] = {}
        early = []
        for k, m in self.managers.items():
            if m is not None and m.uncommitted >= half:
                if m.uncommitted >= bound:
                    over[k] = m
                if k not in self.committing:
                    early.append(k)
        if early:  # commit now what is done, not at the next period (reading stops at the bound)
            self._commit(keys=early)
        if over.keys() == self.paused:
            return
        pause, resume = over.keys() - self.paused, self.paused - over.keys()
        try:
            if pause:
                self.consumer.pause([self._tp(k) for k in pause])
                for key in pause:  # what was fetched past the bound waits in the log, not here
                    self._seek(key, over[key].last_emitted + 1)
            if resume:
                self.consumer.resume([self._tp(k) for k in resume])
            self.paused = set(over)
        except Exception as exc:  # noqa: BLE001 - tried again at the next housekeeping
            self._on_client_error(exc)


def _consumer(ck: Any, props: dict[str, Any]) -> Any:
    """A confluent-kafka consumer; bad properties are a KafkaConfigError."""
    try:
        return ck.Consumer(props)
    except ck.KafkaException as exc:
        raise KafkaConfigError(f"cannot make a Kafka consumer: {exc}") from None
