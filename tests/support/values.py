"""What a tuple may hold (squall.values), generated for property tests, and an exact
comparison of what came out of a boundary with what went in.

``values()`` draws every kind the rule names, nested: JSON values (integers well past 64
bits, floats with inf, nan and -0.0), bytes, decimals (nan and infinities too), naive and
aware datetimes and times (fixed offsets, named offsets, zoneinfo zones), dates,
timedeltas, UUIDs, tuples, sets and frozensets. ``canon(v)`` is a text that two values
share exactly when they are the same value of the same types all the way down (nan equal
to nan, 1.10 and 1.1 different, a tuple not a list, a zone not its offset).
"""
from __future__ import annotations

import datetime
import decimal
import uuid
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as seeded
from hypothesis import strategies as st

BIG = 2 ** 300  # integers up to this size (JSON carries them; 4,300 digits is Python's str limit)

fixed_zones = st.builds(
    datetime.timezone,
    st.timedeltas(min_value=datetime.timedelta(hours=-23, minutes=-59),
                  max_value=datetime.timedelta(hours=23, minutes=59)),
) | st.builds(
    datetime.timezone,
    st.timedeltas(min_value=datetime.timedelta(hours=-12), max_value=datetime.timedelta(hours=12)),
    st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZ+-", min_size=1, max_size=6),
) | st.just(datetime.timezone.utc)
zones = st.none() | fixed_zones | st.timezones()

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-BIG, max_value=BIG),
    st.integers(min_value=-2 ** 63, max_value=2 ** 64),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20), st.binary(max_size=20),
    st.decimals(allow_nan=True, allow_infinity=True), st.decimals(places=3, min_value=-10**6, max_value=10**6),
    st.datetimes(timezones=zones), st.dates(), st.times(timezones=st.none() | fixed_zones), st.timedeltas(),
    st.uuids(),
)
# Set elements and dict keys must hash; a decimal NaN cannot (a signalling one refuses even to compare).
hashable_scalars = scalars.filter(lambda v: not (isinstance(v, decimal.Decimal) and v.is_nan()))
hashables = st.recursive(hashable_scalars,
                         lambda inner: st.lists(inner, max_size=3).map(tuple) | st.frozensets(inner, max_size=3),
                         max_leaves=6)


def values(max_leaves: int = 12) -> st.SearchStrategy[Any]:
    """Any value a tuple may hold, nested."""
    return st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4), st.lists(inner, max_size=4).map(tuple),
            st.dictionaries(st.text(max_size=8) | hashables, inner, max_size=4),
            st.sets(hashables, max_size=4), st.frozensets(hashables, max_size=4)),
        max_leaves=max_leaves)


def rows(arity: int, max_size: int = 20, max_leaves: int = 8) -> st.SearchStrategy[list[list[Any]]]:
    """Lists of tuples' values, ``arity`` fields each."""
    return st.lists(st.lists(values(max_leaves), min_size=arity, max_size=arity), min_size=1, max_size=max_size)


def canon(v: Any) -> str:
    """A text equal for two values exactly when they are the same, types included."""
    t = type(v)
    name = t.__name__
    if t is float:
        return f"float:{v!r}"
    if t is decimal.Decimal:
        return f"Decimal:{v}"
    if t in (list, tuple):
        return f"{name}[{','.join(canon(x) for x in v)}]"
    if t is dict:
        return "dict{" + ",".join(f"{canon(k)}:{canon(x)}" for k, x in v.items()) + "}"
    if t in (set, frozenset):
        return f"{name}{{{','.join(sorted(canon(x) for x in v))}}}"
    if t in (datetime.datetime, datetime.time):
        return f"{name}:{v!r}:{v.utcoffset() if t is datetime.datetime else ''}"
    if t in (datetime.date, datetime.timedelta, uuid.UUID, int, bool, str, bytes, type(None)):
        return f"{name}:{v!r}"
    raise AssertionError(f"canon: a value of type {name} is not one the rule names")


def same_rows(got: list[list[Any]], want: list[list[Any]]) -> bool:
    """The same rows in any order (tasks in other workers receive in their own order)."""
    return sorted(canon(r) for r in got) == sorted(canon(r) for r in want)


def sample(strategy: st.SearchStrategy[Any], n: int, seed: int) -> list[Any]:
    """``n`` examples hypothesis generates from ``strategy`` (the same ones for a seed), for
    tests whose boundary is too costly to cross once per example (a cluster, Spark): they
    send all of them at once. Nothing is shrunk: a failure shows the values themselves."""
    out: list[Any] = []

    @settings(max_examples=n, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @seeded(seed)
    @given(strategy)
    def collect(v: Any) -> None:
        out.append(v)

    collect()
    return out[:n]
