"""Record translators: a Kafka record to the values of a tuple (Storm's RecordTranslator).

A translator is given the record as the consumer hands it over (``topic()``,
``partition()``, ``offset()``, ``key()``, ``value()``, ``timestamp()``, ``headers()``: a
confluent-kafka ``Message``, or a ``Record`` in tests and tools) and returns the values
for its declared ``fields``, or None to skip the record (it counts as done). Raising is
the record being *undecodable*: the spout reports it, counts it per partition, emits it
on the ``failed`` stream if the spout declares one, and commits past it once that is
done; it is never retried, since decoding it again gives the same answer. The live spout
and a Spark backfill of the same topic run the same translator, so both see the same values.

``timestamp`` is the record's time in seconds (float; None when the record has none), the
unit event-time windows use.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from squall.contrib.jsonl import DEFAULT_MAX_DEPTH, json_value

DEFAULT_FIELDS = ("topic", "partition", "offset", "key", "value", "timestamp")
FAILED_STREAM = "failed"
# What the ``failed`` stream carries: where the record was, its raw bytes, why, and the
# headers a dead letter keeps (the record's own, then the reason and origin: records.py).
FAILED_FIELDS = ("topic", "partition", "offset", "key", "value", "reason", "headers")


class Record:
    """A Kafka record with the accessors of confluent-kafka's ``Message`` (for tests and
    tools that have no consumer)."""

    __slots__ = ("_topic", "_partition", "_offset", "_key", "_value", "_timestamp", "_headers")

    def __init__(self, topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None,
                 timestamp_ms: int | None = None, headers: list[tuple[str, bytes]] | None = None) -> None:
        self._topic, self._partition, self._offset = topic, partition, offset
        self._key, self._value, self._headers = key, value, headers
        self._timestamp = (1, timestamp_ms) if timestamp_ms is not None else (0, -1)

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def timestamp(self) -> tuple[int, int]:
        return self._timestamp

    def headers(self) -> list[tuple[str, bytes]] | None:
        return self._headers


def seconds(record: Any) -> float | None:
    kind, ms = record.timestamp()
    return ms / 1000.0 if kind else None


class RecordTranslator:
    """Raw records: topic, partition, offset, key and value as bytes, timestamp in seconds."""

    fields: Sequence[str] = DEFAULT_FIELDS

    def translate(self, record: Any) -> list[Any] | None:
        kind, ms = record.timestamp()
        return [record.topic(), record.partition(), record.offset(), record.key(), record.value(),
                ms / 1000.0 if kind else None]


class StringTranslator(RecordTranslator):
    """Key and value decoded as text (``encoding``, strictly: bad bytes are undecodable)."""

    def __init__(self, encoding: str = "utf-8") -> None:
        "".encode(encoding)  # an unknown encoding fails here, at build time
        self.encoding = encoding

    def translate(self, record: Any) -> list[Any] | None:
        kind, ms = record.timestamp()
        key, value, enc = record.key(), record.value(), self.encoding
        return [record.topic(), record.partition(), record.offset(),
                None if key is None else key.decode(enc), None if value is None else value.decode(enc),
                ms / 1000.0 if kind else None]


class JsonTranslator(RecordTranslator):
    """The value parsed as JSON (the key as UTF-8 text) by the JSON-lines rules
    (``squall.contrib.jsonl.json_value``: UTF-8 only, no NaN or Infinity, integers of any
    size, nesting up to ``max_depth``); a value they refuse is undecodable, as a line of a
    JSON-lines file is malformed, so live, backfill and files agree on every record."""

    def __init__(self, max_depth: int = DEFAULT_MAX_DEPTH) -> None:
        self.max_depth = max_depth

    def translate(self, record: Any) -> list[Any] | None:
        kind, ms = record.timestamp()
        key, value = record.key(), record.value()
        if value is None:
            raise ValueError("the record has no value (a tombstone), not JSON")
        return [record.topic(), record.partition(), record.offset(),
                None if key is None else key.decode("utf-8"), json_value(value, self.max_depth),
                ms / 1000.0 if kind else None]


class FunctionTranslator(RecordTranslator):
    """``fn(record) -> values or None`` with the fields it returns; ``fn`` must be picklable
    (defined at module level) to ship with the topology."""

    def __init__(self, fn: Callable[[Any], list[Any] | None], fields: Sequence[str]) -> None:
        if not callable(fn):
            raise TypeError("FunctionTranslator needs a callable")
        self.fn, self.fields = fn, tuple(fields)

    def translate(self, record: Any) -> list[Any] | None:
        return self.fn(record)


def checked(translator: Any) -> Any:
    """``translator`` if it has fields and translate, else TypeError naming what is missing."""
    fields = getattr(translator, "fields", None)
    if not callable(getattr(translator, "translate", None)) or not fields \
            or not all(isinstance(f, str) for f in fields):
        raise TypeError(f"{type(translator).__name__} is not a record translator: it needs "
                        "translate(record) and fields (a list of names)")
    return translator
