"""Backfills from Kafka: ``spark-run --input SPOUT=kafka:...`` reads an offset range of the
spout's topics in Spark's Python workers, through the spout's own translator, so a backfill
gives the values the live topology saw.

The range is per partition, from ``from`` to ``to`` (exclusive): ``earliest``, ``latest``,
an offset, or ``ts:MILLIS`` (the first offset at or after that time); ``to`` may also be
``committed`` (the default): the spout's consumer group's committed offset, i.e. exactly
what the live topology has finished. The driver resolves the ranges; each partition is one
part of the input stage (one Spark task when there are as many cores). Records the
translator cannot decode are counted and listed as malformed input, as the live spout
reports them. Secrets (``kafka.secrets``) are resolved where each client is made, from
that process's environment or files: they are never shipped with the plan.
"""
from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any
from urllib.parse import parse_qsl

from squall.contrib.kafka.client import KafkaConfigError, client_config, confluent
from squall.contrib.kafka.settings import OFFSET_BEGINNING
from squall.contrib.kafka.translator import RecordTranslator, checked
from squall.contrib.sources import SOURCES, BackfillError, SourceScheme

SCHEME = "kafka:"
OPTIONS = ("topics", "group", "from", "to", "bootstrap")
TIMEOUT = 30.0  # driver requests (metadata, watermarks, committed offsets)


Range = tuple[str, int, int, int]  # topic, partition, start (maybe logical), end (exclusive)


class KafkaInput:
    """An offset range of the spout's topics to backfill. Options default to the spout's
    (topics, group, bootstrap servers) and to ``from=earliest``, ``to=committed``."""

    def __init__(self, topics: list[str] | None = None, group: str | None = None, start: str = "earliest",
                 end: str = "committed", bootstrap: str | None = None) -> None:
        self.topics, self.group, self.start, self.end, self.bootstrap = topics, group, start, end, bootstrap
        for what, bound in (("from", start), ("to", end)):
            _bound(what, bound)

    @classmethod
    def parse(cls, text: str) -> "KafkaInput":
        """``kafka:[TOPIC,...][?from=..&to=..&group=..&bootstrap=..]``."""
        if not text.startswith(SCHEME):
            raise BackfillError(f"{text!r} is not a kafka: input")
        body = text[len(SCHEME):]
        names, _, query = body.partition("?")
        opts = dict(parse_qsl(query, keep_blank_values=True, strict_parsing=False)) if query else {}
        unknown = sorted(set(opts) - set(OPTIONS))
        if unknown:
            raise BackfillError(f"kafka input: unknown option {unknown[0]!r} (known: {', '.join(OPTIONS)})")
        topics = [t for t in (names or opts.get("topics", "")).split(",") if t] or None
        return cls(topics, opts.get("group") or None, opts.get("from", "earliest"), opts.get("to", "committed"),
                   opts.get("bootstrap") or None)

    def __repr__(self) -> str:
        return f"KafkaInput(topics={self.topics!r}, group={self.group!r}, from={self.start!r}, to={self.end!r})"

    def prepare_source(self, key: str, fields: list[str], spout: Any, conf: Mapping[str, Any]) -> "KafkaSource":
        """Resolve the ranges on the driver (asks the broker)."""
        translator = checked(getattr(spout, "translator", None) or RecordTranslator())
        if list(translator.fields) != list(fields):
            raise BackfillError(f"input {key!r}: the translator's fields {list(translator.fields)} are not the "
                                f"spout stream's {list(fields)}")
        topics = self.topics or getattr(spout, "topics", None)
        group = self.group or getattr(spout, "group_id", None)
        if not topics:
            raise BackfillError(f"input {key!r}: name the topics (kafka:TOPIC,...); the spout gives none")
        if self.end == "committed" and not group:
            raise BackfillError(f"input {key!r}: to=committed needs a consumer group (group=...)")
        own = dict(conf)
        if getattr(spout, "conf", None):
            own.update(spout.conf)
        bootstrap = self.bootstrap or getattr(spout, "bootstrap_servers", None)
        ranges = resolve_ranges(own, bootstrap, topics, group, self.start, self.end, key)
        return KafkaSource(key, ranges, translator, {k: v for k, v in own.items() if k.startswith("kafka.")},
                           bootstrap, float(own.get("kafka.backfill.poll.timeout.secs", 60)))


def _bound(what: str, value: str) -> None:
    if value in ("earliest", "latest") or (what == "to" and value == "committed"):
        return
    text = value[3:] if value.startswith("ts:") else value
    if not text.isdigit():
        raise BackfillError(f"kafka input: {what}={value!r} is not earliest, latest, "
                            f"{'committed, ' if what == 'to' else ''}an offset or ts:MILLIS")


def resolve_ranges(conf: Mapping[str, Any], bootstrap: str | None, topics: list[str], group: str | None,
                   start: str, end: str, key: str) -> list[Range]:
    ck = confluent()
    try:
        props = client_config(conf, None, bootstrap)
    except KafkaConfigError as exc:
        raise BackfillError(f"input {key!r}: {exc}") from None
    props.update({"group.id": group or f"squall-backfill-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False})
    consumer = ck.Consumer(props)
    try:
        md = consumer.list_topics(timeout=TIMEOUT)
        tps = []
        for topic in topics:
            meta = md.topics.get(topic)
            if meta is None or meta.error is not None:
                raise BackfillError(f"input {key!r}: topic {topic!r} does not exist")
            tps += [ck.TopicPartition(topic, p) for p in sorted(meta.partitions)]
        marks = {(tp.topic, tp.partition): consumer.get_watermark_offsets(tp, timeout=TIMEOUT) for tp in tps}
        done = {}
        if end == "committed":
            done = {(tp.topic, tp.partition): tp.offset for tp in consumer.committed(tps, timeout=TIMEOUT)}
        out = []
        for tp in tps:
            k = (tp.topic, tp.partition)
            high = marks[k][1]
            lo = _resolve(consumer, ck, tp, start, high)
            hi = done.get(k, -1) if end == "committed" else _resolve(consumer, ck, tp, end, high)
            if hi < 0:
                continue  # nothing committed (or no end): nothing to read
            if lo >= 0 and hi <= lo:
                continue
            out.append((tp.topic, tp.partition, lo, hi))
        return out
    except ck.KafkaException as exc:
        raise BackfillError(f"input {key!r}: the broker did not answer: {exc}") from None
    finally:
        consumer.close()


def _resolve(consumer: Any, ck: Any, tp: Any, bound: str, high: int) -> int:
    if bound == "earliest":
        return OFFSET_BEGINNING
    if bound == "latest":
        return high
    if bound.startswith("ts:"):
        found = consumer.offsets_for_times([ck.TopicPartition(tp.topic, tp.partition, int(bound[3:]))],
                                           timeout=TIMEOUT)[0]
        return found.offset if found.offset >= 0 else high
    return int(bound)


class KafkaSource:
    """The part of a Kafka input that workers need: ranges, translator, client settings."""

    kind = "kafka"

    def __init__(self, key: str, ranges: list[Range], translator: Any, conf: dict[str, Any],
                 bootstrap: str | None, idle_timeout: float) -> None:
        self.key, self.ranges, self.translator = key, ranges, translator
        self.conf, self.bootstrap, self.idle_timeout = conf, bootstrap, idle_timeout

    @property
    def max_width(self) -> int:
        return max(1, len(self.ranges))

    def cut(self, width: int) -> list[list[Range]]:
        """Partitions dealt over ``width`` parts (one each when width is the partition count)."""
        return [self.ranges[i::width] for i in range(width)]

    def read(self, ranges: list[Range], malformed: Callable[[str], None]) -> Iterator[list]:
        ck = confluent()
        props = client_config(self.conf, None, self.bootstrap)
        props.update({"group.id": f"squall-backfill-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
                      "enable.auto.offset.store": False})
        translate = self.translator.translate
        for topic, partition, start, end in ranges:
            consumer = ck.Consumer(props)
            try:
                yield from self._read_one(consumer, ck, topic, partition, start, end, translate, malformed)
            finally:
                consumer.close()

    def _read_one(self, consumer: Any, ck: Any, topic: str, partition: int, start: int, end: int,
                  translate: Callable, malformed: Callable[[str], None]) -> Iterator[list]:
        tp = ck.TopicPartition(topic, partition, start)
        consumer.assign([tp])
        last_seen = time.monotonic()
        while True:
            msgs = consumer.consume(500, 1.0)
            for m in msgs:
                if m.error() is not None:
                    continue
                off = m.offset()
                if off >= end:
                    return
                try:
                    values = translate(m)
                except Exception as exc:  # noqa: BLE001 - undecodable, as the live spout reports it
                    malformed(f"{topic}-{partition}@{off}: undecodable: {type(exc).__name__}: {exc}"[:500])
                    continue
                if values is not None:
                    yield values
                if off >= end - 1:
                    return
            now = time.monotonic()
            if msgs:
                last_seen = now
                continue
            pos = consumer.position([ck.TopicPartition(topic, partition)])[0].offset
            if pos >= end:
                return  # the last offsets were markers or compacted away
            if now - last_seen > self.idle_timeout:
                raise BackfillError(f"input {self.key!r}: no record of {topic}-{partition} for "
                                    f"{self.idle_timeout:.0f}s before offset {end} (at {pos})")


SOURCES.register("kafka", SourceScheme(
    "kafka", KafkaInput.parse, "an offset range of the spout's topics, read through its translator",
    example="kafka:orders,refunds?from=earliest&to=committed&group=orders-app"), __name__)
