"""Column types for emitted values, found from the values, with no value ever changed.

Tuples carry plain Python values with no declared types. A column's type is the one
type every non-None value of the field has; nothing is widened or converted (an int
and a float in one field are an error, not a double column), so a value read back
equals the value written. The live ``ParquetSink`` and a backfill's Parquet sinks
follow these rules alike. The types:

=====================  =========================  ===================================
Python value           column type                read back (PySpark)
=====================  =========================  ===================================
bool                   boolean                    bool
int (64-bit)           bigint                     int
float                  double                     float (NaN and infinities kept)
str                    string                     str
bytes, bytearray       binary                     bytearray
decimal.Decimal        decimal(38, s)             Decimal (s: the largest scale seen)
datetime.date          date                       date
naive datetime         timestamp_ntz              the same naive datetime
aware datetime         timestamp                  the instant, in the session time zone
list, tuple            array<T>                   list
dict                   map<K, V>                  dict
None                   null in any column         None
=====================  =========================  ===================================

A field only ever None is a string column. Values of two types in one field (also
inside arrays and maps), an int beyond 64 bits, or a value of any other type is an
error that names the field and the types (a backfill can write such a stream as JSON
lines instead, which keeps every JSON value as it is).
"""
from __future__ import annotations

import datetime as _dt
import decimal
from collections.abc import Sequence
from typing import Any

from squall.errors import SquallError

NULL, BOOL, LONG, DOUBLE, STRING, BINARY, DATE, TIMESTAMP, TIMESTAMP_NTZ = (
    ("null",), ("boolean",), ("long",), ("double",), ("string",), ("binary",), ("date",),
    ("timestamp",), ("timestamp_ntz",))
SCALARS = {bool: BOOL, int: LONG, float: DOUBLE, str: STRING, bytes: BINARY, bytearray: BINARY,
           _dt.date: DATE, type(None): NULL}
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1
MAX_DECIMAL_DIGITS = 38


class SchemaError(SquallError, ValueError):
    """Values that cannot be one typed column without changing some of them."""


def describe(value: Any) -> tuple:
    """The column type of one value."""
    t = SCALARS.get(type(value))
    if t is not None:
        if t is LONG and not _LONG_MIN <= value <= _LONG_MAX:
            raise SchemaError(f"integer {value} does not fit in 64 bits")
        return t
    if isinstance(value, _dt.datetime):
        return TIMESTAMP_NTZ if value.tzinfo is None else TIMESTAMP
    if isinstance(value, decimal.Decimal):
        return _decimal(value)
    if isinstance(value, (list, tuple)):
        elem = NULL
        for v in value:
            elem = merge(elem, describe(v), "array elements")
        return ("array", elem)
    if isinstance(value, dict):
        key, val = NULL, NULL
        for k, v in value.items():
            key, val = merge(key, describe(k), "map keys"), merge(val, describe(v), "map values")
        return ("map", key, val)
    for base in SCALARS:  # subclasses (a str enum, an int flag, ...)
        if base is not type(None) and isinstance(value, base):
            return describe(base(value))
    raise SchemaError(f"a {type(value).__module__}.{type(value).__qualname__} value has no column type")


def _decimal(value: decimal.Decimal) -> tuple:
    _, digits, exp = value.as_tuple()
    if not isinstance(exp, int):  # "n", "N" or "F": not a finite number
        raise SchemaError(f"decimal {value} has no column type")
    scale = max(0, -exp)
    whole = max(len(digits) + exp, 0)
    if whole + scale > MAX_DECIMAL_DIGITS:
        raise SchemaError(f"decimal {value} needs more than {MAX_DECIMAL_DIGITS} digits")
    return ("decimal", scale, whole)


def merge(a: tuple, b: tuple, where: str = "") -> tuple:
    """The type of a column holding values of types ``a`` and ``b``, if one holds both
    unchanged; SchemaError otherwise."""
    if a == b or b == NULL:
        return a
    if a == NULL:
        return b
    if a[0] == b[0] == "array":
        return ("array", merge(a[1], b[1], "array elements"))
    if a[0] == b[0] == "map":
        return ("map", merge(a[1], b[1], "map keys"), merge(a[2], b[2], "map values"))
    if a[0] == b[0] == "decimal":  # a wider scale holds every value exactly
        scale, whole = max(a[1], b[1]), max(a[2], b[2])
        if scale + whole > MAX_DECIMAL_DIGITS:
            raise SchemaError(f"decimals need more than {MAX_DECIMAL_DIGITS} digits together")
        return ("decimal", scale, whole)
    raise SchemaError(f"values of type {show(a)} and {show(b)}{' in ' + where if where else ''}")


def show(t: tuple) -> str:
    if t[0] == "array":
        return f"array<{show(t[1])}>"
    if t[0] == "map":
        return f"map<{show(t[1])},{show(t[2])}>"
    if t[0] == "decimal":
        return f"decimal(38,{t[1]})"
    return {"long": "int (bigint)", "double": "float (double)", "string": "str (string)",
            "boolean": "bool (boolean)", "binary": "bytes (binary)"}.get(t[0], t[0])


def resolve(t: tuple) -> tuple:
    """Replace unknown (only-None) parts by string."""
    if t == NULL:
        return STRING
    if t[0] == "array":
        return ("array", resolve(t[1]))
    if t[0] == "map":
        return ("map", resolve(t[1]), resolve(t[2]))
    return t


class ColumnTypes:
    """The types of a stream's fields, merged batch by batch as rows are emitted (so a
    sink needs no extra pass); a conflict is kept as the reason instead of types."""

    __slots__ = ("fields", "types", "broken")

    def __init__(self, fields: Sequence[str]) -> None:
        self.fields = list(fields)
        self.types: list[tuple] = [NULL] * len(self.fields)
        self.broken: str | None = None

    def observe(self, rows: Sequence[Sequence[Any]]) -> None:
        if self.broken is not None or not rows:
            return
        i = 0
        try:
            for i, column in enumerate(zip(*rows)):
                kinds = set(map(type, column))
                t = self.types[i]
                for kind in kinds:
                    simple = SCALARS.get(kind)
                    if simple is LONG:
                        ints = column if len(kinds) == 1 else [v for v in column if type(v) is int]
                        if min(ints) < _LONG_MIN or max(ints) > _LONG_MAX:
                            raise SchemaError("an integer does not fit in 64 bits")
                    if simple is not None:
                        if simple is not t:
                            t = merge(t, simple)
                    else:
                        for v in column:
                            if type(v) is kind:
                                t = merge(t, describe(v))
                self.types[i] = t
        except SchemaError as exc:
            self.broken = f"field {self.fields[i]!r}: {exc}"

    def add(self, other: "ColumnTypes") -> "ColumnTypes":
        if self.broken is None:
            if other.broken is not None:
                self.broken = other.broken
            else:
                for i, (x, y) in enumerate(zip(self.types, other.types)):
                    try:
                        self.types[i] = merge(x, y)
                    except SchemaError as exc:
                        self.broken = f"field {self.fields[i]!r}: {exc}"
                        break
        return self

    def __getstate__(self) -> tuple:
        return (self.fields, self.types, self.broken)

    def __setstate__(self, state: tuple) -> None:
        self.fields, self.types, self.broken = state
