"""Tuple values in Storm's JSON multilang: what JSON does not carry goes as a tagged object.

A value JSON holds as it is (None, bool, int of any size, a finite float, str, a list, a
dict with str keys) is written as it is, so a child in any language reads ordinary JSON.
Every other value a tuple may hold (squall.values) becomes a one-key object
``{"$squall": [kind, payload]}`` with a readable payload, and comes back from a child
(an echo of it, or one a child makes) as the same value:

=============  ===============================================================
kind           payload
=============  ===============================================================
``float``      ``"nan"``, ``"inf"`` or ``"-inf"``
``bytes``      base64 text
``decimal``    its text, exactly (``"1.10"``)
``uuid``       its hex text
``date``       ISO text (``"2026-01-31"``)
``datetime``   [year, month, day, hour, minute, second, microsecond, fold, zone]
``time``       [hour, minute, second, microsecond, fold, zone]
``timedelta``  [days, seconds, microseconds]
``tuple``      a list of the elements (``set``, ``frozenset`` alike)
``map``        a list of [key, value] pairs: a dict whose keys are not all text,
               or one whose only key is ``$squall``
``ext``        [code, base64 bytes]: a type ``topology.serializers`` registers
=============  ===============================================================

The zone is null, a zoneinfo key, or [offset in microseconds, name or null]. An object
from a child that looks like a tag but is not a well-formed one stays a plain dict.
"""
from __future__ import annotations

import base64
import datetime
import decimal
import uuid
from collections.abc import Callable
from typing import Any

import msgpack

from squall.values import ValueCodec, datetime_from, datetime_parts, time_from, time_parts

TAG = "$squall"


def _tag(kind: str, payload: Any) -> dict[str, Any]:
    return {TAG: [kind, payload]}


def to_json(v: Any, codec: ValueCodec) -> Any:
    """``v`` with every value JSON does not carry as it is replaced by its tag."""
    t = type(v)
    if t is str or t is int or t is bool or v is None:
        return v
    if t is float:
        return v if v - v == 0.0 else _tag("float", repr(v))
    if t is list:
        return [to_json(x, codec) for x in v]
    if t is dict:
        if (len(v) != 1 or TAG not in v) and all(type(k) is str for k in v):
            return {k: to_json(x, codec) for k, x in v.items()}
        return _tag("map", [[to_json(k, codec), to_json(x, codec)] for k, x in v.items()])
    encode = _ENCODERS.get(t)
    if encode is not None:
        return encode(v, codec)
    out = codec.default(v)  # a registered type, or a subclass as its base type
    if isinstance(out, msgpack.ExtType):
        return _tag("ext", [out.code, base64.b64encode(out.data).decode("ascii")])
    return to_json(out, codec)


def _seq(kind: str) -> Callable[[Any, ValueCodec], Any]:
    return lambda v, codec: _tag(kind, [to_json(x, codec) for x in v])


_ENCODERS: dict[type, Callable[[Any, ValueCodec], Any]] = {
    tuple: _seq("tuple"), set: _seq("set"), frozenset: _seq("frozenset"),
    bytes: lambda v, c: _tag("bytes", base64.b64encode(v).decode("ascii")),
    decimal.Decimal: lambda v, c: _tag("decimal", str(v)),
    uuid.UUID: lambda v, c: _tag("uuid", v.hex),
    datetime.datetime: lambda v, c: _tag("datetime", datetime_parts(v)),
    datetime.date: lambda v, c: _tag("date", v.isoformat()),
    datetime.time: lambda v, c: _tag("time", time_parts(v)),
    datetime.timedelta: lambda v, c: _tag("timedelta", [v.days, v.seconds, v.microseconds]),
}


def object_hook(codec: ValueCodec) -> Callable[[dict[str, Any]], Any]:
    """``json.loads``'s object hook: tags back into values (inner objects come first)."""
    def hook(obj: dict[str, Any]) -> Any:
        if len(obj) != 1 or TAG not in obj:
            return obj
        tag = obj[TAG]
        if type(tag) is not list or len(tag) != 2 or type(tag[0]) is not str:
            return obj
        decode = _DECODERS.get(tag[0])
        if decode is None:
            return obj
        try:
            return decode(tag[1], codec)
        except (ValueError, TypeError, ArithmeticError, LookupError):
            return obj  # not a well-formed tag: a plain dict
    return hook


def _ext(payload: Any, codec: ValueCodec) -> Any:
    code, data = payload
    return codec.ext_hook(code, base64.b64decode(data, validate=True))


_FLOATS = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}
_DECODERS: dict[str, Callable[[Any, ValueCodec], Any]] = {
    "float": lambda p, c: _FLOATS[p],
    "bytes": lambda p, c: base64.b64decode(p, validate=True),
    "decimal": lambda p, c: decimal.Decimal(p) if type(p) is str else _no(p),
    "uuid": lambda p, c: uuid.UUID(hex=p),
    "date": lambda p, c: datetime.date.fromisoformat(p),
    "datetime": lambda p, c: datetime_from(p),
    "time": lambda p, c: time_from(p),
    "timedelta": lambda p, c: datetime.timedelta(*p) if type(p) is list and len(p) == 3 else _no(p),
    "tuple": lambda p, c: tuple(p) if type(p) is list else _no(p),
    "set": lambda p, c: set(p) if type(p) is list else _no(p),
    "frozenset": lambda p, c: frozenset(p) if type(p) is list else _no(p),
    "map": lambda p, c: dict(p) if type(p) is list else _no(p),
    "ext": _ext,
}


def _no(payload: Any) -> Any:
    raise ValueError(f"malformed payload {payload!r:.40}")
