"""What the leading nimbus hears: the supervisors (their nodes and their reports) and the
workers' beats in those reports, timed by nimbus's own clock when it sees them advance, so
that clock skew between hosts does not matter. Which of them are alive is decided in
:mod:`squall.daemons.nimbus.liveness` (plain code); this keeps what those decisions need."""
from __future__ import annotations

import hashlib
import hmac
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from squall.daemons.nimbus.beats import BeatTable
from squall.daemons.nimbus.guard import ApiError
from squall.daemons.nimbus.history import CounterHistory, RunningTotals
from squall.daemons.nimbus.liveness import ReconnectGrace, last_heard, next_judgement, supervisor_alive
from squall.daemons.nimbus.rates import RateHistory
from squall.daemons.nimbus.report_checks import Order, ReportChecks, ReportRefused
from squall.daemons.nimbus.scheduler import ExecutorId, Slot
from squall.daemons.reports import ReportedBeat, SupervisorReport, parse_report, report_epoch
from squall.daemons.state import Assignment, ClusterState, SupervisorInfo
from squall.daemons.timers import Clock

log = structlog.get_logger("squall.nimbus")


def _key_hash(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "replace")).hexdigest()


class Hearing:
    """Supervisors and worker beats as this leadership heard them. ``wake`` is called (on
    kazoo's thread) when the set of supervisors changes."""

    def __init__(self, conf: Mapping[str, Any], state: ClusterState, clock: Clock,
                 counts: Counter[str], wake: Callable[[], None]) -> None:
        self.state = state
        self.clock = clock
        self.counts = counts
        self._wake = wake
        self.task_timeout = float(conf["nimbus.task.timeout.secs"])
        self.supervisor_timeout = float(conf["nimbus.supervisor.timeout.secs"])
        self.restart_grace = float(conf["supervisor.restart.grace.secs"])
        self.grace = ReconnectGrace(self.task_timeout, clock)
        self.away_expired: list[str] = []  # away supervisors past their grace, to delete
        self.beats = BeatTable()  # what supervisors reported (leader only)
        self.rates = RateHistory()  # recent executor counters, for rates in status
        self.totals = RunningTotals()  # executors' counters over their workers' lives, by component
        self.history = CounterHistory()  # component totals over time: Storm's windows, the UI's plot
        self._sup_seen: dict[str, tuple[tuple[float, bool], float]] = {}  # -> ((time, away), seen at)
        # supervisor -> the last round that saw it away within its restart grace: its workers
        # report through it, so their silence counts from then (liveness.vouched_while_away)
        self.vouched: dict[str, float] = {}
        self._registered: dict[str, SupervisorInfo] | None = None  # the supervisors' nodes, as the watch saw them
        self._silent: set[str] = set()  # supervisors already warned about
        self.checks = ReportChecks()  # what the last reports taken said: order, counters
        self._submitted: dict[str, float] = {}  # topology id -> when submitted (as of the last round)

    def restart(self) -> None:
        """A new leadership has heard nothing yet: nothing is judged dead for the task timeout."""
        self.beats.clear()
        self.checks = ReportChecks()
        self._sup_seen.clear()
        self.vouched.clear()
        self.grace.restart(self.state.connections)

    def take_report(self, supervisor_id: str, data: bytes) -> dict[str, Any]:
        """A supervisor's report (its heartbeat and its workers' beats and stats), kept in
        memory: 403 unless it comes from the supervisor it names (its key matches its node),
        409 when it is not after the last one taken (a replay), 400 when malformed or when its
        counters cannot be right (``report_checks``)."""
        try:
            report = parse_report(data, supervisor_id)
        except (ValueError, TypeError) as exc:
            self.counts["reports_refused"] += 1
            raise ApiError(400, f"bad report: {exc}", reason="malformed") from None
        now = self.clock.time()
        order = self._check_sender(report)
        if order is not None:
            try:
                self.checks.check(report, order, now, self._topology_age(now))
            except ReportRefused as exc:
                self.counts["reports_refused"] += 1
                replay = "not after the last one" in str(exc)
                raise ApiError(409 if replay else 400, f"report refused: {exc}", reason="malformed") from None
        kept = self.beats.take(report, now)
        if order is not None:
            self.checks.taken(report, order, now)
        for beat in report.beats:  # the rate history and the totals take the counters as they come
            samples = beat.samples()
            self.rates.add(beat.topology_id, samples)
            self.totals.add(beat.topology_id, samples, now)
        return {"supervisor": supervisor_id, "beats": kept}

    def _check_sender(self, report: SupervisorReport) -> Order | None:
        """ApiError 403 unless the report comes from the run of the supervisor it names: the
        supervisor is registered, and its key's sha256 and its epoch are its node's. The
        report's order for ``report_checks``; None for a supervisor of an earlier squall (it
        registers no key, and is heard as before)."""
        sid = report.supervisor_id
        info = self.supervisors().get(sid)
        if info is None or (report.key and info.report_key != _key_hash(report.key)):
            info = self.state.supervisors().get(sid)  # the watch may not have brought its new node yet
        if info is None:
            self.counts["reports_refused"] += 1
            raise ApiError(403, f"no supervisor {sid!r} is registered", reason="forbidden")
        if not info.report_key:
            self.counts["reports_unsigned"] += 1
            return None
        if not hmac.compare_digest(_key_hash(report.key), info.report_key) or \
                report.epoch != report_epoch(info.started_at):
            self.counts["reports_refused"] += 1
            raise ApiError(403, f"the report is not signed by supervisor {sid!r}'s current run",
                           reason="forbidden")
        return report.epoch, report.seq

    def _topology_age(self, now: float) -> Callable[[str], float | None]:
        submitted = self._submitted
        return lambda topology_id: (now - submitted[topology_id]) if topology_id in submitted else None

    def next_judgement(self, supervisors: Mapping[str, SupervisorInfo], judged: float) -> float | None:
        """When the next beat or supervisor heartbeat heard runs out of its timeout (what ran
        out before ``judged``, this round's time, was judged in it)."""
        reported = self.beats.reported_at()
        sups = next_judgement((last_heard(self._sup_seen[sid][1], reported.get(sid)) for sid in supervisors
                               if sid in self._sup_seen and not supervisors[sid].away),
                              self.supervisor_timeout, judged)
        beats = next_judgement([*self.beats.seen_times(), *self.vouched.values()], self.task_timeout, judged)
        return min((t for t in (sups, beats) if t is not None), default=None)

    def observe_connection(self, now: float) -> None:
        """After a (re)connection: hold reassignments for the task timeout, and count silence
        from now, not from before the outage."""
        if self.grace.observe(self.state.connections):
            log.info("connected to ZooKeeper: no reassignment until workers could be heard",
                     hold_secs=self.grace.period)
            self.beats.restart_silence(now)
            self._sup_seen = {k: (v[0], now) for k, v in self._sup_seen.items()}

    def on_supervisors(self, supervisors: dict[str, SupervisorInfo]) -> None:
        # kazoo's thread: keep the set (a round then reads no supervisor node) and wake the loop.
        self._registered = supervisors
        self._wake()

    def supervisors(self) -> dict[str, SupervisorInfo]:
        """Every registered supervisor: as the watch last delivered them (kept current by
        ZooKeeper's events, resynchronised after a reconnection), else read now."""
        registered = self._registered
        return registered if registered is not None else self.state.supervisors()

    def live_supervisors(self, now: float) -> dict[str, SupervisorInfo]:
        """Registered supervisors heard within the supervisor timeout: a report, or a change
        of their node (supervisors of an earlier squall refresh it instead of reporting);
        silence counts from this leadership's start at the earliest."""
        out: dict[str, SupervisorInfo] = {}
        sups = self.supervisors()
        reported = self.beats.reported_at()
        self.away_expired = []
        for sid, info in sups.items():
            seen = self._sup_seen.get(sid)
            if seen is None or seen[0] != (info.time, info.away):
                seen = ((info.time, info.away), now)
                self._sup_seen[sid] = seen
            heard = seen[1] if info.away else last_heard(seen[1], reported.get(sid))
            if supervisor_alive(info.away, now - heard, self.supervisor_timeout, self.restart_grace):
                out[sid] = info
                if info.away:
                    self.vouched[sid] = now
                self._silent.discard(sid)
                continue
            if info.away:
                self.away_expired.append(sid)
            elif sid not in self._silent:
                self._silent.add(sid)
                log.warning("supervisor silent; its slots are not used", supervisor=sid,
                            silent_secs=round(now - heard, 1))
        self._sup_seen = {k: v for k, v in self._sup_seen.items() if k in sups}
        self.vouched = {k: v for k, v in self.vouched.items() if k in sups}
        return out

    def observed_beats(self, topology_id: str, now: float,
                       assignment: Assignment | None) -> dict[Slot, tuple[float, list[ExecutorId]]]:
        """Beats by slot, timed by when this nimbus saw each beat advance. A slot the reports
        do not cover (with stats) is looked up in ZooKeeper too: a worker of an earlier squall
        beats there during a rolling upgrade (its counters go to the rate history then)."""
        heard = self.beats.heard(topology_id)
        if assignment is not None and self.beats.wants_legacy(topology_id, assignment.slots()):
            legacy = self.state.worker_beats(topology_id)
            self.beats.take_legacy(topology_id, legacy, now)
            for beat in legacy.values():
                samples = ReportedBeat.of(beat).samples()
                self.rates.add(topology_id, samples)
                self.totals.add(topology_id, samples, now)
            heard = self.beats.heard(topology_id)
        return {slot: (h.seen, h.beat.executors) for slot, h in heard.items()}

    def record_history(self, topology_id: str, components: Mapping[ExecutorId, str], now: float) -> None:
        """The topology's component totals into the history (each leader round), timed by
        the newest report they hold: a round no report reached since the last one adds no
        point (timed by the round, it would plot a rate of 0 for a beat that was only late)."""
        self.totals.set_components(topology_id, components)
        heard, totals = self.totals.by_component(topology_id)
        if totals and heard is not None:
            self.history.record(topology_id, totals, min(heard, now))

    def retain(self, ids: set[str], submitted: Mapping[str, float] | None = None) -> None:
        """Forget the topologies that are gone (a round's end); ``submitted``: when each
        topology still here was submitted (what bounds its workers' uptime in reports)."""
        if submitted is not None:
            self._submitted = dict(submitted)
        self.beats.retain(ids, self._sup_seen)
        self.rates.retain(ids)
        self.totals.retain(ids)
        self.history.retain(ids)
        self.rates.forget_stale(self.clock.time())
