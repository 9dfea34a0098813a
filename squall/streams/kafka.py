"""Kafka at the ends of a pipeline: thin wrappers over squall.contrib.kafka's
``KafkaSpout`` and ``KafkaBolt`` (their settings, offsets, retries and acks are theirs).

    words = kafka_source(builder, "sentences", group_id="wc")           # Stream of str
    kafka_sink(words.map_to_pair(...).count_by_key().map_values(str), "counts")

A backfill reads the same topic: ``squall spark-run FILE --input SOURCE=kafka:TOPIC``.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from squall.contrib.kafka import JsonTranslator, KafkaBolt, KafkaSpout, StringTranslator
from squall.streams.builder import StreamBuilder
from squall.streams.stream import PairStream, Stream

T = TypeVar("T")

DECODERS = {"text": StringTranslator, "json": JsonTranslator}


def kafka_source(builder: StreamBuilder, topics: str | Sequence[str], *, group_id: str, decode: str = "text",
                 event_time: bool = False, parallelism: int = 1, name: str | None = None,
                 **spout_options: Any) -> Stream[Any]:
    """A stream of the records' values (``decode``: "text" or "json"), read by a
    ``KafkaSpout`` in consumer group ``group_id``; ``event_time``: the records' own
    timestamps are the values' event time. Other options go to the spout."""
    if decode not in DECODERS:
        raise ValueError(f"decode must be one of {sorted(DECODERS)}, got {decode!r}")
    spout = KafkaSpout(topics, group_id=group_id, translator=DECODERS[decode](), **spout_options)
    return builder.new_stream(spout, "value", timestamp="timestamp" if event_time else None,
                              parallelism=parallelism, name=name or "kafka")


def kafka_sink(stream: Stream[Any], topic: str, *, encode: Callable[[Any], str | bytes] | None = None,
               parallelism: int = 1, name: str | None = None, **bolt_options: Any) -> None:
    """Write the stream's values to ``topic`` through a ``KafkaBolt`` (a pair stream's keys
    as the records' keys); ``encode`` turns a value into text or bytes first (values that
    are text or bytes already need none). A value is acked once the broker has it."""
    if encode is not None:
        stream = (stream.map_values(encode, name="encode") if isinstance(stream, PairStream)
                  else stream.map(encode, name="encode"))
    key: Any = "key" if isinstance(stream, PairStream) else _no_key
    stream.to(KafkaBolt(topic, key=key, value="value", **bolt_options), parallelism, name=name or "kafka")


def _no_key(tup: Any) -> None:
    return None


__all__ = ["kafka_sink", "kafka_source"]
