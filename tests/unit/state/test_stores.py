"""State stores (memory, SQLite files, a real Redis server) and KeyValueState over them."""
import uuid

import pytest

from squall.state.kv import KeyValueState, StateError
from squall.state.stores import (EmbeddedStore, MemoryStore, RedisStore, StoreError, describe_load, embedded_path,
                                 namespace, open_store, redis_client)


@pytest.fixture(params=["memory", "embedded", "redis"])
def make_store(request, tmp_path):
    """A factory of stores of one kind; calling it twice with a name reopens that namespace."""
    prefix = uuid.uuid4().hex[:8]
    if request.param == "memory":
        return lambda ns: MemoryStore(f"{prefix}/{ns}")
    if request.param == "embedded":
        return lambda ns: EmbeddedStore(tmp_path / f"{ns}.sqlite")
    server = request.getfixturevalue("redis_server")
    return lambda ns: RedisStore(redis_client(server.url, 5.0), f"{prefix}/{ns}")


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


def test_unstorable_values_are_named():
    st = KeyValueState(MemoryStore(uuid.uuid4().hex), "t/c/1")
    st.put("k", object())
    with pytest.raises(StateError, match="'k'.*object"):
        st.prepare(1)


def test_corrupt_entries_are_an_error_not_a_crash(tmp_path):
    s = EmbeddedStore(tmp_path / "x.sqlite")
    s.prepare(1, {b"\xc1": b"\xc1"})  # 0xc1 is never valid msgpack
    s.commit(1)
    with pytest.raises(StateError, match="undecodable"):
        KeyValueState(s, "t/x/0").restore(1)


def test_namespaces_are_safe_file_names(tmp_path):
    ns = namespace("../evil/name", "..", 3)
    assert ns.count("/") == 2
    path = embedded_path(tmp_path, ns)
    assert path.resolve().is_relative_to(tmp_path.resolve())
    store = open_store({"topology.state.provider": "embedded", "supervisor.state.dir": str(tmp_path)}, ns)
    store.prepare(1, {})
    store.commit(1)
    assert path.exists()
    with pytest.raises(StoreError, match="no state file"):
        open_store({"topology.state.provider": "embedded", "supervisor.state.dir": str(tmp_path)},
                   namespace("t", "c", 0), create=False)


def test_describe_load():
    assert describe_load("n", None, 5) is None and describe_load("n", 5, 5) is None
    assert "txids 3..5 are missing" in describe_load("n", 2, 5)
    assert "newer" in describe_load("n", 6, 5)


def test_redis_unreachable_is_a_store_error():
    from squall.testing.zookeeper import free_port

    store = RedisStore(redis_client(f"redis://127.0.0.1:{free_port()}/0", 0.5), "t/c/0")
    with pytest.raises(StoreError, match="load failed"):
        store.load(0)
