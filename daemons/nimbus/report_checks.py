"""Whether a supervisor's report may be believed: the leader's checks before it takes one;
plain code, no I/O.

Who sent it is the API's business (a supervisor's token is bound to its id, ``auth``); here:

- **order**: a report carries the supervisor process's ``epoch`` (when it started, in
  milliseconds, which the caller checks against the supervisor's node: a report of an earlier
  run is refused there) and a ``seq`` that grows by report; one of the same run not after the
  last taken from it (a replay) is refused;
- **counters**: a worker's executor counters may not move backwards while the worker lives
  (its uptime grows), nor grow faster than a rate allows per second of nimbus's own clock
  since the last report: ``MAX_RATE`` tuples counted, ``MAX_BUSY_RATE`` microseconds of
  execute time (an executor runs on one thread), and complete latency at most ``MAX_TREE_US``
  for each tree completed; a worker that started again (its uptime fell) starts from at most
  what those allow over its uptime, and no worker is older than its topology. One forged
  beat made a topology show 3,000,000,000,000 emitted before.

``ReportChecks`` keeps what the last taken reports said, bounded by what the beat table holds.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from squall.daemons.reports import ReportedBeat, SupervisorReport
from squall.daemons.state import ExecutorId
from squall.errors import SquallError
from squall.runtime.stats import Counters

MAX_RATE = 20_000_000       # tuples per second one executor could count: far above what Python does
SLACK = 1_000_000           # counts on top, for the reports' own timing
UPTIME_SLACK_SECS = 120.0   # clocks differ: a worker may claim this much more uptime than its topology has
MAX_BUSY_RATE = 2_000_000   # microseconds of execute time an executor adds per second: one thread, twice for clocks
MAX_TREE_US = 86_400_000_000  # one tree's complete latency: a day at most (far past any message timeout)

# Where each counter sits in ``Counters`` (squall.runtime.stats.COUNTER_NAMES).
_COUNTS = (0, 1, 2, 3, 6)   # emitted, executed, acked, failed, completed: tuples counted
_BUSY, _COMPLETE_US, _COMPLETED = 4, 5, 6

MAX_SUPERVISORS = 20_000    # whose order is remembered (the beat table's bound)

Order = tuple[int, int]     # (epoch, seq)
WorkerKey = tuple[str, int]  # (topology id, port)


class ReportRefused(SquallError, ValueError):
    """The report is not to be believed; the message says why."""


@dataclass(frozen=True)
class _Seen:
    uptime: float
    counters: dict[ExecutorId, Counters]
    at: float  # nimbus's clock


class ReportChecks:
    """The order and counters last taken per supervisor and per worker (see the module doc)."""

    def __init__(self, max_rate: float = MAX_RATE, slack: int = SLACK,
                 max_supervisors: int = MAX_SUPERVISORS) -> None:
        self.max_rate, self.slack, self.max_supervisors = max_rate, slack, max_supervisors
        self._order: dict[str, Order] = {}  # kept while the supervisor is gone too: no replay revives it
        self._workers: dict[str, dict[WorkerKey, _Seen]] = {}  # supervisor id -> its workers

    def check(self, report: SupervisorReport, order: Order, now: float,
              topology_age: Callable[[str], float | None]) -> None:
        """ReportRefused unless ``report`` (sent as ``order``, heard at ``now``) may be taken;
        ``topology_age(id)``: seconds since the topology was submitted, None when unknown."""
        sid = report.supervisor_id
        last = self._order.get(sid)
        # Another epoch is another run of the supervisor: the caller checked it against the
        # supervisor's node (a report of an earlier run does not match it), so even a run
        # whose clock went back starts its own count.
        if last is not None and order[0] == last[0] and order[1] <= last[1]:
            raise ReportRefused(f"report {list(order)} of supervisor {sid!r} is not after the last one taken "
                                f"({list(last)}): a replay")
        workers = self._workers.get(sid, {})
        for beat in report.beats:
            self._check_beat(workers.get((beat.topology_id, beat.port)), beat, now, topology_age(beat.topology_id))

    def _check_beat(self, seen: _Seen | None, beat: ReportedBeat, now: float, age: float | None) -> None:
        where = f"worker {beat.topology_id} on port {beat.port}"
        if age is not None and beat.uptime > age + UPTIME_SLACK_SECS:
            raise ReportRefused(f"{where} claims {beat.uptime:.0f}s of uptime, its topology is {age:.0f}s old")
        same_worker = seen is not None and beat.uptime >= seen.uptime
        for ex, counters in beat.counters.items():
            before = seen.counters.get(ex) if same_worker and seen is not None else None
            if before is None:
                excess = self._excess(counters, max(0.0, beat.uptime))
                if excess:
                    raise ReportRefused(f"{where}: executor {list(ex)} {excess} after {beat.uptime:.0f}s of uptime")
                continue
            assert seen is not None
            for now_n, then_n in zip(counters, before):
                if now_n < then_n:
                    raise ReportRefused(f"{where}: executor {list(ex)}'s counters moved backwards "
                                        f"({then_n} -> {now_n}) while the worker ran on")
            excess = self._excess([n - b for n, b in zip(counters, before)], max(0.0, now - seen.at))
            if excess:
                raise ReportRefused(f"{where}: executor {list(ex)} {excess} in {now - seen.at:.0f}s")

    def _excess(self, grown: Sequence[int], secs: float) -> str | None:
        """What of counters that grew by ``grown`` over ``secs`` seconds no rate allows, or None."""
        counted = max((grown[i] for i in _COUNTS if i < len(grown)), default=0)
        if counted > self.max_rate * secs + self.slack:
            return f"counted {counted}, more than {self.max_rate:g} a second"
        if len(grown) > _BUSY and grown[_BUSY] > MAX_BUSY_RATE * secs + self.slack:
            return f"was busy {grown[_BUSY]} us, more than {MAX_BUSY_RATE:g} us a second"
        if len(grown) > _COMPLETED and grown[_COMPLETE_US] > grown[_COMPLETED] * MAX_TREE_US + self.slack:
            return (f"summed {grown[_COMPLETE_US]} us of complete latency over {grown[_COMPLETED]} trees, "
                    f"more than {MAX_TREE_US:g} us each")
        return None

    def taken(self, report: SupervisorReport, order: Order, now: float) -> None:
        """Remember what a report the table took said (after ``check`` passed it)."""
        sid = report.supervisor_id
        self._order.pop(sid, None)
        self._order[sid] = order  # the most recent last
        while len(self._order) > self.max_supervisors:
            self._workers.pop(next(iter(self._order)), None)
            del self._order[next(iter(self._order))]
        # A slot the report no longer names has no worker any more.
        self._workers[sid] = {(b.topology_id, b.port): _Seen(b.uptime, dict(b.counters), now) for b in report.beats}
