"""Whose state a new topology gets: its own, or its owner's earlier one when asked."""
from __future__ import annotations

import pytest

from squall.daemons.nimbus.state_lineage import CARRY, NAMESPACE, StateRefused, choose, user_set_namespace
from squall.daemons.nimbus.validate import SubmissionError, check_conf
from squall.daemons.state import StateLineage
from squall.daemons.state.records import MAX_STATE_OWNERS


def test_a_reused_name_starts_empty_and_only_an_owner_carries_their_own_state():
    lineage = StateLineage().with_owner("alice", "ledger-1-100")
    # bob's ledger, with or without asking, never gets alice's state
    assert choose("ledger", "bob", "ledger-2-200", {}, lineage) == "ledger-2-200"
    with pytest.raises(StateRefused) as refused:
        choose("ledger", "bob", "ledger-2-200", {CARRY: True}, lineage)
    assert "only one's own" in str(refused.value) and "alice" not in str(refused.value)
    lineage = lineage.with_owner("bob", "ledger-2-200")
    # alice again: empty unless she asks; asked, her own, even after bob used the name
    assert choose("ledger", "alice", "ledger-3-300", {}, lineage) == "ledger-3-300"
    assert choose("ledger", "alice", "ledger-3-300", {CARRY: True}, lineage) == "ledger-1-100"
    with pytest.raises(StateRefused):
        choose("ledger", "carol", "ledger-4-400", {CARRY: True}, StateLineage())


def test_the_lineage_is_bounded_and_round_trips():
    lineage = StateLineage()
    for i in range(MAX_STATE_OWNERS + 5):
        lineage = lineage.with_owner(f"u{i}", f"n-{i}")
    assert len(lineage.owners) == MAX_STATE_OWNERS and lineage.namespace_of("u0") is None
    assert lineage.with_owner("u10", "n-x").owners[-1] == ("u10", "n-x")
    assert StateLineage.from_dict(lineage.to_dict()) == lineage
    for bad in ({"owners": [["a"]]}, {"owners": [["a", ""]]}, {"owners": "x"}):
        with pytest.raises(ValueError):
            StateLineage.from_dict(bad)


def test_users_may_not_name_the_namespace():
    assert user_set_namespace({NAMESPACE: "ledger-1-100"}) and user_set_namespace({NAMESPACE: None})
    assert not user_set_namespace({CARRY: True})


def test_a_bundle_that_sets_the_namespace_is_refused():
    with pytest.raises(SubmissionError, match="nimbus sets it"):
        check_conf("ledger", {"topology.name": "ledger", NAMESPACE: "ledger-1-100"})
    assert check_conf("ledger", {"topology.name": "ledger", CARRY: True})[CARRY] is True
