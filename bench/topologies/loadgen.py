"""A Storm-loadgen-style load plan as plain code: phases, a schedule, latencies.

The first phase ("max") emits as fast as acks allow and measures the acked rate; each
later phase offers a fraction of that rate on a schedule: tuple k of a phase is due at
``start + k / rate``. A tuple's message id carries its scheduled time, so its complete
latency runs from when it should have been emitted to its ack at the spout: when the
topology falls behind, the backlog shows in the latency instead of slowing the offer.
It also carries when the tuple was emitted, which splits the latency in two: the emit lag
(scheduled to emitted: the spout's thread was busy, held back, or off the CPU) and the
flight (emitted to acked: the topology's own path). Every phase warms up, then measures
the tuples scheduled inside its window; after the last phase the plan keeps its rate while
the measured tuples drain.

The plan also reads its thread's clocks when a phase begins and ends (``thread_meter``: CPU
time, and on Linux the time it waited for a CPU while runnable): a phase's CPU per tuple and
its share of a CPU. The acked rate of a phase that falls behind is that share over that cost,
so the two say whether the loop got dearer or the thread got less of a CPU than in the max
phase (bench/results/issue31-local75b.txt: on a shared machine the share moved the most).
"""
from __future__ import annotations

import math
import time
from array import array
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from itertools import repeat
from operator import add, mul
from typing import Any

MsgId = tuple[int, int, float, float]  # (phase index, sequence in the phase, scheduled, emitted)
QUANTILES = (("50", 0.5), ("90", 0.9), ("99", 0.99), ("999", 0.999))
ThreadMeter = Callable[[], tuple[float, float | None]]  # (CPU seconds, run-queue wait seconds or None)
_SCHEDSTAT = "/proc/thread-self/schedstat"  # Linux: ns on a CPU, ns runnable but waiting, timeslices
# Measured tuples a phase keeps raw, as two doubles each (256 MiB at most); at the limit they go
# into the histograms at once, a pause of seconds on the spout's thread that the phase reports.
RAW_LIMIT = 1 << 24


def thread_meter() -> tuple[float, float | None]:
    """The calling thread's CPU seconds, and the seconds it has waited for a CPU while
    runnable (None where the kernel does not say)."""
    cpu = time.thread_time()
    try:
        with open(_SCHEDSTAT, "rb") as f:
            return cpu, int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return cpu, None


class LatencyHistogram:
    """Latencies counted in buckets 1 µs wide below 10 ms, 100 µs wide below 1 s and 10 ms
    wide up to 1000 s (longer lands in the last), so a quantile is within 1% or 1 µs of
    the exact one. The keys are the bucket's lower bound in whole µs, at most ~10,000 per tier.

    A phase fills its histograms when its results are made, from the raw times its tuples
    left (``Phase.record``): bucketing three latencies a tuple on the spout's thread cost
    ~6,000 instructions, a quarter of the whole path of a local acked tuple, and a paced
    phase paid more of it than the max phase (bench/results/issue31-loadgen-cost.txt)."""

    __slots__ = ("counts", "n", "max")

    def __init__(self) -> None:
        self.counts: defaultdict[int, int] = defaultdict(int)
        self.n = 0
        self.max = 0.0

    def add_all(self, values: Sequence[float]) -> None:
        """Count every latency (seconds) of ``values``; the per-value work runs in C (whole
        microseconds counted), the per-bucket work in Python."""
        if not values:
            return
        counts = self.counts
        for us, k in Counter(map(int, map(mul, values, repeat(1e6)))).items():
            if us < 10_000:
                counts[us] += k
            elif us < 1_000_000:
                counts[us // 100 * 100] += k
            else:
                counts[min(us, 1_000_000_000) // 10_000 * 10_000] += k
        self.n += len(values)
        top = max(values)
        if top > self.max:
            self.max = top

    def quantile(self, q: float) -> float:
        """The upper bound of the bucket holding the ``q`` quantile (never above the max)."""
        if not self.n:
            return math.nan
        rank, seen = max(1, math.ceil(q * self.n)), 0
        for key in sorted(self.counts):
            seen += self.counts[key]
            if seen >= rank:
                width = 1.0 if key < 1e4 else 100.0 if key < 1e6 else 1e4
                return min((key + width) / 1e6, self.max)
        return self.max


class Phase:
    def __init__(self, name: str, fraction: float | None, warmup: float, duration: float) -> None:
        self.name, self.fraction = name, fraction
        self.warmup, self.duration = warmup, duration
        self.start = 0.0
        self.window_start = self.end = math.inf  # set when the phase begins
        self.rate: float | None = None  # tuples/s offered; None: as fast as acks allow
        self.emitted = 0
        self.scheduled = 0  # emitted tuples whose scheduled time is inside the window
        self.completed = 0  # of those, acked
        self.failed = 0
        self.acks_in_window = 0  # acks that arrived inside the window, whatever their schedule
        self.latency = LatencyHistogram()
        self.lag = LatencyHistogram()     # scheduled -> emitted
        self.flight = LatencyHistogram()  # emitted -> acked
        self.lags, self.flights = array("d"), array("d")  # raw, until the results fold them in
        self.folds = 0  # folds forced by RAW_LIMIT while the phase ran
        self.marks: list[tuple[float, float, float | None]] = []  # (now, CPU, run-queue wait) at begin and end

    def begin(self, start: float) -> None:
        self.start = start
        self.window_start = start + self.warmup
        self.end = self.window_start + self.duration

    def thread_figures(self) -> dict[str, float]:
        """CPU per emitted tuple and share of a CPU of the plan's thread over the whole phase
        (warm-up included); the share of the time it waited for one, where known."""
        if len(self.marks) < 2 or not self.emitted:
            return {}
        (t0, cpu0, wait0), (t1, cpu1, wait1) = self.marks[0], self.marks[-1]
        wall = t1 - t0
        if wall <= 0.0:
            return {}
        out = {"thread_cpu_us_per_tuple": 1e6 * (cpu1 - cpu0) / self.emitted,
               "thread_cpu_share": (cpu1 - cpu0) / wall}
        if wait0 is not None and wait1 is not None:
            out["thread_runq_share"] = (wait1 - wait0) / wall
        return out

    def measured(self, t: float) -> bool:
        return self.window_start <= t < self.end

    def record(self, lag: float, flight: float) -> None:
        """A measured tuple's emit lag and flight (its latency is their sum)."""
        if len(self.lags) >= RAW_LIMIT:
            self._fold()
            self.folds += 1
        self.lags.append(lag)
        self.flights.append(flight)

    def _fold(self) -> None:
        """Move the raw times into the histograms."""
        lags, flights = self.lags, self.flights
        self.latency.add_all(array("d", map(add, lags, flights)))
        self.lag.add_all(lags)
        self.flight.add_all(flights)
        self.lags, self.flights = array("d"), array("d")

    def result(self) -> dict[str, Any]:
        self._fold()
        lat = self.latency
        out = {"phase": self.name, "offered_per_sec": self.rate,
               "acked_per_sec": self.acks_in_window / self.duration,
               "scheduled": self.scheduled, "completed": self.completed, "failed": self.failed,
               "missing": self.scheduled - self.completed - self.failed, **self.thread_figures()}
        if self.folds:
            out["raw_folds"] = self.folds  # pauses on the spout's thread inside the phase
        if lat.n:
            out.update({f"p{name}_ms": 1000 * lat.quantile(q) for name, q in QUANTILES})
            out["max_ms"] = 1000 * lat.max
            for name, q in (("50", 0.5), ("99", 0.99)):  # where a phase's typical and tail latency went
                out[f"lag_p{name}_ms"] = 1000 * self.lag.quantile(q)
                out[f"flight_p{name}_ms"] = 1000 * self.flight.quantile(q)
        return out


class LoadPlan:
    def __init__(self, fractions: list[float], warmup: float, duration: float, drain: float,
                 meter: ThreadMeter | None = thread_meter) -> None:
        """``meter``: read on the plan's thread when a phase begins and ends (None: not read)."""
        if not fractions or any(not 0 < f <= 1 for f in fractions):
            raise ValueError(f"load fractions must be in (0, 1], got {fractions}")
        self.phases = [Phase("max", None, warmup, duration)]
        self.phases += [Phase(f"{f:.0%}", f, warmup, duration) for f in fractions]
        self.drain = drain
        self.index = -1  # not started
        self.max_rate = 0.0
        self.error: str | None = None
        self.end = math.inf  # when the last phase's window closes (inf until that phase starts)
        self.meter = meter

    def due(self, now: float) -> MsgId | None:
        """The message id of a tuple to emit now, or None when the next one is not due yet."""
        p = self._phase(now)
        if p.rate is None:
            scheduled = now
        else:
            scheduled = p.start + p.emitted / p.rate
            if scheduled > now:
                return None
        seq = p.emitted
        p.emitted = seq + 1
        if p.measured(scheduled):
            p.scheduled += 1
        return (self.index, seq, scheduled, now)

    def _mark(self, p: Phase, now: float) -> None:
        if self.meter is not None:
            p.marks.append((now, *self.meter()))

    def _phase(self, now: float) -> Phase:
        # Runs on every due() call: the meter is read only where a phase begins or ends.
        if self.index < 0:
            self.index = 0
            self.phases[0].begin(now)
            self._mark(self.phases[0], now)
        p = self.phases[self.index]
        while now >= p.end and self.index + 1 < len(self.phases) and self.error is None:
            if self.index == 0:
                self.max_rate = p.acks_in_window / p.duration
                if not self.max_rate:
                    self.error = "no tuple was acked in the max-rate window"
                    break
            nxt = self.phases[self.index + 1]
            nxt.rate = nxt.fraction * self.max_rate
            nxt.begin(p.end)
            self._mark(p, now)
            self._mark(nxt, now)
            self.index += 1
            p = nxt
            if self.index == len(self.phases) - 1:
                self.end = p.end
        return p

    def acked(self, msg_id: MsgId, now: float) -> None:
        # On the spout's thread once per tuple: the windows compared inline (Phase.measured).
        k, _, scheduled, emitted = msg_id
        p = self.phases[k]
        if p.window_start <= now < p.end:
            p.acks_in_window += 1
        if p.window_start <= scheduled < p.end:
            p.completed += 1
            p.record(emitted - scheduled, now - emitted)

    def failed(self, msg_id: MsgId) -> None:
        p = self.phases[msg_id[0]]
        if p.measured(msg_id[2]):
            p.failed += 1

    def finished(self, now: float) -> bool:
        """Every phase measured and its tuples resolved (or the drain time is up)."""
        if self.error is not None:
            return True
        if now < self.end:
            return False
        last = self.phases[-1]
        if len(last.marks) == 1:
            self._mark(last, now)  # its window closed: the drain that follows is not the phase's
        if now >= self.end + self.drain:
            return True
        return all(p.completed + p.failed >= p.scheduled for p in self.phases)

    def result(self) -> dict[str, Any]:
        out: dict[str, Any] = {"max_rate": self.max_rate, "phases": [p.result() for p in self.phases]}
        if self.error:
            out["error"] = self.error
        return out
