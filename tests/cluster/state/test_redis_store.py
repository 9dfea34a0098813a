"""The state store contract (support/store_contract.py) on a real Redis server."""
import uuid

import pytest

from squall.state.stores import RedisStore, redis_client
from support.store_contract import (  # noqa: F401 (collected here, run on this module's store)
    test_a_dropped_prepare_stays_dropped_when_its_txid_is_reused,
    test_every_value_a_tuple_may_hold_is_restored_as_itself,
    test_key_value_state_round_trip,
    test_load_rolls_a_decided_txid_forward_and_drops_any_other,
    test_prepare_commit_and_reload,
)


@pytest.fixture
def make_store(redis_server):
    """A factory of Redis stores under a prefix of this test's own; a name reopens its namespace."""
    prefix = uuid.uuid4().hex[:8]
    return lambda ns: RedisStore(redis_client(redis_server.url, 5.0), f"{prefix}/{ns}")
