"""What a tuple may hold, and the one encoding every boundary carries it in.

A value in a tuple may be any JSON value (None, bool, int of any size, float including
inf and nan, str, lists, dicts), bytes, ``decimal.Decimal``, ``datetime.datetime``,
``date``, ``time`` (naive, or aware with a fixed-offset ``datetime.timezone`` or a
``zoneinfo.ZoneInfo``) and ``timedelta``, ``uuid.UUID``, tuples, sets and frozensets,
nested in any way, plus the types ``topology.serializers`` registers. They arrive as the
same types wherever they go: to a task in another worker, into checkpointed state, to a
multilang child over msgpack, between Spark stages. Subclasses of these types arrive as
the type they derive from (an OrderedDict as a dict, an IntEnum as an int, a namedtuple
as a tuple), and a bytearray as bytes. Another tzinfo (pytz's, dateutil's) arrives as
the fixed offset it had at that time.

The encoding is msgpack. What msgpack packs itself (None, bool, 64-bit integers, floats,
str, bytes, lists, dicts) it packs as it always did, so the common tuple pays nothing for
the rest; every other type is an extension type: squall's own codes are 64-79, and the
types ``topology.serializers`` registers take 1-63 in the order of their class paths.
``ValueCodec.problem`` says, for a value that cannot be encoded, where in it and what.
"""
from __future__ import annotations

import datetime
import decimal
import importlib
import threading
import uuid
import zoneinfo
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgpack

from squall.errors import SquallError

BIGINT, TUPLE, SET, FROZENSET, DECIMAL, DATETIME, DATE, TIME, TIMEDELTA, UUID, MAP = range(64, 75)
MAX_REGISTERED = 63  # extension codes 1..63 for topology.serializers
TYPES_DOC = "docs/guide/topologies.md#what-a-tuple-may-hold"

_UTC = datetime.timezone.utc
_US = datetime.timedelta(microseconds=1)


class SerializationError(SquallError, ValueError):
    """A value that cannot be encoded, or bytes that do not decode."""


class Undecoded:
    """What ``ValueCodec.lenient_ext_hook`` leaves where an extension value did not decode."""

    __slots__ = ("code", "error")

    def __init__(self, code: int, error: str) -> None:
        self.code, self.error = code, error

    def __repr__(self) -> str:
        return f"<undecodable extension value {self.code}: {self.error}>"


def find_undecoded(value: Any) -> Undecoded | None:
    """The first ``Undecoded`` inside ``value`` (as ``lenient_ext_hook`` leaves them), or None."""
    stack = [value]
    while stack:
        v = stack.pop()
        t = type(v)
        if t is Undecoded:
            return v
        if t is list or t is tuple or t is set or t is frozenset:
            stack.extend(v)
        elif t is dict:
            stack.extend(v)
            stack.extend(v.values())
    return None


class UnsupportedValue(SerializationError):
    """A value of a type no rule carries (raised from inside msgpack's packer)."""

    def __init__(self, value: Any) -> None:
        super().__init__(f"a value of type {type_name(value)} cannot be serialized")
        self.value = value


def type_name(value: Any) -> str:
    t = type(value)
    return f"{t.__module__}.{t.__qualname__}"


def load_path(path: str) -> Any:
    """The object a dotted ``module.Name`` path names (SerializationError naming it)."""
    module, _, name = path.rpartition(".")
    if not module:
        raise SerializationError(f"{path!r} is not a dotted module.Name path")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise SerializationError(f"cannot load {path!r}: {exc}") from None


# -- time zones -----------------------------------------------------------------------------

def _tz_out(tz: datetime.tzinfo | None, at: datetime.datetime | None) -> Any:
    """A tzinfo as msgpack: None, a zone key (str), or [offset in microseconds, name or None]."""
    if tz is None:
        return None
    if tz is _UTC:
        return [0, None]
    if type(tz) is zoneinfo.ZoneInfo and tz.key is not None:
        return tz.key
    offset = tz.utcoffset(at)
    if offset is None:  # a tzinfo that names no offset for this value: naive, in effect
        return None
    name = tz.tzname(at)
    plain = datetime.timezone(offset)
    return [offset // _US, None if name == plain.tzname(None) else name]


def _tz_in(raw: Any) -> datetime.tzinfo | None:
    if raw is None:
        return None
    if type(raw) is str:
        return zoneinfo.ZoneInfo(raw)
    micros, name = raw
    if not micros and name is None:
        return _UTC
    offset = datetime.timedelta(microseconds=micros)
    return datetime.timezone(offset) if name is None else datetime.timezone(offset, name)


# -- the codec ------------------------------------------------------------------------------

class ValueCodec:
    """Encodes and decodes values by the rule above, with ``serializers`` (class path ->
    serializer path, as ``topology.serializers``; a serializer has ``serialize(obj) ->
    bytes`` and ``deserialize(bytes) -> obj``, or is a class whose instances do).

    ``default`` and ``ext_hook`` are what msgpack's Packer and unpackb are given; ``packer``
    makes a Packer that uses them. A Packer serves one thread at a time: a codec may be
    shared by threads, and its nested packers are kept per thread."""

    def __init__(self, serializers: Mapping[str, str] | None = None) -> None:
        self._by_type: dict[type, tuple[int, Any]] = {}
        self._by_code: dict[int, Any] = {}
        items = sorted((serializers or {}).items())
        if len(items) > MAX_REGISTERED:
            raise SerializationError(f"topology.serializers registers {len(items)} types; at most "
                                     f"{MAX_REGISTERED} fit the encoding")
        for code, (cls_path, ser_path) in enumerate(items, start=1):
            cls, ser = load_path(cls_path), load_path(ser_path)
            ser = ser() if isinstance(ser, type) else ser
            self._by_type[cls] = (code, ser)
            self._by_code[code] = ser
        self._local = threading.local()
        self._decoders: dict[int, Callable[[bytes], Any]] = {
            BIGINT: _int_in, TUPLE: lambda d: tuple(self.unpack(d)), SET: lambda d: set(self.unpack(d)),
            FROZENSET: lambda d: frozenset(self.unpack(d)), DECIMAL: _decimal_in, DATETIME: self._datetime_in,
            DATE: _date_in, TIME: self._time_in, TIMEDELTA: self._timedelta_in, UUID: _uuid_in,
            MAP: lambda d: dict(self.unpack(d))}

    # -- encoding -----------------------------------------------------------------------------
    def packer(self) -> msgpack.Packer:
        """A Packer by this codec's rule (for one thread at a time)."""
        return msgpack.Packer(use_bin_type=True, strict_types=True, default=self.default)

    def pack(self, obj: Any) -> bytes:
        """``obj`` encoded (UnsupportedValue, or the serializer's error, when it cannot be)."""
        local = self._local
        depth = getattr(local, "depth", 0)
        spare = getattr(local, "spare", None)
        if spare is None:
            spare = local.spare = []
        if depth == len(spare):
            spare.append(self.packer())
        local.depth = depth + 1
        try:
            return spare[depth].pack(obj)
        finally:
            local.depth = depth

    def default(self, obj: Any) -> Any:
        """What msgpack packs in place of ``obj``, which it does not pack itself."""
        t = type(obj)
        encode = _ENCODERS.get(t)
        if encode is not None:
            return encode(self, obj)
        entry = self._by_type.get(t)
        if entry is not None:
            code, ser = entry
            data = ser.serialize(obj)
            if type(data) is not bytes:
                raise SerializationError(f"serializer {type(ser).__qualname__} of {type_name(obj)} returned "
                                         f"{type(data).__name__}, not bytes")
            return msgpack.ExtType(code, data)
        for base, encode in _BASES:
            if isinstance(obj, base):
                return encode(self, obj)
        raise UnsupportedValue(obj)

    def _ext(self, code: int, obj: Any) -> msgpack.ExtType:
        return msgpack.ExtType(code, self.pack(obj))

    def text_keyed(self, v: Any) -> Any:
        """``v`` with every dict whose keys are not all str or bytes as an extension type
        (MAP: its [key, value] pairs), for readers that take only such keys in a msgpack
        map (pystorm's Unpacker, msgpack's default ``strict_map_key``)."""
        t = type(v)
        if t is list:
            return [self.text_keyed(x) for x in v]
        if t is dict:
            if all(type(k) is str or type(k) is bytes for k in v):
                return {k: self.text_keyed(x) for k, x in v.items()}
            return self._ext(MAP, [[self.text_keyed(k), self.text_keyed(x)] for k, x in v.items()])
        if t is tuple:
            return self._ext(TUPLE, [self.text_keyed(x) for x in v])
        if t is set or t is frozenset:
            return self._ext(SET if t is set else FROZENSET, [self.text_keyed(x) for x in v])
        return v

    # -- decoding -----------------------------------------------------------------------------
    def ext_hook(self, code: int, data: bytes) -> Any:
        decode = self._decoders.get(code)
        if decode is not None:
            return decode(data)
        ser = self._by_code.get(code)
        if ser is None:
            raise SerializationError(f"no serializer registered for extension type {code}")
        return ser.deserialize(data)

    def lenient_ext_hook(self, code: int, data: bytes) -> Any:
        """``ext_hook``, but an extension value that does not decode (a registered type's
        deserializer that raises) becomes an ``Undecoded`` in its place, so that the rest
        of a batch still decodes."""
        try:
            return self.ext_hook(code, data)
        except Exception as exc:  # noqa: BLE001 - the value's own failure, kept with it
            return Undecoded(code, f"{type(exc).__name__}: {exc}"[:500])

    def unpack(self, data: bytes, use_list: bool = True) -> Any:
        return msgpack.unpackb(data, raw=False, strict_map_key=False, use_list=use_list, ext_hook=self.ext_hook)

    def _datetime_in(self, data: bytes) -> datetime.datetime:
        return datetime_from(self.unpack(data))

    def _time_in(self, data: bytes) -> datetime.time:
        return time_from(self.unpack(data))

    def _timedelta_in(self, data: bytes) -> datetime.timedelta:
        days, secs, us = self.unpack(data)
        return datetime.timedelta(days, secs, us)

    # -- explaining ---------------------------------------------------------------------------
    def problem(self, value: Any) -> tuple[str, str, BaseException] | None:
        """Why ``value`` cannot be encoded: (where in it, e.g. ``['a'][2]``, the type name
        of the innermost value at fault, the error), or None when it can."""
        try:
            self.pack(value)
            return None
        except Exception as exc:  # noqa: BLE001 - any error is the answer
            error: BaseException = exc
        where, culprit = "", value
        for _ in range(64):  # descend to the innermost part that fails on its own
            inner = self._failing_part(culprit)
            if inner is None:
                break
            step, culprit, error = inner
            where += step
        return where, type_name(culprit), error

    def refusal(self, values: Sequence[Any], fields: Sequence[str], component: str,
                stream: str) -> tuple[str, tuple[str, str, str, str]]:
        """Why a tuple's ``values`` cannot be encoded, as (reason, cause): the reason names
        the component, stream, field, where in it and the type at fault, and how to carry
        that type; the cause is (component, stream, field, type), for counting."""
        for i, v in enumerate(values):
            found = self.problem(v)
            if found is None:
                continue
            where, name, error = found
            field = fields[i] if i < len(fields) else str(i)
            head = f"component {component!r} stream {stream!r} field {field!r}{where}: a value of type {name}"
            if isinstance(error, UnsupportedValue):
                text = (f"{head} cannot cross to another worker; register a serializer for it in "
                        f"topology.serializers ({{'{name}': 'module.SerializerClass'}}), or emit a type a "
                        f"tuple may hold ({TYPES_DOC})")
            else:
                text = f"{head} cannot be serialized: {type(error).__name__}: {error}"
            return text, (component, stream, field, name)
        return (f"component {component!r} stream {stream!r}: the tuple cannot be serialized",
                (component, stream, "", ""))

    def _failing_part(self, value: Any) -> tuple[str, Any, BaseException] | None:
        if isinstance(value, dict):
            parts: list[tuple[str, Any]] = []
            for k, v in value.items():
                parts += [(f"[{k!r:.40}] (its key)", k), (f"[{k!r:.40}]", v)]
        elif isinstance(value, (list, tuple)):
            parts = [(f"[{i}]", v) for i, v in enumerate(value)]
        elif isinstance(value, (set, frozenset)):
            parts = [(f" (an element {v!r:.40})", v) for v in value]
        else:
            return None
        for step, part in parts:
            try:
                self.pack(part)
            except Exception as exc:  # noqa: BLE001
                return step, part, exc
        return None


def _int_out(codec: ValueCodec, n: int) -> Any:
    n = int(n)
    if -(1 << 63) <= n < (1 << 64):
        return n  # an int subclass that msgpack packs once it is a plain int
    return msgpack.ExtType(BIGINT, n.to_bytes(n.bit_length() // 8 + 1, "big", signed=True))


def _int_in(data: bytes) -> int:
    return int.from_bytes(data, "big", signed=True)


def _decimal_in(data: bytes) -> decimal.Decimal:
    return decimal.Decimal(data.decode("ascii"))


def _date_in(data: bytes) -> datetime.date:
    return datetime.date.fromordinal(_int_in(data))


def _uuid_in(data: bytes) -> uuid.UUID:
    return uuid.UUID(bytes=data)


def datetime_parts(v: datetime.datetime) -> list:
    """A datetime as plain values: [year, month, day, hour, minute, second, microsecond,
    fold, zone], the zone None, a zoneinfo key, or [offset in microseconds, name or None]."""
    return [v.year, v.month, v.day, v.hour, v.minute, v.second, v.microsecond, v.fold, _tz_out(v.tzinfo, v)]


def datetime_from(parts: Any) -> datetime.datetime:
    y, mo, d, h, mi, s, us, fold, tz = parts
    return datetime.datetime(y, mo, d, h, mi, s, us, _tz_in(tz), fold=fold)


def time_parts(v: datetime.time) -> list:
    """A time as plain values: [hour, minute, second, microsecond, fold, zone]."""
    return [v.hour, v.minute, v.second, v.microsecond, v.fold, _tz_out(v.tzinfo, None)]


def time_from(parts: Any) -> datetime.time:
    h, mi, s, us, fold, tz = parts
    return datetime.time(h, mi, s, us, _tz_in(tz), fold=fold)


def _datetime_out(codec: ValueCodec, v: datetime.datetime) -> msgpack.ExtType:
    return codec._ext(DATETIME, datetime_parts(v))


def _time_out(codec: ValueCodec, v: datetime.time) -> msgpack.ExtType:
    return codec._ext(TIME, time_parts(v))


def _date_out(codec: ValueCodec, v: datetime.date) -> msgpack.ExtType:
    n = v.toordinal()
    return msgpack.ExtType(DATE, n.to_bytes(4, "big", signed=True))


def _timedelta_out(codec: ValueCodec, v: datetime.timedelta) -> msgpack.ExtType:
    return codec._ext(TIMEDELTA, [v.days, v.seconds, v.microseconds])


_ENCODERS: dict[type, Callable[[ValueCodec, Any], Any]] = {
    int: _int_out,
    tuple: lambda c, v: c._ext(TUPLE, list(v)),
    set: lambda c, v: c._ext(SET, list(v)),
    frozenset: lambda c, v: c._ext(FROZENSET, list(v)),
    decimal.Decimal: lambda c, v: msgpack.ExtType(DECIMAL, str(v).encode("ascii")),
    datetime.datetime: _datetime_out,
    datetime.date: _date_out,
    datetime.time: _time_out,
    datetime.timedelta: _timedelta_out,
    uuid.UUID: lambda c, v: msgpack.ExtType(UUID, v.bytes),
}
# Subclasses cross as the type they derive from (checked in this order: bool before int,
# datetime before date).
_BASES: tuple[tuple[type, Callable[[ValueCodec, Any], Any]], ...] = (
    (bool, lambda c, v: bool(v)),
    (int, _int_out),
    (float, lambda c, v: float(v)),
    (str, lambda c, v: str(v)),
    (bytes, lambda c, v: bytes(v)),
    (bytearray, lambda c, v: bytes(v)),
    (dict, lambda c, v: dict(v)),
    (list, lambda c, v: list(v)),
    (tuple, lambda c, v: c._ext(TUPLE, list(v))),
    (frozenset, lambda c, v: c._ext(FROZENSET, list(v))),
    (set, lambda c, v: c._ext(SET, list(v))),
    (decimal.Decimal, lambda c, v: msgpack.ExtType(DECIMAL, str(v).encode("ascii"))),
    (datetime.datetime, lambda c, v: _datetime_out(c, datetime.datetime(
        v.year, v.month, v.day, v.hour, v.minute, v.second, v.microsecond, v.tzinfo, fold=v.fold))),
    (datetime.date, lambda c, v: _date_out(c, datetime.date(v.year, v.month, v.day))),
    (datetime.time, lambda c, v: _time_out(c, v)),
    (datetime.timedelta, lambda c, v: _timedelta_out(c, v)),
    (uuid.UUID, lambda c, v: msgpack.ExtType(UUID, v.bytes)),
)


PLAIN = ValueCodec()  # the rule without registered types
