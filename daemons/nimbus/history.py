"""Component counters over time, kept by the leading nimbus: rates and latencies over Storm's
windows (10 minutes, 3 hours, 1 day, all time) for ``squall status`` and the UI, and the
points of the topology page's plot of throughput, latency and failures.

Each executor's counters are folded into running totals as reports come (``RunningTotals``:
what grew since its last sample, all of it when its worker restarted), summed by component
as they come, so that a round only copies a few numbers per component. Each round the
leader records every component's totals into a series: the newest totals, and
three tiers of points a fixed step apart (5 s for 10 minutes, 2 min for 3 hours, 15 min for a
day). A window's figures are the difference between the newest totals and the oldest point
inside the window, over the time between them. Plain code; memory is bounded by the tiers'
lengths and ``MAX_SERIES`` (the least recently recorded topology goes first). A new leader
starts with no history.
"""
from __future__ import annotations

import threading
from array import array
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from operator import add, lt, sub
from typing import Any

from squall.runtime.stats import COUNTER_NAMES

ExecutorId = tuple[int, int]

TIERS = ((5.0, 120), (120.0, 90), (900.0, 96))  # (step in seconds, points kept)
WINDOWS = ((600, "10m"), (10_800, "3h"), (86_400, "1d"))  # Storm's, besides all time
ALL_TIME = "all"
MAX_SERIES = 4096  # component series kept in all (a series is about 20 KB when full)
MAX_TOPOLOGIES = 256  # topologies whose running totals are kept; the least recently reported goes first
WIDTH = 1 + len(COUNTER_NAMES)  # a point: its time, then the totals
_I = {name: i for i, name in enumerate(COUNTER_NAMES)}
RATES = ("emitted", "executed", "acked", "failed")


def figures(deltas: Sequence[float], secs: float | None) -> dict[str, Any]:
    """Counts, rates per second (with ``secs``) and mean latencies in ms of counter deltas."""
    out: dict[str, Any] = {name: int(deltas[_I[name]]) for name in RATES}
    if secs is not None:
        out["secs"] = round(secs, 1)
        out.update({f"{name}_per_sec": round(deltas[_I[name]] / secs, 2) for name in RATES})
    executed, completed = deltas[_I["executed"]], deltas[_I["completed"]]
    out["execute_latency_ms"] = round(deltas[_I["busy_us"]] / executed / 1000, 4) if executed > 0 else None
    out["complete_latency_ms"] = round(deltas[_I["complete_us"]] / completed / 1000, 3) if completed > 0 else None
    return out


class Series:
    """One component's totals over time."""

    __slots__ = ("current", "tiers")

    def __init__(self) -> None:
        self.current: tuple[float, tuple[float, ...]] | None = None
        self.tiers = [array("d") for _ in TIERS]

    def record(self, now: float, totals: Sequence[float]) -> None:
        if self.current is not None and now <= self.current[0]:
            return
        self.current = (now, tuple(totals))
        for (step, keep), tier in zip(TIERS, self.tiers):
            if not tier or now - tier[-WIDTH] >= step:
                tier.append(now)
                tier.extend(totals)
                if len(tier) > keep * WIDTH:
                    del tier[:WIDTH]

    def since(self, start: float) -> tuple[float, tuple[float, ...]] | None:
        """The oldest point at or after ``start``, from the finest tier reaching back there."""
        best: tuple[float, tuple[float, ...]] | None = None
        for tier in self.tiers:
            for i in range(0, len(tier), WIDTH):
                if tier[i] >= start:
                    if best is None or tier[i] < best[0]:
                        best = (tier[i], tuple(tier[i + 1:i + WIDTH]))
                    break
        return best

    def points(self, start: float) -> list[tuple[float, tuple[float, ...]]]:
        """Points since ``start`` from the finest tier that reaches back that far, and the newest."""
        chosen = self.tiers[-1]
        for (step, keep), tier in zip(TIERS, self.tiers):
            if step * keep >= (self.current[0] if self.current else start) - start:
                chosen = tier
                break
        out = [(chosen[i], tuple(chosen[i + 1:i + WIDTH])) for i in range(0, len(chosen), WIDTH)
               if chosen[i] >= start]
        if self.current is not None and (not out or self.current[0] > out[-1][0]):
            out.append(self.current)
        return out


def windows_of(series: Series, now: float) -> dict[str, Any] | None:
    """A component's figures over each window and all time (None before its first record)."""
    if series.current is None:
        return None
    t1, last = series.current
    out: dict[str, Any] = {}
    for secs, label in WINDOWS:
        first = series.since(now - secs)
        if first is None or t1 - first[0] < 1.0:
            out[label] = None
            continue
        out[label] = figures([b - a for a, b in zip(first[1], last)], t1 - first[0])
    out[ALL_TIME] = figures(last, None)
    return out


def rate_points(points: Sequence[tuple[float, tuple[float, ...]]]) -> list[dict[str, Any]]:
    """Between consecutive points: rates per second and mean latencies (at the later time)."""
    out = []
    for (t0, a), (t1, b) in zip(points, points[1:]):
        if t1 - t0 < 0.5:
            continue
        f = figures([y - x for x, y in zip(a, b)], t1 - t0)
        out.append({"time": round(t1, 3), **{f"{n}_per_sec": f[f"{n}_per_sec"] for n in RATES},
                    "execute_latency_ms": f["execute_latency_ms"], "complete_latency_ms": f["complete_latency_ms"]})
    return out


def summed(points_by_component: Mapping[str, Sequence[tuple[float, tuple[float, ...]]]],
           components: Iterable[str]) -> list[tuple[float, tuple[float, ...]]]:
    """The points of several components added up, time by time (times all of them have)."""
    chosen = [points_by_component[c] for c in components if c in points_by_component]
    if not chosen:
        return []
    by_time: dict[float, list[float]] = {}
    counts: dict[float, int] = {}
    for points in chosen:
        for t, values in points:
            total = by_time.setdefault(t, [0.0] * len(values))
            for i, v in enumerate(values):
                total[i] += v
            counts[t] = counts.get(t, 0) + 1
    return [(t, tuple(by_time[t])) for t in sorted(by_time) if counts[t] == len(chosen)]


class CounterHistory:
    """Every topology's component series; safe from several threads."""

    def __init__(self, max_series: int = MAX_SERIES) -> None:
        self._max_series = max_series
        self._series: OrderedDict[str, dict[str, Series]] = OrderedDict()
        self._count = 0
        self._lock = threading.Lock()

    def record(self, topology_id: str, totals: Mapping[str, Sequence[float]], now: float) -> None:
        """The components' totals now (a leader's round)."""
        with self._lock:
            series = self._series.pop(topology_id, {})
            self._series[topology_id] = series
            for component, values in totals.items():
                one = series.get(component)
                if one is None:
                    one = series[component] = Series()
                    self._count += 1
                one.record(now, values)
            while self._count > self._max_series and len(self._series) > 1:
                _, gone = self._series.popitem(last=False)
                self._count -= len(gone)

    def windows(self, topology_id: str, now: float) -> dict[str, dict[str, Any] | None]:
        with self._lock:
            series = dict(self._series.get(topology_id, {}))
            return {c: windows_of(s, now) for c, s in series.items()}

    def points(self, topology_id: str, start: float) -> dict[str, list[tuple[float, tuple[float, ...]]]]:
        with self._lock:
            return {c: s.points(start) for c, s in self._series.get(topology_id, {}).items()}

    def retain(self, topology_ids: Iterable[str]) -> None:
        keep = set(topology_ids)
        with self._lock:
            for topology_id in [t for t in self._series if t not in keep]:
                self._count -= len(self._series.pop(topology_id))


N = len(COUNTER_NAMES)


class RunningTotals:
    """Per topology, each executor's last counters and its totals over its workers' lives,
    and the totals summed by component once the
    round has said which executor is which component's. Safe from several threads; bounded
    by ``max_topologies`` and the executors the reports name."""

    def __init__(self, max_topologies: int = MAX_TOPOLOGIES) -> None:
        self._max_topologies = max_topologies
        # executor -> [its last counters, its totals]
        self._executors: OrderedDict[str, dict[ExecutorId, list[Any]]] = OrderedDict()
        self._components: dict[str, Mapping[ExecutorId, str]] = {}
        self._sums: dict[str, dict[str, list[float]]] = {}
        self._retired: dict[str, dict[str, list[float]]] = {}  # totals of executors a rebalance ended
        self._heard: dict[str, float] = {}  # when the newest report was folded in (nimbus's clock)
        self._lock = threading.Lock()

    def add(self, topology_id: str, samples: Mapping[ExecutorId, tuple[float, Sequence[int]]],
            heard: float) -> None:
        """Fold each executor's counters in, as heard by nimbus at ``heard`` (the samples' own
        times are not needed: a sample not newer than the last one adds nothing, its counters
        being the same or, after a restart, lower). On every report of every supervisor:
        C-level maps, no loop in Python per counter."""
        with self._lock:
            self._heard[topology_id] = max(heard, self._heard.get(topology_id, heard))
            executors = self._executors.pop(topology_id, {})
            self._executors[topology_id] = executors
            components = self._components.get(topology_id, {})
            sums = self._sums.setdefault(topology_id, {})
            for ex, (_, counters) in samples.items():
                if len(counters) != N:
                    counters = (*counters, *(0,) * (N - len(counters)))  # older senders: no latency sums
                entry = executors.get(ex)
                if entry is None:  # the first sample counts what came before nimbus heard it
                    executors[ex] = [counters, list(counters)]
                    delta: Sequence[float] = counters
                else:
                    last, total = entry
                    if counters == last:
                        continue  # an idle executor: nothing to add
                    # went down: its worker restarted and counting starts over
                    delta = counters if any(map(lt, counters, last)) else tuple(map(sub, counters, last))
                    total[:] = map(add, total, delta)
                    entry[0] = counters
                component = components.get(ex)
                if component is not None:
                    one = sums.get(component)
                    if one is None:
                        sums[component] = list(delta)
                    else:
                        one[:] = map(add, one, delta)
            while len(self._executors) > self._max_topologies:
                gone, _ = self._executors.popitem(last=False)
                for kept in (self._components, self._sums, self._retired, self._heard):
                    kept.pop(gone, None)

    def set_components(self, topology_id: str, components: Mapping[ExecutorId, str]) -> None:
        """Which executor is which component's (a round; the same mapping again costs nothing).
        Executors it no longer names (a rebalance made other ranges) leave their totals with
        their component, as retired; the sums are made again from those and the rest."""
        with self._lock:
            previous = self._components.get(topology_id)
            if previous is components:
                return
            self._components[topology_id] = components
            executors = self._executors.get(topology_id, {})
            retired = self._retired.setdefault(topology_id, {})
            for ex in [ex for ex in executors if ex not in components]:
                old = (previous or {}).get(ex)
                if old is not None:
                    _add(retired, old, executors[ex][1])
                    del executors[ex]
            sums = {c: list(v) for c, v in retired.items()}
            for ex, (_, total) in executors.items():
                _add(sums, components[ex], total)
            self._sums[topology_id] = sums

    def by_component(self, topology_id: str) -> tuple[float | None, dict[str, tuple[float, ...]]]:
        """When the newest report was heard (None: never), and the totals by component as of then."""
        with self._lock:
            return (self._heard.get(topology_id),
                    {c: tuple(v) for c, v in self._sums.get(topology_id, {}).items()})

    def retain(self, topology_ids: Iterable[str]) -> None:
        keep = set(topology_ids)
        with self._lock:
            for topology_id in [t for t in self._executors if t not in keep]:
                del self._executors[topology_id]
                for kept in (self._components, self._sums, self._retired, self._heard):
                    kept.pop(topology_id, None)


def _add(sums: dict[str, list[float]], component: str, values: Sequence[float]) -> None:
    one = sums.get(component)
    if one is None:
        sums[component] = list(values)
    else:
        one[:] = map(add, one, values)
