"""KafkaBolt: tuples written as records (Storm's KafkaBolt), acked when the broker confirms.

A tuple becomes a record through a key mapper, a value mapper, a headers mapper and a topic
selector (by default the tuple's ``key``, ``value`` and ``headers`` fields to one topic).
The producer is idempotent (no duplicates or reordering from its own retries). Each
record's delivery report acks its tuple, or fails it (the spout replays) when the broker
does not confirm it within ``kafka.bolt.delivery.timeout.ms``. Reports are served on the
bolt's own thread: a thread of the bolt's waits in the producer's ``poll`` (the
callbacks run there and only queue the reports) and wakes the executor, which settles them
at once, as Storm's KafkaBolt acks from the producer's callback thread; without a wake (a
bolt the executor does not wake) they are served whenever the executor asks whether the bolt
is ``ready`` (once per batch of input, not per record) and at tick tuples
(``topology.tick.tuple.freq.secs`` is set for the bolt). Without the thread, a topology
whose spouts were all held at ``topology.max.spout.pending`` waited for the next tick: no
input came to make the bolt poll. With the default field mappers a
tuple's key, value and headers are read by position, found once per input stream.

Records go to the producer a turn of the executor at a time: the bolt gathers them and,
when the turn ends (its wake), hands them over in one ``produce_batch`` call whose one
callback counts the batch's reports; the batch's tuples are settled together once its last
report came (squall.contrib.kafka.batches: a failed report settles the tuple whose record it
names). A per-record callback cost more CPU than the produce call itself. Records with
headers, which ``produce_batch`` cannot carry, go one at a time, in order.

Flow control, not refusal: at ``kafka.bolt.max.in.flight`` records awaiting a report the
bolt is not ready for input, so its queue fills and backpressure holds the spouts back
until deliveries drain. A record the broker *rejects* (too large, not authorised, an
invalid topic) is not retried: it is counted in ``kafka_writes_refused{reason}``,
reported, and, when the bolt declares a ``failed`` stream, emitted there with its reason
(the input is acked); without one the input fails and its spout decides.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, cast

import structlog

from squall.components import Bolt, OutputFieldsDeclarer
from squall.contrib.kafka.batches import Batch
from squall.contrib.kafka.client import ClientErrors, KafkaConfigError, client_config, component_conf, confluent
from squall.contrib.kafka.records import REASON_HEADER, refusal, to_bytes, to_headers
from squall.metrics import CountMetric, GaugeMetric, MultiCountMetric
from squall.tuple import TICK_STREAM

log = structlog.get_logger("squall.contrib.kafka")
TICK_SECS = 0.1  # how often delivery reports are served without input
REPORT_POLL_SECS = 0.05  # the report thread's longest wait in poll (how soon it sees a stop)
ERRORS_HELD = 1000  # client errors the report thread holds for the executor (the oldest go first)
BATCH_RECORDS = 1000  # records gathered before they go to the producer even within one turn
PREPARE_FLUSH_SECS = 5.0  # the longest a checkpoint's PREPARE waits for this bolt's records
FAILED_STREAM = "failed"
# What a KafkaBolt's ``failed`` stream carries: the record it could not write and why (the
# headers hold the reason too, so a dead-letter KafkaBolt keeps it without a mapping).
REFUSED_FIELDS = ("topic", "key", "value", "headers", "reason")


class FieldMapper:
    """A tuple's field by name (Storm's FieldNameBasedTupleToKafkaMapper); None if the tuple lacks it."""

    def __init__(self, field: str) -> None:
        self.field = field

    def __call__(self, tup: Any) -> Any:
        return tup.get(self.field)


class TopicSelector:
    """One topic for every tuple (Storm's DefaultTopicSelector)."""

    def __init__(self, topic: str) -> None:
        if not isinstance(topic, str) or not topic:
            raise ValueError("a topic name must be a non-empty string")
        self.topic = topic

    def __call__(self, tup: Any) -> str:
        return self.topic


class FieldTopicSelector:
    """The topic named in a field, else ``default`` (Storm's FieldNameTopicSelector)."""

    def __init__(self, field: str, default: str) -> None:
        self.field, self.default = field, default

    def __call__(self, tup: Any) -> str:
        topic = tup.get(self.field)
        return topic if isinstance(topic, str) and topic else self.default


Mapper = str | Callable[[Any], Any]


class KafkaBolt(Bolt):
    """Writes each input tuple to Kafka and acks it once the broker has it.

    topic: a topic name or a selector ``f(tuple) -> topic``; key / value / headers: a field
    name or ``f(tuple) -> ...`` (key and value bytes, str or None; headers a list of
    ``(name, bytes | str)`` pairs, a dict, or None). failed_stream: declare the ``failed``
    stream (REFUSED_FIELDS) for records the broker rejects. client_config: librdkafka
    producer properties (no secrets; see ``kafka.secrets``); conf: ``kafka.*`` keys for this
    bolt only. A batch run (spark-run) leaves it out (``live_output``).
    """

    live_output = True
    # Delivery reports taken by a thread of the bolt's (TransactionalKafkaBolt keeps every
    # producer call on the executor's thread: its transactions' calls and polls interleave).
    background_reports = True
    _wake: Callable[[], None] | None = None

    def __init__(self, topic: str | Callable[[Any], str], *, key: Mapper = "key", value: Mapper = "value",
                 headers: Mapper = "headers", failed_stream: bool = False, bootstrap_servers: str | None = None,
                 client_config: dict[str, Any] | None = None, conf: dict[str, Any] | None = None) -> None:
        self.topic_of = TopicSelector(topic) if isinstance(topic, str) else topic
        self.key_of = FieldMapper(key) if isinstance(key, str) else key
        self.value_of = FieldMapper(value) if isinstance(value, str) else value
        self.headers_of = FieldMapper(headers) if isinstance(headers, str) else headers
        for what, f in (("topic", self.topic_of), ("key", self.key_of), ("value", self.value_of),
                        ("headers", self.headers_of)):
            if not callable(f):
                raise TypeError(f"KafkaBolt {what} must be a name or a callable")
        self.failed_stream = failed_stream
        self.bootstrap_servers = bootstrap_servers
        self.conf = component_conf(conf, client_config, "KafkaBolt")

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        if self.failed_stream:
            declarer.declare_stream(FAILED_STREAM, list(REFUSED_FIELDS))

    def component_config(self) -> dict[str, Any] | None:
        return {**self.conf, "topology.tick.tuple.freq.secs": TICK_SECS}

    # -- the producer ------------------------------------------------------------------------
    def producer_config(self, conf: Mapping[str, Any]) -> dict[str, Any]:
        props = client_config(conf, None, self.bootstrap_servers)
        props.update({"enable.idempotence": True, "acks": "all",
                      "delivery.timeout.ms": int(conf["kafka.bolt.delivery.timeout.ms"]),
                      "error_cb": self._on_error})
        props.setdefault("linger.ms", 5)
        return props

    def _on_error(self, err: Any) -> None:
        """The client's error callback: queued when the report thread runs it, else handled."""
        if self._report_thread is not None:
            self._errors.append(err)
        else:
            self._client_error(err)

    def attach_wake(self, wake: Callable[[], None]) -> None:
        """The executor's ``wake`` (squall.runtime.executor): the report thread calls it when
        reports came, and the executor then calls ``woken`` on its own thread."""
        self._wake = wake

    def woken(self) -> None:
        self._wake_pending = False
        self._produce_batch()
        self._serve(0)

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self._report_thread: threading.Thread | None = None
        self._errors: deque[Any] = deque(maxlen=ERRORS_HELD)
        self._wake_pending = False
        self.collector = collector
        self.log = log.bind(topology=context.topology_id, component=context.this_component_id,
                            task=context.this_task_id)
        self.ck = confluent()
        props = self.producer_config(conf)
        b = float(conf["kafka.spout.metrics.time.bucket.secs"])
        self._client_error = ClientErrors(context, self.log, b, str(props["bootstrap.servers"]), "write records",
                                          collector.report_error)
        try:
            self.producer = self.ck.Producer(props)
        except self.ck.KafkaException as exc:
            raise KafkaConfigError(f"cannot make a Kafka producer: {exc}") from None
        self.max_in_flight = int(conf["kafka.bolt.max.in.flight"])
        self.full_wait = conf["kafka.bolt.full.wait.ms"] / 1000.0
        self.in_flight = 0
        self.failures = 0  # delivery failures so far (a checkpoint's PREPARE must see none)
        # Appended by the delivery callbacks (on the report thread or in this thread's poll),
        # taken on the executor's thread: a deque, whose append and popleft are thread-safe.
        self._reports: deque[tuple[Any, Any, Any]] = deque()
        # Records of this turn of the executor, handed to the producer in one call when the
        # turn ends (the executor's wake, ``ready``, a tick), and the batches whose reports
        # have all come (squall.contrib.kafka.batches). Without a wake, or with a client that
        # lacks produce_batch (before confluent-kafka 2.12), each record goes at once.
        self._batch_topic = ""
        self._tups: list[Any] = []
        self._msgs: list[dict[str, Any]] = []
        self._done: deque[Batch] = deque()
        self._batching = self._wake is not None and hasattr(self.producer, "produce_batch")
        # execute's fast path: batching, the default mappers, one topic (source -> positions).
        self._fast: dict[Any, tuple[int | None, int | None] | None] | None = None
        self._has_failed_stream = FAILED_STREAM in context.this_output_streams()
        # The default mappings (fields by name, one topic) read by position (``map``).
        plain = all(type(m) is FieldMapper for m in (self.key_of, self.value_of, self.headers_of))
        self._by_position: dict[Any, tuple[int | None, int | None, int | None]] | None = (
            {} if plain and type(self.topic_of) is TopicSelector else None)
        self._topic = self.topic_of.topic if isinstance(self.topic_of, TopicSelector) else ""
        if self._batching and self._by_position is not None:
            self._fast = {}
        self.m_written = context.register_metric("kafka_records_written", CountMetric(), b)
        self.m_failed = context.register_metric("kafka_write_failures", CountMetric(), b)
        self.m_refused = context.register_metric("kafka_writes_refused", MultiCountMetric("reason"), b)
        self.m_in_flight = context.register_metric("kafka_in_flight", GaugeMetric(), b)
        self.m_held = context.register_metric("kafka_bolt_held", CountMetric(), b)
        self._stop_reports = threading.Event()
        if self.background_reports and self._wake is not None:
            self._report_thread = threading.Thread(target=self._take_reports, daemon=True,
                                                   name=f"kafka-reports-{context.this_task_id}")
            self._report_thread.start()

    def _take_reports(self) -> None:
        """The report thread: the producer's callbacks run in its poll; the executor is woken
        to settle what they queued (once until it has looked)."""
        producer, stop, reports = self.producer, self._stop_reports, self._reports
        while not stop.is_set():
            try:
                producer.poll(REPORT_POLL_SECS)
            except Exception as exc:  # noqa: BLE001 - queued for the executor; polling goes on
                self._errors.append(exc)
                stop.wait(REPORT_POLL_SECS)  # a poll that keeps failing does not spin
            if (reports or self._done or self._errors) and not self._wake_pending and self._wake is not None:
                self._wake_pending = True
                self._wake()

    def _stop_report_thread(self) -> None:
        if self._report_thread is not None:
            self._stop_reports.set()
            self._report_thread.join(REPORT_POLL_SECS * 4)
            self._report_thread = None

    def ready(self) -> bool:
        self._produce_batch()  # the last turn's records, if the wake has not sent them yet
        self._serve(0)  # once per batch of input: the reports that came meanwhile
        if self.in_flight < self.max_in_flight:
            return True
        self.m_held.incr()
        return False

    # -- writing -----------------------------------------------------------------------------
    def execute(self, tup: Any) -> None:
        fast = self._fast
        if fast is not None:  # batching with the default mappers: a tuple's fields by position
            try:
                where = fast[tup.source]
            except KeyError:
                where = self._fast_positions(tup.source)
            if where is not None:
                k, v = where
                values = tup.values
                key = None if k is None else values[k]
                value = None if v is None else values[v]
                if type(key) is str:
                    key = key.encode("utf-8")
                if type(value) is str:
                    value = value.encode("utf-8")
                if (type(key) is bytes or key is None) and (type(value) is bytes or value is None):
                    self._gather(tup, self._topic, key, value)
                    return
        if tup.source.stream == TICK_STREAM:
            self._produce_batch()
            self._serve(0)
            return
        record = self.map(tup)
        if record is None:
            return
        if self._batching and record[3] is None:  # produce_batch cannot carry headers
            self._gather(tup, record[0], record[1], record[2])
        else:
            self._produce_batch()  # records go out in the order they came
            self.send(tup, record)

    def _gather(self, tup: Any, topic: str, key: bytes | None, value: bytes | None) -> None:
        """Keep a record for this turn's batch (sent when the turn ends, or at BATCH_RECORDS)."""
        if topic is not self._batch_topic and topic != self._batch_topic:
            self._produce_batch()  # one batch, one topic
            self._batch_topic = topic
        tups = self._tups
        tups.append(tup)
        self._msgs.append({"key": key, "value": value})
        self.in_flight += 1
        n = len(tups)
        if n >= BATCH_RECORDS:
            self._produce_batch()
        elif n == 1 and not self._wake_pending:  # sent when this turn ends
            self._wake_pending = True
            self._wake()  # type: ignore[misc]  # batching: there is a wake

    def _fast_positions(self, source: Any) -> tuple[int | None, int | None] | None:
        """Where the key and value sit in tuples from ``source``, for ``execute``'s fast
        path; None for sources it does not take (ticks, tuples with a headers field)."""
        fast = self._fast
        assert fast is not None and self._by_position is not None
        if len(fast) >= 4096:  # bounded: sources are few (tasks x streams)
            fast.clear()
        if source.stream == TICK_STREAM:
            where = None
        else:
            k, v, h = self._by_position.get(source) or self._positions(source)
            where = (k, v) if h is None else None
        fast[source] = where
        return where

    def map(self, tup: Any) -> tuple[str, Any, Any, Any] | None:
        """(topic, key, value, headers) of a tuple; None (and the tuple failed) when the
        mapping raises."""
        if self._by_position is not None:
            where = self._by_position.get(tup.source)
            if where is None:
                where = self._positions(tup.source)
            k, v, h = where
            values = tup.values
            key: Any = None if k is None else values[k]
            value: Any = None if v is None else values[v]
            tk, tv = type(key), type(value)
            if ((tk is bytes or tk is str or key is None) and (tv is bytes or tv is str or value is None)
                    and (h is None or values[h] is None)):
                return (self._topic, key.encode("utf-8") if tk is str else key,
                        value.encode("utf-8") if tv is str else value, None)
        try:
            return (self.topic_of(tup), to_bytes(self.key_of(tup)), to_bytes(self.value_of(tup)),
                    to_headers(self.headers_of(tup)))
        except Exception as exc:  # noqa: BLE001 - the mapping's error: fail, the spout decides
            self.collector.report_error(f"KafkaBolt cannot map a tuple: {type(exc).__name__}: {exc}")
            self.collector.fail(tup)
            return None

    def _positions(self, source: Any) -> tuple[int | None, int | None, int | None]:
        """Where the default mappers' fields sit in tuples from ``source`` (None: absent)."""
        fields = source.fields
        cache = self._by_position
        assert cache is not None  # map reads by position only with the default mappers
        if len(cache) >= 4096:  # bounded: sources are few (tasks x streams)
            cache.clear()
        names = [cast(FieldMapper, m).field for m in (self.key_of, self.value_of, self.headers_of)]
        k, v, h = (fields.index(n) if n in fields else None for n in names)
        cache[source] = (k, v, h)
        return k, v, h

    def send(self, tup: Any, record: tuple[str, Any, Any, Any]) -> bool:
        """Hand a record to the producer; its report settles ``tup``. False when it was not
        taken (the tuple is settled already: refused or failed)."""
        topic, key, value, headers = record
        reports = self._reports
        try:
            self.producer.produce(topic, value, key, headers=headers,
                                  on_delivery=lambda err, msg: reports.append((tup, err, record)))
        except BufferError:  # librdkafka's own queue is full (its limits below max.in.flight)
            if not self._wait_for_room(record, tup):
                self.m_failed.incr()
                self.collector.fail(tup)
                return False
        except self.ck.KafkaException as exc:  # e.g. a record over message.max.bytes
            self._refused(tup, record, exc.args[0] if exc.args else exc)
            return False
        except Exception as exc:  # noqa: BLE001 - a type the client does not take
            self._refused(tup, record, exc)
            return False
        self.in_flight += 1
        return True

    def _produce_batch(self) -> None:
        """Hand the gathered records to the producer in one call; those it does not take
        at once are treated as ``send`` treats them (a full queue waited for, a refusal
        reported)."""
        tups = self._tups
        if not tups:
            return
        msgs, topic = self._msgs, self._batch_topic
        self._tups, self._msgs = [], []
        batch = Batch(topic, tups, msgs, self._done)
        try:
            good = self.producer.produce_batch(topic, msgs, on_delivery=batch.report)
        except Exception:  # noqa: BLE001 - the call as a whole (e.g. a bad topic name): one by one
            batch.taken([], [])
            self.in_flight -= len(tups)
            for i, tup in enumerate(tups):
                self.send(tup, batch.record(i))
            return
        if good == len(tups):
            batch.taken(tups, msgs)
            return
        kept = [i for i, m in enumerate(msgs) if "_error" not in m]
        batch.taken([tups[i] for i in kept], [msgs[i] for i in kept])
        for i, m in enumerate(msgs):
            err = m.get("_error")
            if err is None:
                continue
            self.in_flight -= 1
            tup, record = tups[i], (topic, m["key"], m["value"], None)
            if err.code() == self.ck.KafkaError._QUEUE_FULL:  # librdkafka's own limits
                if self._wait_for_room(record, tup):
                    self.in_flight += 1
                else:
                    self.m_failed.incr()
                    self.collector.fail(tup)
            else:
                self._refused(tup, record, err)

    def _wait_for_room(self, record: tuple[str, Any, Any, Any], tup: Any) -> bool:
        topic, key, value, headers = record
        reports = self._reports
        deadline = time.monotonic() + self.full_wait
        while time.monotonic() < deadline:
            self._serve(0.01)
            try:
                self.producer.produce(topic, value, key, headers=headers,
                                      on_delivery=lambda err, msg: reports.append((tup, err, record)))
                return True
            except BufferError:
                continue
        return False

    def _serve(self, timeout: float) -> None:
        """Run delivery reports: ack what the broker has, fail or refuse the rest."""
        if timeout > 0 or self._report_thread is None:
            self.producer.poll(timeout)
        errors = self._errors
        while errors:
            self._client_error(errors.popleft())
        batches = self._done
        while batches:
            batch = batches.popleft()
            if batch.settled:
                continue  # queued twice (see squall.contrib.kafka.batches)
            batch.settled = True
            self.in_flight -= batch.n
            self.m_in_flight.set(self.in_flight)
            acks, failed = batch.outcomes()
            self._acked(acks)
            if failed:
                self.settle(failed)
        reports = self._reports  # the callbacks append here
        if not reports:
            return
        done = [reports.popleft() for _ in range(len(reports))]
        self.in_flight -= len(done)
        self.m_in_flight.set(self.in_flight)
        self.settle(done)

    def _acked(self, tuples: list[Any]) -> None:
        """Records the broker has: their tuples acked."""
        if not tuples:
            return
        ack = self.collector.ack
        for tup in tuples:
            ack(tup)
        self.m_written.incr(len(tuples))
        if self._client_error.down_since is not None:
            self._client_error.answered()

    def settle(self, done: list[tuple[Any, Any, Any]]) -> None:
        fail = self.collector.fail
        written = []
        for tup, err, record in done:
            if err is None:
                written.append(tup)
            elif refusal(err) is not None:
                self._refused(tup, record, err)
            else:
                self.m_failed.incr()
                self.failures += 1
                fail(tup)
        self._acked(written)

    def _refused(self, tup: Any, record: tuple[str, Any, Any, Any], err: Any) -> None:
        """The broker (or the client, before sending) will never take this record."""
        reason = refusal(err) or type(err).__name__
        text = f"{reason}: {err}"[:500]
        self.m_refused.incr(reason)
        self.collector.report_error(f"KafkaBolt: record to {record[0]!r} refused: {text}")
        if not self._has_failed_stream:
            self.collector.fail(tup)
            return
        topic, key, value, headers = record
        headers = [*(headers or ()), (REASON_HEADER, text.encode("utf-8"))]
        self.collector.emit([topic, key, value, headers, text], stream=FAILED_STREAM, anchors=[tup])
        self.collector.ack(tup)

    def pre_prepare(self, txid: int) -> None:
        """In a checkpointed topology: before a checkpoint covers the tuples this bolt took,
        their records must be with the broker (else a failure after the checkpoint would
        lose them: the spouts replay only what no checkpoint covers)."""
        failed = self.failures
        self._produce_batch()
        self.producer.flush(PREPARE_FLUSH_SECS)
        self._serve(0)
        if self.in_flight:
            raise TimeoutError(f"{self.in_flight} records not delivered within {PREPARE_FLUSH_SECS:.0f}s")
        if self.failures != failed:
            raise RuntimeError("records failed while the checkpoint waited for them; rolling back")

    def cleanup(self) -> None:
        self._stop_report_thread()
        try:
            self._produce_batch()
            self.producer.flush(10)
            self._serve(0)
        except Exception:  # noqa: BLE001 - shutting down: unconfirmed tuples time out and replay
            pass
