"""Rates over the last minute for ``squall status``, from the counters in worker beats.

Beats carry totals since each worker started. Nimbus keeps a short ring of recent totals
per executor (``RateHistory``, bounded in samples, executors and topologies) whenever it
reads beats, and ``window_rates`` turns a ring into per-second rates: plain code.
"""
from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Iterable, Mapping, Sequence

ExecutorId = tuple[int, int]
COUNTERS = ("emitted", "executed", "acked", "failed")
WINDOW_SECS = 60.0
MAX_SAMPLES = 128         # per executor: a minute or more even with stats every 0.5 s
MAX_TOPOLOGIES = 256      # rings kept; the least recently updated topology goes first

Sample = tuple[float, tuple[int, ...]]  # (time of the counters, values in COUNTERS order)


def window_rates(samples: Sequence[Sample], now: float, window: float = WINDOW_SECS) -> dict[str, float] | None:
    """Per-second rates of each counter over the last ``window`` seconds of ``samples``
    (oldest first, timed by the worker's clock), or None without two usable samples.
    Counters that went down (the executor's worker restarted) start the window over. An
    executor whose last sample is older than ``window`` before ``now`` has no rate (its
    worker stopped beating); clock skew between hosts matters only against that bound."""
    if len(samples) < 2 or now - samples[-1][0] > window:
        return None
    start = 0
    for i in range(len(samples) - 1, 0, -1):
        if any(new < old for new, old in zip(samples[i][1], samples[i - 1][1])):
            start = i
            break
    usable = [s for s in samples[start:] if s[0] >= samples[-1][0] - window]
    if len(usable) < 2:
        return None
    (t0, first), (t1, last) = usable[0], usable[-1]
    if t1 <= t0:
        return None
    return {name: (b - a) / (t1 - t0) for name, a, b in zip(COUNTERS, first, last)}


def sum_rates(rows: Iterable[dict[str, float] | None]) -> dict[str, float] | None:
    """Rates of a component: the sum over its executors that have one (None if none has)."""
    present = [r for r in rows if r is not None]
    if not present:
        return None
    return {name: sum(r[name] for r in present) for name in COUNTERS}


class RateHistory:
    """Recent counter samples per topology and executor; safe from several threads."""

    def __init__(self, window: float = WINDOW_SECS, max_samples: int = MAX_SAMPLES,
                 max_topologies: int = MAX_TOPOLOGIES) -> None:
        self.window = window
        self._max_samples = max_samples
        self._max_topologies = max_topologies
        self._rings: OrderedDict[str, dict[ExecutorId, deque[Sample]]] = OrderedDict()
        self._lock = threading.Lock()

    def record(self, topology_id: str, samples: Mapping[ExecutorId, Sample]) -> None:
        """Add each executor's sample (ignored unless newer than its last); executors not in
        ``samples`` are forgotten (no longer assigned)."""
        with self._lock:
            rings = self._rings.pop(topology_id, {})
            self._rings[topology_id] = rings = {ex: rings[ex] for ex in samples if ex in rings}
            for ex, sample in samples.items():
                ring = rings.get(ex)
                if ring is None:
                    ring = rings[ex] = deque(maxlen=self._max_samples)
                if not ring or sample[0] > ring[-1][0]:
                    ring.append(sample)
            while len(self._rings) > self._max_topologies:
                self._rings.popitem(last=False)

    def rates(self, topology_id: str, now: float) -> dict[ExecutorId, dict[str, float] | None]:
        with self._lock:
            rings = {ex: list(r) for ex, r in self._rings.get(topology_id, {}).items()}
        return {ex: window_rates(ring, now, self.window) for ex, ring in rings.items()}

    def retain(self, topology_ids: Iterable[str]) -> None:
        keep = set(topology_ids)
        with self._lock:
            for topology_id in [t for t in self._rings if t not in keep]:
                del self._rings[topology_id]
