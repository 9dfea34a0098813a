"""KafkaBolt: tuples written as records (Storm's KafkaBolt), acked when the broker confirms.

A tuple becomes a record through a key mapper, a value mapper and a topic selector (by
default the tuple's ``key`` and ``value`` fields to one topic). The producer is idempotent
(no duplicates or reordering from its own retries). Each record's delivery report acks its
tuple, or fails it (the spout replays) when the broker refuses it or does not confirm it
within ``kafka.bolt.delivery.timeout.ms``. Reports are served on the bolt's own thread at
every input and at tick tuples (``topology.tick.tuple.freq.secs`` is set for the bolt), so
acks never wait long. At most ``kafka.bolt.max.in.flight`` records wait for a report; past
that a tuple waits up to ``kafka.bolt.full.wait.ms`` for room and then fails, which holds
the spouts back (through their pending bound and retries) instead of growing memory.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import structlog

from squall.components import Bolt
from squall.contrib.kafka.client import ClientErrors, KafkaConfigError, client_config, component_conf, confluent
from squall.metrics import CountMetric
from squall.tuple import TICK_STREAM

log = structlog.get_logger("squall.contrib.kafka")
TICK_SECS = 0.1  # how often delivery reports are served without input


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


def to_bytes(value: Any) -> bytes | None:
    """A record key or value: bytes as they are, text as UTF-8, None as none; other types
    are the mapper's job (a TypeError fails the tuple)."""
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"a record key or value must be bytes or str, not {type(value).__name__}")


class KafkaBolt(Bolt):
    """Writes each input tuple to Kafka and acks it once the broker has it.

    topic: a topic name or a selector ``f(tuple) -> topic``; key / value: a field name or
    ``f(tuple) -> bytes | str | None``. client_config: librdkafka producer properties (no
    secrets; see ``kafka.secrets``); conf: ``kafka.*`` keys for this bolt only.
    """

    def __init__(self, topic: str | Callable[[Any], str], *, key: str | Callable[[Any], Any] = "key",
                 value: str | Callable[[Any], Any] = "value", bootstrap_servers: str | None = None,
                 client_config: dict[str, Any] | None = None, conf: dict[str, Any] | None = None) -> None:
        self.topic_of = TopicSelector(topic) if isinstance(topic, str) else topic
        self.key_of = FieldMapper(key) if isinstance(key, str) else key
        self.value_of = FieldMapper(value) if isinstance(value, str) else value
        for what, f in (("topic", self.topic_of), ("key", self.key_of), ("value", self.value_of)):
            if not callable(f):
                raise TypeError(f"KafkaBolt {what} must be a name or a callable")
        self.bootstrap_servers = bootstrap_servers
        self.conf = component_conf(conf, client_config, "KafkaBolt")

    def component_config(self) -> dict[str, Any] | None:
        return {**self.conf, "topology.tick.tuple.freq.secs": TICK_SECS}

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self.collector = collector
        self.log = log.bind(topology=context.topology_id, component=context.this_component_id,
                            task=context.this_task_id)
        ck = confluent()
        props = client_config(conf, None, self.bootstrap_servers)
        props.update({"enable.idempotence": True, "acks": "all",
                      "delivery.timeout.ms": int(conf["kafka.bolt.delivery.timeout.ms"]),
                      "error_cb": lambda err: self._on_client_error(err)})
        props.setdefault("linger.ms", 5)
        try:
            self.producer = ck.Producer(props)
        except ck.KafkaException as exc:
            raise KafkaConfigError(f"cannot make a Kafka producer: {exc}") from None
        self.max_in_flight = int(conf["kafka.bolt.max.in.flight"])
        self.full_wait = conf["kafka.bolt.full.wait.ms"] / 1000.0
        self.in_flight = 0
        self._reports: list[tuple[Any, Any]] = []
        b = float(conf["kafka.spout.metrics.time.bucket.secs"])
        self.m_written = context.register_metric("kafka_records_written", CountMetric(), b)
        self.m_failed = context.register_metric("kafka_write_failures", CountMetric(), b)
        self.m_refused = context.register_metric("kafka_writes_refused_full", CountMetric(), b)
        self._on_client_error = ClientErrors(context, self.log, b)

    def execute(self, tup: Any) -> None:
        if tup.source.stream == TICK_STREAM:
            self._serve(0)
            return
        try:
            topic = self.topic_of(tup)
            key, value = to_bytes(self.key_of(tup)), to_bytes(self.value_of(tup))
        except Exception as exc:  # noqa: BLE001 - the mapping's error: fail, the spout decides
            self.collector.report_error(f"KafkaBolt cannot map a tuple: {type(exc).__name__}: {exc}")
            self.collector.fail(tup)
            return
        if self.in_flight >= self.max_in_flight and not self._wait_for_room():
            self.m_refused.incr()
            self.collector.fail(tup)
            return
        reports = self._reports
        try:
            self.producer.produce(topic, value, key, on_delivery=lambda err, msg: reports.append((tup, err)))
        except BufferError:  # librdkafka's own queue is full
            if not self._wait_for_room() or not self._produce_again(topic, value, key, tup):
                self.m_refused.incr()
                self.collector.fail(tup)
                return
        except Exception as exc:  # noqa: BLE001 - e.g. a record over message.max.bytes
            self.m_failed.incr()
            self.collector.report_error(f"KafkaBolt cannot write a record: {exc}")
            self.collector.fail(tup)
            return
        self.in_flight += 1
        self._serve(0)

    def _produce_again(self, topic: str, value: Any, key: Any, tup: Any) -> bool:
        reports = self._reports
        try:
            self.producer.produce(topic, value, key, on_delivery=lambda err, msg: reports.append((tup, err)))
            return True
        except BufferError:
            return False

    def _wait_for_room(self) -> bool:
        deadline = time.monotonic() + self.full_wait
        while True:
            self._serve(0.01)
            if self.in_flight < self.max_in_flight and len(self.producer) < self.max_in_flight:
                return True
            if time.monotonic() >= deadline:
                return False

    def _serve(self, timeout: float) -> None:
        """Run delivery reports: ack what the broker has, fail what it refused."""
        self.producer.poll(timeout)
        reports = self._reports  # the callbacks (run inside poll, on this thread) append here
        if not reports:
            return
        done = reports[:]
        reports.clear()
        ack, fail = self.collector.ack, self.collector.fail
        written = 0
        for tup, err in done:
            if err is None:
                ack(tup)
                written += 1
            else:
                self.m_failed.incr()
                fail(tup)
        self.in_flight -= len(done)
        self.m_written.incr(written)

    def cleanup(self) -> None:
        try:
            self.producer.flush(10)
            self._serve(0)
        except Exception:  # noqa: BLE001 - shutting down: unconfirmed tuples time out and replay
            pass
