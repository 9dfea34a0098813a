"""Nimbus's scheduling decisions: free slots, even placement, keeping live workers, liveness."""
from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from squall.daemons.nimbus.scheduler import (
    SlotUse,
    available_slots,
    compute_assignment,
    dead_executors,
    even_sizes,
    interleave_slots,
    keeps_current,
    schedule_even,
    slots_in_use,
    start_times_after,
    unassigned_executors,
    worker_shortfall,
)


def execs(n: int) -> list[tuple[int, int]]:
    """n single-task executors."""
    return [(i, i) for i in range(1, n + 1)]


def sizes(assignment) -> list[int]:
    return sorted(Counter(assignment.values()).values())


def nodes_used(assignment) -> Counter:
    return Counter(node for node, _ in set(assignment.values()))


# --- slots ---------------------------------------------------------------------------------

def test_available_slots_alternate_between_supervisors():
    sups = {"b": [6701, 6700], "a": [6700, 6701, 6702], "c": [6700]}
    assert available_slots(sups, {}) == [
        ("a", 6700), ("b", 6700), ("c", 6700), ("a", 6701), ("b", 6701), ("a", 6702),
    ]


def test_available_slots_skip_other_topologies_but_not_the_excluded_one():
    sups = {"a": [1, 2], "b": [1, 2]}
    assignments = {"t1": {(1, 1): ("a", 1)}, "t2": {(1, 2): ("b", 2), (3, 3): ("b", 2)}}
    assert available_slots(sups, assignments) == [("a", 2), ("b", 1)]
    assert available_slots(sups, assignments, exclude_topology="t1") == [("a", 1), ("b", 1), ("a", 2)]


def test_slots_of_dead_supervisors_are_not_available():
    assert available_slots({"a": [1]}, {"t": {(1, 1): ("gone", 1)}}) == [("a", 1)]


def test_interleave_is_independent_of_input_order():
    slots = [("a", 1), ("a", 2), ("b", 1), ("b", 3), ("c", 9)]
    shuffled = slots[:]
    random.Random(4).shuffle(shuffled)
    assert interleave_slots(slots) == interleave_slots(shuffled)


def test_schedule_even_round_robin():
    assert schedule_even([(3, 3), (1, 1), (2, 2)], [("a", 1), ("b", 1)]) == {
        (1, 1): ("a", 1), (2, 2): ("b", 1), (3, 3): ("a", 1),
    }
    with pytest.raises(ValueError, match="no slots"):
        schedule_even([(1, 1)], [])


# --- fresh placement -----------------------------------------------------------------------

def test_even_spread_over_two_supervisors():
    sups = {"a": [1, 2, 3, 4], "b": [1, 2, 3, 4]}
    result = compute_assignment(execs(8), 4, {}, set(), sups, set())
    assert sizes(result) == [2, 2, 2, 2]
    assert nodes_used(result) == {"a": 2, "b": 2}


def test_even_spread_over_three_supervisors():
    sups = {"a": [1, 2], "b": [1, 2], "c": [1, 2]}
    result = compute_assignment(execs(7), 3, {}, set(), sups, set())
    assert sizes(result) == [2, 2, 3]
    assert nodes_used(result) == {"a": 1, "b": 1, "c": 1}


def test_multi_task_executors_and_more_workers_than_executors():
    sups = {"a": [1, 2, 3], "b": [1, 2, 3]}
    result = compute_assignment([(1, 2), (3, 4)], 5, {}, set(), sups, set())
    assert set(result) == {(1, 2), (3, 4)}
    assert len(set(result.values())) == 2  # never an empty worker
    assert worker_shortfall(5, 2, result) == 0


def test_slots_of_other_topologies_are_never_used():
    sups = {"a": [1, 2], "b": [1, 2]}
    taken = {("a", 1), ("b", 1)}
    result = compute_assignment(execs(4), 2, {}, set(), sups, taken)
    assert set(result.values()) == {("a", 2), ("b", 2)}


def test_bad_arguments_name_the_problem():
    with pytest.raises(ValueError, match="num_workers"):
        compute_assignment(execs(2), 0, {}, set(), {"a": [1]}, set())
    with pytest.raises(ValueError, match=r"bad executor \(5, 2\)"):
        compute_assignment([(5, 2)], 1, {}, set(), {"a": [1]}, set())


# --- keeping and moving ----------------------------------------------------------------------

def test_healthy_topology_keeps_its_placement():
    sups = {"a": [1, 2], "b": [1, 2]}
    current = {(1, 1): ("a", 2), (2, 2): ("b", 1), (3, 3): ("a", 2), (4, 4): ("b", 1)}
    result = compute_assignment(execs(4), 2, current, set(current), sups, set())
    assert result == current


def test_executors_move_off_a_lost_supervisor_and_live_ones_stay():
    sups = {"a": [1, 2], "b": [1, 2], "c": [1, 2]}
    current = {(1, 1): ("a", 1), (2, 2): ("b", 1), (3, 3): ("c", 1),
               (4, 4): ("a", 1), (5, 5): ("b", 1), (6, 6): ("c", 1)}
    del sups["b"]
    alive = {(1, 1), (3, 3), (4, 4), (6, 6)}  # b's worker stopped beating with b
    result = compute_assignment(execs(6), 3, current, alive, sups, set())
    for ex in alive:
        assert result[ex] == current[ex]
    moved = {result[(2, 2)], result[(5, 5)]}
    assert len(moved) == 1 and moved.pop() not in {("a", 1), ("c", 1)}
    assert sizes(result) == [2, 2, 2]
    assert all(node != "b" for node, _ in result.values())


def test_dead_worker_executors_prefer_a_free_slot_over_their_old_one():
    sups = {"a": [1, 2], "b": [1, 2]}
    current = {(1, 1): ("a", 1), (2, 2): ("b", 1), (3, 3): ("a", 1), (4, 4): ("b", 1)}
    alive = {(1, 1), (3, 3)}  # the worker on b:1 went silent; b itself is still up
    result = compute_assignment(execs(4), 2, current, alive, sups, set())
    assert result[(1, 1)] == result[(3, 3)] == ("a", 1)
    assert result[(2, 2)] == result[(4, 4)] == ("b", 2)  # same node load, not the dead slot


def test_dead_worker_slot_is_reused_when_nothing_else_is_free():
    sups = {"a": [1], "b": [1]}
    current = {(1, 1): ("a", 1), (2, 2): ("b", 1)}
    result = compute_assignment(execs(2), 2, current, {(1, 1)}, sups, set())
    assert result == current


def test_rebalance_two_to_three_workers():
    sups = {"a": [1, 2], "b": [1, 2], "c": [1, 2]}
    current = compute_assignment(execs(6), 2, {}, set(), {"a": [1, 2], "b": [1, 2]}, set())
    assert sizes(current) == [3, 3]
    result = compute_assignment(execs(6), 3, current, set(current), sups, set())
    assert sizes(result) == [2, 2, 2]
    assert nodes_used(result) == {"a": 1, "b": 1, "c": 1}
    scratch = compute_assignment(execs(6), 3, current, set(current), sups, set(), scratch=True)
    assert sizes(scratch) == [2, 2, 2]


def test_rebalance_keeps_slots_that_still_fit_the_split():
    sups = {"a": [1, 2], "b": [1, 2]}
    current = {(1, 1): ("a", 1), (2, 2): ("a", 1), (3, 3): ("b", 1), (4, 4): ("b", 1)}
    result = compute_assignment(execs(4), 3, current, set(current), sups, set())
    assert sizes(result) == [1, 1, 2]
    assert sum(1 for ex in current if result[ex] == current[ex]) >= 2  # one worker untouched


def test_rebalance_with_new_executors_drops_old_ones():
    sups = {"a": [1, 2], "b": [1, 2]}
    current = {(1, 2): ("a", 1), (3, 4): ("b", 1)}
    new = [(1, 1), (2, 2), (3, 3), (4, 4)]
    result = compute_assignment(new, 2, current, set(current), sups, set())
    assert set(result) == set(new)
    assert sizes(result) == [2, 2]


def test_not_enough_slots_uses_what_there_is_then_grows():
    few = {"a": [1], "b": [1]}
    result = compute_assignment(execs(8), 4, {}, set(), few, set())
    assert sizes(result) == [4, 4]
    assert worker_shortfall(4, 8, result) == 2
    more = {"a": [1, 2], "b": [1, 2]}
    grown = compute_assignment(execs(8), 4, result, set(result), more, set())
    assert sizes(grown) == [2, 2, 2, 2]
    assert worker_shortfall(4, 8, grown) == 0


def test_no_slot_at_all_leaves_everything_unassigned():
    result = compute_assignment(execs(3), 2, {}, set(), {"a": [1]}, {("a", 1)})
    assert result == {}
    assert unassigned_executors(execs(3), result) == execs(3)
    assert worker_shortfall(2, 3, result) == 2


def test_even_sizes():
    assert even_sizes(7, 3) == Counter({3: 1, 2: 2})
    assert even_sizes(6, 3) == Counter({2: 3})
    assert even_sizes(3, 0) == Counter()


# --- properties ------------------------------------------------------------------------------

@st.composite
def clusters(draw):
    nodes = draw(st.lists(st.sampled_from("abcd"), min_size=1, max_size=4, unique=True))
    sups = {n: draw(st.lists(st.integers(6700, 6704), min_size=1, max_size=4, unique=True)) for n in nodes}
    all_slots = sorted((n, p) for n, ps in sups.items() for p in ps)
    ghost = [("z", 6700)]  # a supervisor that died
    # Contiguous executor ranges over tasks 1..n.
    n_tasks = draw(st.integers(1, 14))
    cuts = sorted(draw(st.sets(st.integers(1, n_tasks - 1), max_size=n_tasks - 1))) if n_tasks > 1 else []
    bounds = [0, *cuts, n_tasks]
    executors = [(bounds[i] + 1, bounds[i + 1]) for i in range(len(bounds) - 1)]
    others = set(draw(st.lists(st.sampled_from(all_slots), max_size=len(all_slots))))
    pool = all_slots + ghost
    current = {ex: draw(st.sampled_from(pool)) for ex in executors if draw(st.booleans())}
    current[(99, 99)] = draw(st.sampled_from(pool))  # an executor the topology no longer has
    alive = {ex for ex in current if draw(st.booleans())}
    num_workers = draw(st.integers(1, 6))
    return executors, num_workers, current, alive, sups, others


@settings(max_examples=400)
@given(clusters())
def test_assignment_properties(cluster):
    executors, num_workers, current, alive, sups, others = cluster
    usable = {(n, p) for n, ps in sups.items() for p in ps} - others
    result = compute_assignment(executors, num_workers, current, alive, sups, others)

    if usable:
        assert set(result) == set(executors)  # every executor exactly once
    else:
        assert result == {}
    used = set(result.values())
    assert used <= usable  # live slots only, none of another topology
    assert len(used) == min(num_workers, len(executors), len(usable))
    if result:
        counts = sizes(result)
        assert counts[-1] - counts[0] <= 1
    # Stable: a healthy result is kept as it is.
    assert compute_assignment(executors, num_workers, result, set(result), sups, others) == result
    # Deterministic whatever the input order.
    shuffled = list(current.items())
    random.Random(len(shuffled)).shuffle(shuffled)
    again = compute_assignment(list(reversed(executors)), num_workers, dict(shuffled), alive,
                               dict(reversed(list(sups.items()))), others)
    assert again == result


@settings(max_examples=200)
@given(clusters())
def test_live_placements_survive_when_the_split_is_unchanged(cluster):
    executors, num_workers, _, _, sups, others = cluster
    first = compute_assignment(executors, num_workers, {}, set(), sups, others)
    if not first:
        return
    victim = sorted(set(first.values()))[0]
    alive = {ex for ex, slot in first.items() if slot != victim}
    result = compute_assignment(executors, num_workers, first, alive, sups, others)
    for ex in alive:
        assert result[ex] == first[ex]


# --- liveness and start times ---------------------------------------------------------------

def test_dead_executors():
    assignment = {(1, 1): ("a", 1), (2, 2): ("a", 1), (3, 3): ("b", 1), (4, 4): ("c", 1), (5, 5): ("d", 1)}
    beats = {
        ("a", 1): (95.0, [(1, 1), (2, 2)]),  # fresh
        ("b", 1): (50.0, [(3, 3)]),  # stale
        ("c", 1): (99.0, [(9, 9)]),  # fresh but does not cover (4, 4)
    }
    starts = {ex: 0.0 for ex in assignment}
    assert dead_executors(assignment, beats, starts, 100.0, 30, 60) == {(3, 3), (4, 4), (5, 5)}


def test_launch_grace_covers_workers_that_never_beat_or_beat_long_ago():
    assignment = {(1, 1): ("a", 1), (2, 2): ("b", 1)}
    beats = {("b", 1): (0.0, [(2, 2)])}  # an old worker's beat on the slot
    starts = {(1, 1): 50.0, (2, 2): 50.0}
    assert dead_executors(assignment, beats, starts, 100.0, 30, 60) == set()
    assert dead_executors(assignment, beats, starts, 111.0, 30, 60) == {(1, 1), (2, 2)}
    assert dead_executors(assignment, {}, {}, 1.0, 30, 60) == {(1, 1), (2, 2)}  # no start time: no grace


def test_start_times_after_a_move():
    old = {(1, 1): ("a", 1), (2, 2): ("b", 1)}
    new = {(1, 1): ("a", 1), (2, 2): ("c", 1), (3, 3): ("a", 1)}
    assert start_times_after(old, new, {(1, 1): 5.0, (2, 2): 5.0}, 9.0) == {
        (1, 1): 5.0, (2, 2): 9.0, (3, 3): 9.0,
    }


# --- a round over many topologies ------------------------------------------------------------

def test_slot_use_answers_what_others_hold_as_assignments_change():
    use = SlotUse({"a": {(1, 1): ("n1", 1), (2, 2): ("n1", 2)}, "b": {(1, 1): ("n2", 1)},
                   "c": {(1, 1): ("n1", 2)}})  # c shares n1:2 with a (a hand-edited node)
    assert use.by_others("a") == {("n2", 1), ("n1", 2)}
    assert use.by_others("b") == {("n1", 1), ("n1", 2)}
    use.update("a", {(1, 1): ("n3", 1)})
    assert use.by_others("b") == {("n3", 1), ("n1", 2)} and use.by_others("a") == {("n2", 1), ("n1", 2)}
    use.update("c", {})
    assert use.by_others("b") == {("n3", 1)}
    assignments = {"a": {(1, 1): ("n3", 1)}, "b": {(1, 1): ("n2", 1)}}
    for tid in assignments:
        assert use.by_others(tid) == slots_in_use(assignments, exclude_topology=tid)



def test_slot_use_kept_across_rounds_follows_every_new_assignment():
    a1, b1 = {(1, 1): ("n1", 1)}, {(1, 1): ("n2", 1)}
    use = SlotUse({"a": a1, "b": b1})
    use.sync({"a": a1, "b": b1})  # a round in which nothing changed
    assert use.by_others("a") == {("n2", 1)}
    a2 = {(1, 1): ("n3", 1)}  # a rewritten assignment (read again: a new mapping)
    use.sync({"a": a2, "b": b1, "c": {(1, 1): ("n1", 1)}})
    assert use.by_others("b") == {("n3", 1), ("n1", 1)} and use.held_alone("c", ("n1", 1))
    use.sync({"b": b1})  # a and c removed
    assert use.by_others("b") == set() and use.by_others("a") == {("n2", 1)}
    rounds = {"a": a2, "b": b1}
    use.sync(rounds)
    for tid in rounds:
        assert use.by_others(tid) == slots_in_use(rounds, exclude_topology=tid)

@settings(max_examples=300)
@given(st.integers(1, 40), st.integers(1, 8), st.integers(1, 5), st.integers(1, 4), st.integers(0, 3),
       st.integers(0, 2**32))
def test_keeps_current_only_when_the_full_pass_would_change_nothing(n_exec, workers, n_sups, ports, taken, seed):
    rng = random.Random(seed)
    sups = {f"s{i}": list(range(7000, 7000 + ports)) for i in range(n_sups)}
    wanted = execs(n_exec)
    others = set(rng.sample(sorted((n, p) for n, ps in sups.items() for p in ps), min(taken, n_sups * ports)))
    current = compute_assignment(wanted, workers, {}, [], sups, others)
    if rng.random() < 0.3 and current:  # disturb it: a lost supervisor, a dead executor or a moved one
        kind = rng.choice(["sup", "dead", "move", "grow"])
        if kind == "sup":
            sups.pop(rng.choice(sorted({n for n, _ in current.values()})), None)
        elif kind == "move":
            ex = rng.choice(wanted)
            current = {**current, ex: ("elsewhere", 1)}
        elif kind == "grow":
            wanted = execs(n_exec + 1)
    dead = {rng.choice(wanted)} if current and rng.random() < 0.2 else set()
    alive = set(current) - dead
    if keeps_current(wanted, workers, current, dead, sups, others):
        assert compute_assignment(wanted, workers, current, alive, sups, others) == current
