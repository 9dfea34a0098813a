"""Sink streams out of a batch run: exact value lists, typed DataFrames, JSON lines.

A sink's records are the value lists its component emitted, exactly (``records``: they
leave their stage in the encoding every boundary uses, squall.values). As
a DataFrame (and so as Parquet) each field becomes one column of the single type its
values share (``squall.contrib.columns``); values that no one column type holds unchanged
make ``frame`` raise an error naming the field and the types. As JSON lines every row
is one object ``{field: value}`` in declared field order, written from Python with no
type inference, so every JSON value keeps its type; a value JSON cannot hold exactly
(bytes, dates, NaN, a dict with non-string keys, an int subclass, ...) ends the write
with an error naming the sink and field.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from squall.contrib.columns import ColumnTypes
from squall.errors import SquallError
from squall.spark.plan import BackfillError
from squall.spark.schema import spark_schema
from squall.values import ValueCodec

_JSON_SCALARS = frozenset({str, int, bool, float, type(None)})


class SinkValueError(SquallError, ValueError):
    """A sink value that the chosen output cannot hold unchanged."""


class SinkItems:
    """Filter: the records of one sink among a stage's output."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, item: tuple) -> bool:
        return item[0] == self.name


class Rows:
    """Flat-map: the value lists of one batch of sink records (``(name, payload)``)."""

    def __init__(self, serializers: Mapping[str, str]) -> None:
        self.serializers = dict(serializers)
        self._codec: ValueCodec | None = None

    def __getstate__(self) -> dict:
        return {"serializers": self.serializers, "_codec": None}

    def __call__(self, item: tuple) -> list:
        if self._codec is None:
            self._codec = ValueCodec(self.serializers)
        return self._codec.unpack(item[1])


def _json_problem(value: Any) -> str | None:
    """Why ``value`` cannot be JSON unchanged, or None."""
    stack = [value]
    while stack:
        v = stack.pop()
        t = type(v)
        if t is float:
            if v - v != 0.0:
                return f"float {v!r} is not JSON"
        elif t is list or t is tuple:
            stack.extend(v)
        elif t is dict:
            for k, x in v.items():
                if type(k) is not str:
                    return f"a dict key of type {type(k).__name__} ({k!r:.40}) would become a string"
                stack.append(x)
        elif t not in _JSON_SCALARS:
            return f"a {t.__module__}.{t.__qualname__} value is not JSON"
        elif t is str and not v.isascii():
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                return "a string holds a lone surrogate, which UTF-8 cannot carry"
    return None


class JsonLines:
    """Sink records -> JSON text lines (``mapPartitions``)."""

    def __init__(self, sink: str, fields: Sequence[str], serializers: Mapping[str, str]) -> None:
        self.sink, self.fields = sink, list(fields)
        self.rows = Rows(serializers)

    def encode(self, row: Sequence[Any]) -> str:
        fields = self.fields
        for f, v in zip(fields, row):
            t = type(v)
            if t is str or t is int or t is bool or v is None:
                continue
            why = _json_problem(v)
            if why is not None:
                raise SinkValueError(f"sink {self.sink!r} field {f!r}: {why}; JSON lines keep JSON values "
                                     "only (write this sink as Parquet, or emit JSON values)")
        line = json.dumps(dict(zip(fields, row)), ensure_ascii=False)
        if not line.isascii():
            try:
                line.encode("utf-8")
            except UnicodeEncodeError:  # a lone surrogate in a string value
                for f, v in zip(fields, row):
                    why = _json_problem(v) if type(v) is str else None
                    if why:
                        raise SinkValueError(f"sink {self.sink!r} field {f!r}: {why}") from None
                raise
        return line

    def __call__(self, items: Iterable[tuple]) -> Iterator[tuple[str]]:
        encode, rows = self.encode, self.rows
        for item in items:
            for row in rows(item):
                yield (encode(row),)


def frame(spark: Any, sink: str, fields: Sequence[str], types: ColumnTypes | None, rows: Any) -> Any:
    """The DataFrame of a sink's value lists, typed by what was emitted."""
    types = types or ColumnTypes(fields)
    if types.broken is not None:
        raise BackfillError(f"sink {sink!r} cannot be written as typed columns: {types.broken}; nothing is "
                            "converted behind your back, so emit one type per field, or write the sink as "
                            "JSON lines (--output-format jsonl), which keeps every JSON value as it is")
    return spark.createDataFrame(rows, schema=spark_schema(fields, types.types), verifySchema=False)


def json_frame(spark: Any, sink: str, fields: Sequence[str], items: Any, serializers: Mapping[str, str]) -> Any:
    """A one-column (``value``) DataFrame of a sink's rows as JSON text, for ``write.text``."""
    return spark.createDataFrame(items.mapPartitions(JsonLines(sink, fields, serializers)), "value string",
                                 verifySchema=False)
