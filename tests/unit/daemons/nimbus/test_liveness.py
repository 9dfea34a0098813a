"""Nimbus's liveness decisions, driven by a FakeClock: the grace after a (re)connection and
the restart grace of a supervisor that stopped cleanly."""
from __future__ import annotations

from squall.daemons.nimbus.liveness import (
    ReconnectGrace,
    last_heard,
    lost_node,
    next_judgement,
    supervisor_alive,
    vouched_while_away,
)
from squall.daemons.nimbus.scheduler import dead_executors
from squall.daemons.state import Assignment
from squall.daemons.timers import FakeClock


def test_no_reassignment_for_the_task_timeout_after_every_reconnection() -> None:
    clock = FakeClock()
    grace = ReconnectGrace(30.0, clock)
    assert not grace.active()  # nothing observed yet
    assert grace.observe(1) is True and grace.active() and grace.left() == 30.0
    clock.advance(29.9)
    assert grace.observe(1) is False and grace.active()
    clock.advance(0.2)
    assert not grace.active() and grace.left() == 0.0
    clock.advance(100.0)
    assert grace.observe(2) is True and grace.active()  # reconnected: a new grace
    clock.advance(30.0)
    assert not grace.active()


def test_an_away_supervisor_keeps_its_slots_for_the_restart_grace_only() -> None:
    assert supervisor_alive(False, 5.0, supervisor_timeout=5.0, restart_grace=30.0)
    assert not supervisor_alive(False, 5.1, supervisor_timeout=5.0, restart_grace=30.0)
    assert supervisor_alive(True, 29.0, supervisor_timeout=5.0, restart_grace=30.0)
    assert not supervisor_alive(True, 30.5, supervisor_timeout=5.0, restart_grace=30.0)
    assert not supervisor_alive(True, 0.1, supervisor_timeout=5.0, restart_grace=0.0)


def test_a_new_leader_judges_nothing_dead_for_the_task_timeout() -> None:
    clock = FakeClock()
    grace = ReconnectGrace(30.0, clock)
    grace.observe(1)
    clock.advance(100.0)
    assert not grace.active()
    grace.restart(1)  # took the lead again, same connection: a grace all the same
    assert grace.active() and grace.left() == 30.0
    assert grace.observe(1) is False  # the first round after it does not start another
    clock.advance(30.1)
    assert not grace.active()


def test_silence_is_counted_from_the_latest_thing_heard() -> None:
    assert last_heard(None, 5.0, 3.0) == 5.0
    assert last_heard(None) == float("-inf")


def test_the_next_judgement_is_when_the_first_silence_runs_out() -> None:
    assert next_judgement([100.0, 95.0, 120.0], timeout=30.0, after=110.0) == 125.0
    assert next_judgement([50.0, 60.0], timeout=30.0, after=110.0) is None  # ran out before: judged then
    # Ran out while the last round was running (judged at 110, now 127): at once.
    assert next_judgement([81.0, 97.0], timeout=30.0, after=110.0) == 111.0
    assert next_judgement([], timeout=30.0, after=0.0) is None


def test_a_topology_with_executors_on_a_lost_node_is_found_by_its_hosts() -> None:
    placed = Assignment("t", {(1, 1): ("a", 1), (2, 2): ("b", 1)}, {"a": "h1", "b": "h2"})
    assert not lost_node(placed, {"a", "b", "c"})
    assert lost_node(placed, {"a", "c"})
    assert lost_node(Assignment("t", {(1, 1): ("b", 1)}), {"a"})  # no hosts (rebuilt): by its slots
    assert not lost_node(None, set())


def test_the_workers_of_an_away_supervisor_are_not_judged_by_their_silence() -> None:
    # a:6700 runs executors 1-2 and b:6700 runs 3; both last heard at t=100, now it is t=140
    # (a task timeout of 30 s has passed). Supervisor a stopped cleanly and was last seen away,
    # within its grace, at t=140.
    placed = {("a", 6700): frozenset({(1, 1), (2, 2)}), ("b", 6700): frozenset({(3, 3)})}
    assignment = {ex: slot for slot, execs in placed.items() for ex in execs}
    beats = {slot: (100.0, sorted(execs)) for slot, execs in placed.items()}
    assert dead_executors(assignment, beats, {}, 140.0, 30.0, 20.0) == {(1, 1), (2, 2), (3, 3)}
    vouched = vouched_while_away(beats, placed, {"a": 140.0})
    assert dead_executors(assignment, vouched, {}, 140.0, 30.0, 20.0) == {(3, 3)}  # b's are dead still
    assert beats[("a", 6700)][0] == 100.0  # a copy
    # a is back (no longer away, still vouched at t=140) and has not reported yet: its
    # workers' silence counts from t=140.
    assert dead_executors(assignment, vouched, {}, 169.0, 30.0, 20.0) == {(3, 3)}
    assert dead_executors(assignment, vouched, {}, 171.0, 30.0, 20.0) == {(1, 1), (2, 2), (3, 3)}
    # A beat heard after it was last seen away is newer: it stands.
    fresh = {("a", 6700): (150.0, [(1, 1)])}
    assert vouched_while_away(fresh, placed, {"a": 140.0}) == fresh
