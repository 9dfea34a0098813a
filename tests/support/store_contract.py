"""What every state store must do, as test functions over a ``make_store`` fixture (a factory of
stores of one kind; called twice with a name it reopens that namespace). A tier's test module
imports them and defines ``make_store`` for the stores it can reach: memory and SQLite files
in the unit tier, a real Redis server in the cluster tier."""
import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from squall.state.kv import KeyValueState
from squall.state.stores import StoreError
from support.values import canon, hashables, values

_spaces = itertools.count()


def test_prepare_commit_and_reload(make_store):
    s = make_store("a")
    assert s.load(0) == (None, {})
    s.prepare(1, {b"k1": b"v1", b"k2": b"v2"})
    assert s.read(0) == (None, {})           # prepared is not committed
    s.commit(1)
    s.prepare(2, {b"k1": None, b"k3": b"v3"})
    s.commit(2)
    s.commit(2)                              # again: already committed, no error
    assert make_store("a").load(2) == (2, {b"k2": b"v2", b"k3": b"v3"})
    with pytest.raises(StoreError):
        s.commit(5)                          # nothing prepared for it


def test_load_rolls_a_decided_txid_forward_and_drops_any_other(make_store):
    s = make_store("b")
    s.prepare(1, {b"k": b"1"})
    s.commit(1)
    s.prepare(2, {b"k": b"2"})
    # Restoring to 2 means the checkpoint spout decided 2: the prepared set is applied.
    assert s.read(2) == (2, {b"k": b"2"}) and s.read(1) == (1, {b"k": b"1"})  # read writes nothing
    assert make_store("b").load(2) == (2, {b"k": b"2"})
    s.prepare(3, {b"k": b"3"})
    assert make_store("b").load(2) == (2, {b"k": b"2"})  # 3 was not decided: dropped
    assert s.read(3) == (2, {b"k": b"2"})


def test_a_dropped_prepare_stays_dropped_when_its_txid_is_reused(make_store):
    s = make_store("r")
    s.prepare(1, {b"k": b"1"})
    s.commit(1)
    s.prepare(2, {b"k": b"dropped", b"gone": None})
    assert s.load(1) == (1, {b"k": b"1"})   # the checkpoint spout rolled txid 2 back
    s.prepare(2, {b"j": b"new"})             # and prepares txid 2 again, with other changes
    s.commit(2)
    assert make_store("r").load(2) == (2, {b"k": b"1", b"j": b"new"})
    s.prepare(3, {b"k": b"3"})
    s.prepare(3, {b"j": b"3"})               # prepared again without a load in between
    s.commit(3)
    assert make_store("r").read(3) == (3, {b"k": b"1", b"j": b"3"})


def test_key_value_state_round_trip(make_store):
    st = KeyValueState(make_store("c"), "t/c/0")
    assert st.restore(0) is None and len(st) == 0
    st.put("word", 3)
    st.put(("a", 1), {"nested": [1, 2.5, None, b"raw"]})
    st.put("gone", 1)
    st.delete("gone")
    st.delete("never")
    st.prepare(1)
    st.commit(1)
    st.put("word", 99)                     # not saved: lost at the next restore
    again = KeyValueState(make_store("c"), "t/c/0")
    assert again.restore(1) == 1
    assert dict(again.items()) == {"word": 3, ("a", 1): {"nested": [1, 2.5, None, b"raw"]}}
    assert st.restore(1) == 1 and st.get("word") == 3 and "gone" not in st


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(hashables, values(8), min_size=1, max_size=6))
def test_every_value_a_tuple_may_hold_is_restored_as_itself(make_store, entries):
    """Checkpoint and restore: what a task put comes back from the store as the same keys
    and values, types and all (squall.values)."""
    ns = f"values-{next(_spaces)}"
    kv = KeyValueState(make_store(ns), f"t/{ns}/0")
    for k, v in entries.items():
        kv.put(k, v)
    kv.prepare(1)
    kv.commit(1)
    again = KeyValueState(make_store(ns), f"t/{ns}/0")
    assert again.restore(1) == 1
    assert sorted(canon(kv) for kv in again.items()) == sorted(canon(kv) for kv in entries.items())
