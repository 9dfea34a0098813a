"""Latency histograms an executor keeps for its metrics: fixed buckets, batch updates.

Timing every tuple would cost two clock reads and a call per tuple on the hot path, so a
bolt times each batch and records its mean per tuple, weighted by the batch size (sum and
count stay exact; the spread within a batch is lost), and a spout folds in the complete
latencies of at most ``SAMPLE_PER_BATCH`` trees of each ack batch. The buckets are Prometheus's (a value
lands in the first bucket whose upper bound is at least the value); the last count is the
+Inf bucket.
"""
from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from typing import Any

SAMPLE_PER_BATCH = 16  # complete latencies a spout folds in per ack batch

# Seconds. A bolt's execute is microseconds to seconds; a tuple tree takes milliseconds to
# the message timeout.
EXECUTE_BOUNDS = (1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.05, 0.1, 0.5, 1.0)
COMPLETE_BOUNDS = (1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Histogram:
    """Counts per bucket and the sum of what was observed. One writer thread; readers take
    ``snapshot()`` copies (the count is the sum of the copied buckets, so it always agrees
    with them)."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0

    def observe_many(self, values: Sequence[float]) -> None:
        counts, bounds = self.counts, self.bounds
        for v in values:
            counts[bisect_left(bounds, v)] += 1
        self.sum += sum(values)

    def observe_batch(self, total: float, n: int) -> None:
        """``n`` observations whose sum is ``total``, all counted at their mean."""
        self.counts[bisect_left(self.bounds, total / n)] += n
        self.sum += total

    def snapshot(self) -> dict[str, Any]:
        return {"bounds": list(self.bounds), "counts": list(self.counts), "sum": self.sum}

