"""Manual partition assignment: stable, complete, disjoint, and redone when partitions grow;
the metadata looked at again a period after the last look ended."""
from hypothesis import given
from hypothesis import strategies as st

from squall.contrib.kafka.assignment import (
    RefreshTimer,
    all_partitions,
    changes,
    subscribed_topics,
    task_partitions,
)


def test_round_robin_over_sorted_partitions():
    parts = all_partitions({"b": 2, "a": 3}, ["a", "b"])
    assert parts == [("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1)]
    assert task_partitions(parts, 0, 2) == [("a", 0), ("a", 2), ("b", 1)]
    assert task_partitions(parts, 1, 2) == [("a", 1), ("b", 0)]


@given(st.dictionaries(st.text("abc", min_size=1, max_size=3), st.integers(1, 12), max_size=5), st.integers(1, 9))
def test_every_partition_goes_to_exactly_one_task_whatever_the_order(topics, n):
    parts = all_partitions(topics, list(topics))
    shuffled = list(reversed(parts))
    got = [task_partitions(shuffled, i, n) for i in range(n)]
    assert sorted(p for g in got for p in g) == sorted(parts)
    assert got == [task_partitions(parts, i, n) for i in range(n)]  # order-independent: stable on restart


def test_added_partitions_are_reassigned_and_changes_reported():
    before = task_partitions(all_partitions({"t": 4}, ["t"]), 0, 2)
    after = task_partitions(all_partitions({"t": 6}, ["t"]), 0, 2)
    assert changes(before, after) == ([("t", 4)], [])


def test_topics_by_name_or_pattern():
    avail = ["orders", "orders-eu", "__consumer_offsets", "logs"]
    assert subscribed_topics(avail, ["orders", "missing"], None) == ["orders"]
    assert subscribed_topics(avail, None, r"orders.*") == ["orders", "orders-eu"]
    assert subscribed_topics(avail, None, r".*") == ["logs", "orders", "orders-eu"]  # no internal topics


def test_a_look_slower_than_the_period_does_not_make_the_next_one_due_at_once():
    timer = RefreshTimer(0.25)
    assert timer.due(0.0)  # the first look: at once
    timer.looked(0.5)      # began at 0.0, answered 0.5 s later (longer than the period)
    assert not timer.due(0.5) and not timer.due(0.7)
    assert timer.due(0.75)  # a period after it ended
    timer.looked(2.0)      # unanswered (a broker away, the request timed out): the same
    assert not timer.due(2.0) and not timer.due(2.2) and timer.due(2.25)
