"""Which partitions a spout task reads (Storm's ManualPartitioner) and when it looks again, plain code.

Every task computes the same answer from the same inputs: the partitions of the
subscribed topics sorted by (topic, partition), dealt round robin over the component's
tasks by task index. So the assignment is stable across restarts (no group rebalance) and
is simply recomputed when partitions are added or topics appear.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

TopicPartition = tuple[str, int]


def subscribed_topics(available: Iterable[str], topics: Sequence[str] | None, pattern: str | None) -> list[str]:
    """The topics to read: the named ones that exist, or those the pattern matches whole
    (Kafka's internal ``__``-prefixed topics never match a pattern)."""
    names = set(available)
    if pattern is not None:
        rx = re.compile(pattern)
        return sorted(t for t in names if rx.fullmatch(t) and not t.startswith("__"))
    return sorted(t for t in (topics or ()) if t in names)


def all_partitions(partitions_by_topic: Mapping[str, int | Iterable[int]],
                   topics: Iterable[str]) -> list[TopicPartition]:
    out: list[TopicPartition] = []
    for topic in topics:
        parts = partitions_by_topic.get(topic, ())
        ids = range(parts) if isinstance(parts, int) else parts
        out.extend((topic, int(p)) for p in ids)
    return sorted(out)


def task_partitions(partitions: Sequence[TopicPartition], task_index: int, n_tasks: int) -> list[TopicPartition]:
    """Round robin: partition i of the sorted list goes to task ``i % n_tasks``."""
    if not 0 <= task_index < n_tasks:
        raise ValueError(f"task index {task_index} is not below the task count {n_tasks}")
    return sorted(partitions)[task_index::n_tasks]


def changes(old: Iterable[TopicPartition],
            new: Iterable[TopicPartition]) -> tuple[list[TopicPartition], list[TopicPartition]]:
    """(added, revoked) between two assignments."""
    o, n = set(old), set(new)
    return sorted(n - o), sorted(o - n)


class RefreshTimer:
    """When a task looks at the metadata again: ``period`` seconds after its last look
    *ended*. Counted from the start, a look slower than the period (a broker away, a
    metadata request queued behind a long fetch) would make every later turn look again
    at once, and the spout would do little else."""

    def __init__(self, period: float) -> None:
        self.period = period
        self.next = float("-inf")  # the first look is due at once

    def due(self, now: float) -> bool:
        return now >= self.next

    def looked(self, now: float) -> None:
        """A look (answered or not) ended at ``now``."""
        self.next = now + self.period
