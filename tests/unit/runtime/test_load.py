"""Load-aware shuffling (squall.runtime.load): weights from loads, local-or-shuffle's spill,
and choosers that follow the loads a worker refreshes."""
from __future__ import annotations

import random
from collections import Counter

from squall.grouping import Grouping, make_chooser
from squall.runtime.load import CHOICES, LOCAL_HIGH_LOAD, MIN_WEIGHT, TaskLoads, choices, local_pool, weights
from squall.tuple import Fields

FIELDS = Fields(["n"])


def test_a_task_weighs_as_much_as_it_is_idle_and_a_full_one_is_never_cut_off():
    assert weights([1, 2, 3, 4], {2: 0.5, 3: 1.0, 4: 7.0}) == [100, 25, MIN_WEIGHT, MIN_WEIGHT]


def test_choices_follow_the_weights():
    order = choices([1, 2], {2: 0.5}, random.Random(0))
    counts = Counter(t for (t,) in order)
    assert abs(counts[1] / counts[2] - 4) < 0.2 and abs(len(order) - CHOICES) < 5


def test_local_or_shuffle_keeps_to_local_tasks_until_they_are_loaded():
    assert local_pool([1], [2, 3], {1: LOCAL_HIGH_LOAD - 0.01}) == [1]
    assert local_pool([1], [2, 3], {1: LOCAL_HIGH_LOAD}) == [1, 2, 3]
    assert local_pool([], [2, 3], {}) == [2, 3]


def _sent(choose, n=10_000):
    return Counter(choose([0])[0] for _ in range(n))


def test_a_shuffle_sends_less_to_a_loaded_task_once_the_worker_refreshes():
    loads = {}
    task_loads = TaskLoads(lambda task: loads.get(task, 0.0), lambda tasks: {t: loads[t] for t in tasks if t in loads})
    choose = make_chooser(Grouping("shuffle"), FIELDS, [5, 6], frozenset(), 1, loads=task_loads)
    even = _sent(choose)
    assert abs(even[5] - even[6]) < 200  # nothing known yet: even
    loads[6] = 0.95  # task 6 (another worker's) reports a nearly full queue
    task_loads.refresh()
    skewed = _sent(choose)
    assert skewed[6] < skewed[5] / 10 and skewed[6] > 0


def test_local_or_shuffle_spills_to_other_workers_when_its_local_task_is_loaded():
    local_fill = {7: 0.0}
    task_loads = TaskLoads(lambda task: local_fill[task], lambda tasks: {})
    choose = make_chooser(Grouping("local_or_shuffle"), FIELDS, [7, 8, 9], frozenset({7}), 1, loads=task_loads)
    assert set(_sent(choose)) == {7}
    local_fill[7] = 0.9
    task_loads.refresh()
    sent = _sent(choose)
    assert sent[8] > sent[7] and sent[9] > sent[7] and sent[7] > 0


def test_without_loads_shuffle_stays_an_even_round_robin():
    choose = make_chooser(Grouping("shuffle"), FIELDS, [5, 6], frozenset(), 1)
    assert _sent(choose, 1000) == {5: 500, 6: 500}
