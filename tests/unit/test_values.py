"""What a tuple may hold (squall.values): every kind round-trips as the same value of the
same types; what cannot be encoded is named with where it sits; foreign bytes are refused."""
import collections
import datetime
import enum
import zoneinfo

import msgpack
import pytest
from hypothesis import given, settings

from squall.values import PLAIN, SerializationError, UnsupportedValue, ValueCodec
from support.values import canon, values


@settings(max_examples=50, deadline=None)
@given(values())
def test_every_value_round_trips_as_itself(v):
    assert canon(PLAIN.unpack(PLAIN.pack(v))) == canon(v)


@settings(max_examples=15, deadline=None)
@given(values())
def test_a_packer_of_the_codec_encodes_alike(v):
    # the wire packs whole batches with codec.packer(); the bytes decode as pack's do
    assert canon(PLAIN.unpack(PLAIN.packer().pack([v, [v]]))) == canon([v, [v]])


class Colour(enum.IntEnum):
    RED = 1


def test_subclasses_cross_as_their_base_type():
    Pair = collections.namedtuple("Pair", "a b")
    sent = [collections.OrderedDict(a=1), Colour.RED, Pair(1, 2), bytearray(b"xy"), collections.Counter("aa")]
    got = PLAIN.unpack(PLAIN.pack(sent))
    assert got == [{"a": 1}, 1, (1, 2), b"xy", {"a": 2}]
    assert [type(x) for x in got] == [dict, int, tuple, bytes, dict]


def test_zones_keep_their_names():
    paris = zoneinfo.ZoneInfo("Europe/Paris")
    named = datetime.timezone(datetime.timedelta(hours=5, minutes=30), "IST")
    for v in (datetime.datetime(2026, 3, 29, 2, 30, tzinfo=paris, fold=1),
              datetime.datetime(2026, 1, 1, tzinfo=named), datetime.time(1, 2, tzinfo=datetime.timezone.utc)):
        got = PLAIN.unpack(PLAIN.pack(v))
        assert repr(got) == repr(v) and got.tzinfo.tzname(None if isinstance(v, datetime.time) else got) == \
            v.tzinfo.tzname(None if isinstance(v, datetime.time) else v)
    assert PLAIN.unpack(PLAIN.pack(datetime.datetime(2026, 1, 1, tzinfo=paris))).tzinfo is paris


class Opaque:
    pass


class Point:
    def __init__(self, x):
        self.x = x


class PointSerializer:
    def serialize(self, p):
        return msgpack.packb(p.x)

    def deserialize(self, data):
        return Point(msgpack.unpackb(data))


def path(cls):
    return f"{cls.__module__}.{cls.__qualname__}"


def test_registered_types_nest_anywhere():
    codec = ValueCodec({path(Point): path(PointSerializer)})
    got = codec.unpack(codec.pack({"p": (Point(7),), "s": [Point(1)]}))
    assert type(got["p"]) is tuple and got["p"][0].x == 7 and got["s"][0].x == 1


def test_what_cannot_be_encoded_is_named_where_it_sits():
    with pytest.raises(UnsupportedValue, match="test_values.Opaque"):
        PLAIN.pack([1, Opaque()])
    where, name, error = PLAIN.problem({"a": [1, (2, {Opaque()})]})
    assert where.startswith("['a'][1][1] (an element") and name.endswith("test_values.Opaque")
    assert isinstance(error, UnsupportedValue)
    assert PLAIN.problem([1, "x", 2 ** 90]) is None


def test_foreign_bytes_do_not_decode_into_values():
    for code, data in [(99, b"x"), (68, b"\xff"), (73, b"short"), (69, msgpack.packb([1])), (64 + 6, b"")]:
        with pytest.raises((ValueError, TypeError)):
            PLAIN.unpack(msgpack.packb(msgpack.ExtType(code, data)))
    with pytest.raises(SerializationError, match="no serializer registered for extension type 5"):
        PLAIN.unpack(msgpack.packb(msgpack.ExtType(5, b"")))


def test_too_many_registrations_are_refused():
    with pytest.raises(SerializationError, match="at most 63"):
        ValueCodec({f"{path(Point)}{i}": path(PointSerializer) for i in range(64)})
