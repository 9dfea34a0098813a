"""Rates over the last minute for ``squall status``, from the counters in worker beats.

Beats carry totals since each worker started. Nimbus keeps a short ring of recent totals
per executor (``RateHistory``, bounded in samples, time, executors and topologies) as beats
arrive in the supervisors' reports, and ``window_rates`` turns a ring into per-second
rates: plain code.
"""
from __future__ import annotations

import threading
from array import array
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence

ExecutorId = tuple[int, int]
COUNTERS = ("emitted", "executed", "acked", "failed")
WINDOW_SECS = 60.0
MAX_SAMPLES = 128         # per executor: a minute or more even with stats every 0.5 s
MAX_TOPOLOGIES = 256      # rings kept; the least recently updated topology goes first
WIDTH = 1 + len(COUNTERS)  # a sample in a ring: its time, then the counters

Sample = tuple[float, tuple[int, ...]]  # (time of the counters, values in COUNTERS order, then others)


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
    """Recent counter samples per topology and executor; safe from several threads. A ring
    is a flat array of doubles (time and counters per sample): a cluster of 100,000
    executors keeps a minute of samples in tens of megabytes, not hundreds."""

    def __init__(self, window: float = WINDOW_SECS, max_samples: int = MAX_SAMPLES,
                 max_topologies: int = MAX_TOPOLOGIES) -> None:
        self.window = window
        self._max_samples = max_samples
        self._max_topologies = max_topologies
        self._rings: OrderedDict[str, dict[ExecutorId, array]] = OrderedDict()
        self._lock = threading.Lock()
        self._swept = float("-inf")  # when forget_stale last looked

    def add(self, topology_id: str, samples: Mapping[ExecutorId, Sample]) -> None:
        """Add each executor's sample (ignored unless newer than its last); samples older than
        the window before the newest, and past ``max_samples``, are dropped."""
        with self._lock:
            rings = self._rings.pop(topology_id, {})
            self._rings[topology_id] = rings
            for ex, (t, counters) in samples.items():
                ring = rings.get(ex)
                if ring is None:
                    ring = rings[ex] = array("d")
                if ring and t <= ring[-WIDTH]:
                    continue
                ring.append(t)
                ring.extend(counters[:len(COUNTERS)])  # the latency sums go to the history only
                drop = 0
                while ring[drop] < t - self.window or len(ring) - drop > self._max_samples * WIDTH:
                    drop += WIDTH
                if drop:
                    del ring[:drop]
            while len(self._rings) > self._max_topologies:
                self._rings.popitem(last=False)

    def forget_stale(self, now: float) -> None:
        """Forget executors with no sample for two windows (moved away, or their topology's
        workers stopped), and topologies left with none; a pass over every ring, done at
        most once a window."""
        if now < self._swept + self.window:
            return
        self._swept = now
        with self._lock:
            for topology_id, rings in list(self._rings.items()):
                for ex in [ex for ex, ring in rings.items() if not ring or ring[-WIDTH] < now - 2 * self.window]:
                    del rings[ex]
                if not rings:
                    del self._rings[topology_id]

    def rates(self, topology_id: str, now: float) -> dict[ExecutorId, dict[str, float] | None]:
        with self._lock:
            rings = {ex: _samples(r) for ex, r in self._rings.get(topology_id, {}).items()}
        return {ex: window_rates(ring, now, self.window) for ex, ring in rings.items()}

    def retain(self, topology_ids: Iterable[str]) -> None:
        keep = set(topology_ids)
        with self._lock:
            for topology_id in [t for t in self._rings if t not in keep]:
                del self._rings[topology_id]


def _samples(ring: array) -> list[Sample]:
    return [(ring[i], tuple(int(v) for v in ring[i + 1:i + WIDTH])) for i in range(0, len(ring), WIDTH)]
