"""The leader's rounds: while this nimbus leads, every ``nimbus.monitor.freq.secs``, at once
when the set of supervisors changes, and when a silence is due to run out, it carries out
the due deadlines (kill removals, rebalances, sweeps) and reassigns the executors of active
and inactive topologies whose worker has been silent past ``nimbus.task.timeout.secs``
(newly assigned ones get ``nimbus.task.launch.secs``) or whose supervisor is gone or silent
past ``nimbus.supervisor.timeout.secs``; an assignment is written only if it changed.

A new leader has heard nothing yet: it judges nothing dead for the task timeout
(``liveness.ReconnectGrace``), and it first makes every supervisor's part of the assignments
agree with them (``ClusterState.reconcile_node_parts``). It resumes the deadlines of the
last: a killed topology is removed after its ``topology.message.timeout.secs`` counted from
the takeover, and a rebalancing topology is rebalanced at once and made active again (the
status it had before the rebalance is known only to the leader that began it)."""
from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from squall.daemons.nimbus.auth import TokenSource, published_tokens
from squall.daemons.nimbus.code_store import CodeStore
from squall.daemons.nimbus.deadlines import REBALANCE, REMOVE, SWEEP, LeaderDeadlines
from squall.daemons.nimbus.heard import Hearing
from squall.daemons.nimbus.leadership import Leadership
from squall.daemons.nimbus.liveness import lost_node
from squall.daemons.nimbus.operations import Operations
from squall.daemons.nimbus.placement import Placement
from squall.daemons.nimbus.scheduler import RoundSlots
from squall.daemons.state import Assignment, ClusterState, ClusterStateError, PublishedTokens
from squall.daemons.timers import Clock
from squall.daemons.warn_once import WarnOnce

log = structlog.get_logger("squall.nimbus")


class LeaderRounds:
    """``lead`` runs on the election thread for as long as this nimbus leads; each round
    holds ``lock`` (the operations' writes hold it too). ``tokens`` gives the API's token
    table in force (None while API security is off), published for the supervisors."""

    def __init__(self, conf: Mapping[str, Any], state: ClusterState, store: CodeStore, clock: Clock,
                 lock: threading.RLock, stopping: threading.Event, leadership: Leadership, hearing: Hearing,
                 placement: Placement, operations: Operations, deadlines: LeaderDeadlines,
                 warn_once: WarnOnce, counts: Counter[str], tokens: Callable[[], TokenSource | None]) -> None:
        self.state = state
        self.store = store
        self.clock = clock
        self._lock = lock
        self._stopping = stopping
        self.leadership = leadership
        self.hearing = hearing
        self.placement = placement
        self.ops = operations
        self.deadlines = deadlines
        self._warn_once = warn_once
        self.counts = counts  # rounds, assignments, moved, reports refused (/metrics)
        self._tokens = tokens
        self.monitor_freq = float(conf["nimbus.monitor.freq.secs"])
        self._judge_at: float | None = None  # when the next silence runs out (nimbus time)
        self._parts_checked = False  # this leadership has reconciled the supervisors' parts
        self._published: PublishedTokens | None = None  # the token table last put in ZooKeeper
        self.round_secs: tuple[float, float] | None = None  # the last round: (seconds, CPU seconds)

    def lead(self, lost: threading.Event) -> None:
        """Runs on the election thread for as long as this nimbus leads."""
        with self._lock:
            self.deadlines.clear()
            self.ops.restart()
            self._published = None  # a new leader publishes its own table
            self._parts_checked = False
            self.placement.restart()
            self.hearing.restart()  # no history yet: nothing is judged dead
        log.info("nimbus is the leader; no reassignment until workers could be heard",
                 nimbus=self.leadership.identifier, hold_secs=self.hearing.grace.period)
        try:
            while not lost.is_set() and not self._stopping.is_set():
                self.deadlines.wake.clear()
                try:
                    with self._lock:
                        if lost.is_set():
                            break
                        started, cpu = time.perf_counter(), time.thread_time()  # measurements: real clocks
                        self._run_due_deadlines()
                        self._monitor()
                        self.round_secs = (time.perf_counter() - started, time.thread_time() - cpu)
                except ClusterStateError as exc:
                    log.warning("monitor round skipped: ZooKeeper unavailable", error=str(exc))
                except Exception:  # noqa: BLE001 - one bad round must not end leadership
                    log.exception("monitor round failed")
                self._sleep(lost, self._next_wait())
        finally:
            with self._lock:
                self.deadlines.clear()
            log.info("nimbus leadership loop ended", nimbus=self.leadership.identifier)

    def _sleep(self, lost: threading.Event, seconds: float) -> None:
        """Wait up to ``seconds`` for a wake-up, a lost leadership or a stop."""
        deadline = self.clock.monotonic() + seconds
        while not lost.is_set() and not self._stopping.is_set():
            left = deadline - self.clock.monotonic()
            if left <= 0 or self.deadlines.wake.wait(min(left, 0.25)):
                return

    def _next_wait(self) -> float:
        with self._lock:
            wait = self.deadlines.wait_secs(self.monitor_freq)
            if self._judge_at is not None:  # a silence runs out before the next round
                wait = min(wait, max(0.0, self._judge_at - self.clock.time()) + 0.05)
            return wait

    def _run_due_deadlines(self) -> None:
        while (due := self.deadlines.pop_due()) is not None:
            action, topology_id = due
            if action == REMOVE:
                self.ops.remove(topology_id)
            elif action == REBALANCE:
                self.ops.do_rebalance(topology_id)
            elif action == SWEEP and topology_id not in self.state.topology_ids():
                self.state.teardown_topology(topology_id)
                self.state.remove_node_parts(topology_id)  # looked for under every node

    def _monitor(self) -> None:
        """One leader round: reassign what needs it, resume deadlines, clean orphans."""
        now = self.clock.time()
        if not self.state.connected:
            raise ClusterStateError("not connected to ZooKeeper")
        self.counts["rounds"] += 1
        self.hearing.observe_connection(now)
        self._publish_tokens()
        supervisors = self.hearing.live_supervisors(now)
        entries = self.state.topology_entries()
        infos = {tid: info for tid, info in entries.items() if info is not None}
        ids = set(entries)  # malformed topology nodes count as present: they keep their workers
        assignments = self.state.assignments()
        unreadable = set(self.state.assignment_ids()) - set(assignments)
        if not self._parts_checked:
            self._reconcile_parts(assignments, unreadable)
        self._recover_unreadable(ids - set(infos), unreadable & ids, assignments)
        # The reads above may have waited for a reconnection: judge by the count after them.
        self.hearing.observe_connection(self.clock.time())
        hold = self.hearing.grace.active()
        for sid in self.hearing.away_expired if not hold else ():
            if self.state.remove_supervisor_if_away(sid):
                log.info("supervisor did not come back within its restart grace; node removed",
                         supervisor=sid)
        slots = RoundSlots.of({sid: s.usable_ports for sid, s in supervisors.items()},
                              {tid: a.executors for tid, a in assignments.items()}, self.placement.slot_use)
        # Topologies that lost a supervisor first: a death is acted on within the round's first
        # moments, not after every healthy topology has been looked at.
        for topology_id, info in sorted(infos.items(), key=lambda kv: (not lost_node(assignments.get(kv[0]),
                                                                                      supervisors), kv[0])):
            if info.status == "killed":
                if not self.deadlines.pending(REMOVE, topology_id):
                    self.deadlines.schedule(REMOVE, topology_id, self.ops.message_timeout(info))
            elif info.status == "rebalancing":
                if not self.deadlines.pending(REBALANCE, topology_id):
                    self.deadlines.schedule(REBALANCE, topology_id, 0.0)
            else:
                try:
                    self.placement.reassign(info, assignments, supervisors, now, hold=hold, slots=slots)
                except (ValueError, TypeError) as exc:  # e.g. a hand-edited node: skip this one
                    self._warn_once((topology_id, "bad-record"), "cannot schedule topology",
                                    topology_id=topology_id, error=str(exc))
            components = self.placement.executor_components(info)
            if components:
                self.hearing.record_history(topology_id, components, now)
        for topology_id in sorted(assignments.keys() - ids):
            log.warning("removing assignment of unknown topology", topology_id=topology_id)
            self.state.remove_assignment(topology_id)
        for topology_id in self.store.ids():
            if topology_id not in ids:
                log.info("removing code of unknown topology", topology_id=topology_id)
                self.store.remove(topology_id)
        self.hearing.retain(ids, {tid: info.submitted_at for tid, info in infos.items()})
        self.placement.retain(ids)
        self._judge_at = self.hearing.next_judgement(supervisors, now)

    def _recover_unreadable(self, topologies: set[str], assignments_unreadable: set[str],
                            assignments: dict[str, Assignment]) -> None:
        """Damaged but not lost: a topology whose node is malformed keeps its workers and its
        name (it is reported, and can be killed by id); a malformed assignment is rebuilt from
        the supervisors' parts of it, so that rewriting it moves nothing."""
        for topology_id in sorted(topologies):
            self._warn_once((topology_id, "unreadable"), "topology node unreadable: its workers keep "
                            "running and its name stays taken; an admin can kill it by id", topology_id=topology_id)
        for topology_id in sorted(assignments_unreadable):
            rebuilt = self.state.assignment_from_parts(topology_id)
            if rebuilt is not None:
                # Start times are lost with the node: every executor gets the launch grace again.
                rebuilt.executor_start = dict.fromkeys(rebuilt.executors, self.clock.time())
                assignments[topology_id] = rebuilt
                log.warning("assignment unreadable; rewriting it from the supervisors' parts",
                            topology_id=topology_id, executors=len(rebuilt.executors))

    def _reconcile_parts(self, assignments: Mapping[str, Assignment], malformed: set[str]) -> None:
        """Once per leadership: every supervisor's part of the assignments made to agree with
        them (an earlier leader may have died between writes, or been of a version that wrote
        whole assignments only). Malformed assignments keep their parts."""
        writes = self.state.reconcile_node_parts(assignments, malformed)
        self._parts_checked = True
        if writes:
            log.info("supervisors' parts of the assignments brought up to date", writes=writes)

    def _publish_tokens(self) -> None:
        """Put the API tokens in force into ZooKeeper when they changed: supervisors check
        callers of their /metrics and logviewer against them."""
        current = published_tokens(self._tokens())
        if current == self._published:
            return
        try:
            self.state.set_api_tokens(current)
        except ValueError as exc:  # too many tokens for one node: supervisors keep the last table
            self._warn_once(("", "tokens"), "cannot publish the API tokens to supervisors", topology_id="",
                            error=str(exc))
            return
        self._published = current
        log.info("API tokens published for supervisors", enabled=current.enabled, tokens=len(current.entries))
