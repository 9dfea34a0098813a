"""State stores (memory, SQLite files) and KeyValueState over them; the same contract on a real
Redis server is in tests/cluster/state/test_redis_store.py."""
import uuid

import pytest

from squall.state.inspect import committed_state
from squall.state.kv import KeyValueState, StateError
from squall.state.stores import (
    EmbeddedStore,
    MemoryStore,
    RedisStore,
    StoreError,
    describe_load,
    embedded_path,
    namespace,
    open_store,
    redis_client,
)
from support.store_contract import (  # noqa: F401 (collected here, run on this module's stores)
    test_a_dropped_prepare_stays_dropped_when_its_txid_is_reused,
    test_every_value_a_tuple_may_hold_is_restored_as_itself,
    test_key_value_state_round_trip,
    test_load_rolls_a_decided_txid_forward_and_drops_any_other,
    test_prepare_commit_and_reload,
)


@pytest.fixture(params=["memory", "embedded"])
def make_store(request, tmp_path):
    """A factory of stores of one kind; calling it twice with a name reopens that namespace."""
    if request.param == "memory":
        prefix = uuid.uuid4().hex[:8]
        return lambda ns: MemoryStore(f"{prefix}/{ns}")
    return lambda ns: EmbeddedStore(tmp_path / f"{ns}.sqlite")


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


def test_reading_state_from_outside_tells_missing_from_unreadable(tmp_path):
    """A task that never checkpointed has empty state; a state file that exists but cannot be
    read is an error naming it (a backfill must not start from an empty guess)."""
    conf = {"topology.state.provider": "embedded", "supervisor.state.dir": str(tmp_path)}
    assert committed_state(conf, "t", "c", 0, 1) == (None, {})
    path = embedded_path(tmp_path, namespace("t", "c", 0))
    path.mkdir(parents=True)  # there, but SQLite cannot open it
    with pytest.raises(StoreError, match=str(path)):
        committed_state(conf, "t", "c", 0, 1)
