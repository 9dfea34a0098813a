"""Column types for emitted values, so that sink streams become typed DataFrames.

Tuples carry plain Python values with no declared types. A sink's column type is found
by looking at every value written to it and widening (int with float is double; None
fits anything; a column that only ever held None is a string column). Values that no
column type holds (arbitrary objects, str mixed with int) are an error naming the field.
Types are described by small tuples here; only ``spark_type`` imports pyspark.
"""
from __future__ import annotations

import datetime as _dt
import decimal
from collections.abc import Callable, Sequence
from typing import Any

NULL, BOOL, LONG, DOUBLE, STRING, BINARY, DATE, TIMESTAMP, DECIMAL = (
    ("null",), ("boolean",), ("long",), ("double",), ("string",), ("binary",), ("date",),
    ("timestamp",), ("decimal",))
SCALARS = {bool: BOOL, int: LONG, float: DOUBLE, str: STRING, bytes: BINARY, bytearray: BINARY,
            _dt.datetime: TIMESTAMP, _dt.date: DATE, decimal.Decimal: DECIMAL, type(None): NULL}
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1


class SchemaError(ValueError):
    """Values that cannot be one typed column."""


def describe(value: Any) -> tuple:
    """The column type of one value."""
    t = SCALARS.get(type(value))
    if t is not None:
        if t is LONG and not _LONG_MIN <= value <= _LONG_MAX:
            raise SchemaError(f"integer {value} does not fit in 64 bits")
        return t
    if isinstance(value, (list, tuple)):
        elem = NULL
        for v in value:
            elem = merge(elem, describe(v))
        return ("array", elem)
    if isinstance(value, dict):
        key, val = NULL, NULL
        for k, v in value.items():
            key, val = merge(key, describe(k)), merge(val, describe(v))
        return ("map", key, val)
    for base, t in SCALARS.items():  # subclasses (a str enum, an int flag, ...)
        if base is not type(None) and isinstance(value, base):
            return t
    raise SchemaError(f"a {type(value).__module__}.{type(value).__qualname__} value has no column type; "
                      "emit plain values (str, int, float, bool, bytes, dates, lists, dicts)")


def merge(a: tuple, b: tuple) -> tuple:
    """The narrowest type that holds values of both ``a`` and ``b``."""
    if a == b or b == NULL:
        return a
    if a == NULL:
        return b
    if {a, b} == {LONG, DOUBLE}:
        return DOUBLE
    if a[0] == b[0] == "array":
        return ("array", merge(a[1], b[1]))
    if a[0] == b[0] == "map":
        return ("map", merge(a[1], b[1]), merge(a[2], b[2]))
    raise SchemaError(f"values of type {show(a)} and {show(b)} mixed")


def show(t: tuple) -> str:
    if t[0] == "array":
        return f"array<{show(t[1])}>"
    if t[0] == "map":
        return f"map<{show(t[1])},{show(t[2])}>"
    return t[0]


def resolve(t: tuple) -> tuple:
    """Replace unknown (only-None) parts by string."""
    if t == NULL:
        return STRING
    if t[0] == "array":
        return ("array", resolve(t[1]))
    if t[0] == "map":
        return ("map", resolve(t[1]), resolve(t[2]))
    return t


def converter(t: tuple) -> Callable[[Any], Any] | None:
    """A function making a value fit type ``t`` (ints in a double column become floats),
    or None when values fit as they are."""
    if t == DOUBLE:
        return lambda v: float(v) if v is not None else None
    if t[0] == "array":
        inner = converter(t[1])
        if inner is None:
            return None
        return lambda v: [inner(x) for x in v] if v is not None else None
    if t[0] == "map":
        kc, vc = converter(t[1]), converter(t[2])
        if kc is None and vc is None:
            return None
        kc, vc = kc or (lambda x: x), vc or (lambda x: x)
        return lambda v: {kc(k): vc(x) for k, x in v.items()} if v is not None else None
    return None


class RowConverter:
    """Picklable: value lists -> tuples that fit the columns' types."""

    def __init__(self, types: Sequence[tuple]) -> None:
        self.types = list(types)
        self._convs: list | None = None

    def __getstate__(self) -> dict:
        return {"types": self.types, "_convs": None}

    def __call__(self, values: Sequence[Any]) -> tuple:
        convs = self._convs
        if convs is None:
            convs = self._convs = [converter(t) for t in self.types]
        if not any(convs):
            return tuple(values)
        return tuple(c(v) if c is not None else v for c, v in zip(convs, values))


def spark_type(t: tuple) -> Any:
    from pyspark.sql import types as T

    kind = t[0]
    simple = {"boolean": T.BooleanType, "long": T.LongType, "double": T.DoubleType, "string": T.StringType,
              "binary": T.BinaryType, "date": T.DateType, "timestamp": T.TimestampType}
    if kind in simple:
        return simple[kind]()
    if kind == "decimal":
        return T.DecimalType(38, 18)
    if kind == "array":
        return T.ArrayType(spark_type(t[1]), True)
    if kind == "map":
        return T.MapType(spark_type(t[1]), spark_type(t[2]), True)
    raise AssertionError(t)


def spark_schema(fields: Sequence[str], types: Sequence[tuple]) -> Any:
    from pyspark.sql import types as T

    return T.StructType([T.StructField(f, spark_type(t), True) for f, t in zip(fields, types)])


def plain_value(v: Any) -> Any:
    """A Spark Row (struct) becomes a dict, recursively, as JSON objects are in streaming."""
    if isinstance(v, tuple) and hasattr(v, "asDict"):
        return {k: plain_value(x) for k, x in v.asDict().items()}
    if isinstance(v, list):
        return [plain_value(x) for x in v]
    if isinstance(v, dict):
        return {k: plain_value(x) for k, x in v.items()}
    return v


def plain_row(row: Sequence[Any]) -> list:
    return [plain_value(v) for v in row]
