"""Rates over the last minute for ``squall status``, from the counters in worker beats.

Beats carry totals since each worker started. Nimbus keeps a short ring of recent totals
per executor (``RateHistory``, bounded in samples, time, executors and topologies) as beats
arrive in the supervisors' reports, and ``window_rates`` turns a ring into per-second
rates: plain code. It also keeps each executor's totals across its workers' restarts
(``totals``): what the longer windows and the plot of :mod:`squall.daemons.nimbus.history`
are made of.
"""
from __future__ import annotations

import threading
from array import array
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence

from squall.daemons.reports import COUNTER_NAMES

ExecutorId = tuple[int, int]
COUNTERS = ("emitted", "executed", "acked", "failed")  # the ones with a rate per second
WINDOW_SECS = 60.0
MAX_SAMPLES = 128         # per executor: a minute or more even with stats every 0.5 s
MAX_TOPOLOGIES = 256      # rings kept; the least recently updated topology goes first
WIDTH = 1 + len(COUNTERS)  # a sample in a ring: its time, then the counters with a rate
N = len(COUNTER_NAMES)  # what an executor's totals keep: every counter (latency sums too)

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
    """Recent counter samples per topology and executor; safe from several threads. A ring
    is a flat array of doubles (time and counters per sample): a cluster of 100,000
    executors keeps a minute of samples in tens of megabytes, not hundreds."""

    def __init__(self, window: float = WINDOW_SECS, max_samples: int = MAX_SAMPLES,
                 max_topologies: int = MAX_TOPOLOGIES) -> None:
        self.window = window
        self._max_samples = max_samples
        self._max_topologies = max_topologies
        self._rings: OrderedDict[str, dict[ExecutorId, array]] = OrderedDict()
        # executor -> its last counters (N) then its counters summed over its workers' lives
        # (N), as far as nimbus heard them
        self._totals: dict[str, dict[ExecutorId, array]] = {}
        self._lock = threading.Lock()
        self._swept = float("-inf")  # when forget_stale last looked

    def add(self, topology_id: str, samples: Mapping[ExecutorId, Sample]) -> None:
        """Add each executor's sample (ignored unless newer than its last); samples older than
        the window before the newest, and past ``max_samples``, are dropped."""
        with self._lock:
            rings = self._rings.pop(topology_id, {})
            self._rings[topology_id] = rings
            totals = self._totals.setdefault(topology_id, {})
            for ex, (t, given) in samples.items():
                counters = (*given, *(0,) * (N - len(given)))  # older senders: no latency sums
                ring = rings.get(ex)
                if ring is None:
                    ring = rings[ex] = array("d")
                if ring and t <= ring[-WIDTH]:
                    continue
                _add_to_totals(totals, ex, counters)
                ring.append(t)
                ring.extend(counters[:len(COUNTERS)])
                drop = 0
                while ring[drop] < t - self.window or len(ring) - drop > self._max_samples * WIDTH:
                    drop += WIDTH
                if drop:
                    del ring[:drop]
            while len(self._rings) > self._max_topologies:
                gone, _ = self._rings.popitem(last=False)
                self._totals.pop(gone, None)

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
                    self._totals.pop(topology_id, None)

    def rates(self, topology_id: str, now: float) -> dict[ExecutorId, dict[str, float] | None]:
        with self._lock:
            rings = {ex: _samples(r) for ex, r in self._rings.get(topology_id, {}).items()}
        return {ex: window_rates(ring, now, self.window) for ex, ring in rings.items()}

    def totals(self, topology_id: str) -> dict[ExecutorId, tuple[float, ...]]:
        """Each executor's counters (COUNTER_NAMES) summed over its workers' lives."""
        with self._lock:
            return {ex: tuple(a[N:]) for ex, a in self._totals.get(topology_id, {}).items()}

    def retain(self, topology_ids: Iterable[str]) -> None:
        keep = set(topology_ids)
        with self._lock:
            for topology_id in [t for t in self._rings if t not in keep]:
                del self._rings[topology_id]
            for topology_id in [t for t in self._totals if t not in keep]:
                del self._totals[topology_id]


def _add_to_totals(totals: dict[ExecutorId, array], ex: ExecutorId, counters: Sequence[int]) -> None:
    """Fold a new sample into an executor's running totals: what grew since its last sample,
    all of it when the counters went down (its worker restarted); the first sample counts
    what the worker did before nimbus heard it."""
    total = totals.get(ex)
    if total is None:
        totals[ex] = array("d", (*counters, *counters))
        return
    restarted = any(new < old for new, old in zip(counters, total[:N]))
    for i, new in enumerate(counters):
        total[N + i] += new if restarted else new - total[i]
        total[i] = new


def _samples(ring: array) -> list[Sample]:
    return [(ring[i], tuple(int(v) for v in ring[i + 1:i + WIDTH])) for i in range(0, len(ring), WIDTH)]
