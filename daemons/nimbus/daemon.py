"""Nimbus: accepts topologies and their code, schedules executors onto supervisor slots,
watches worker beats and reassigns; ``squall nimbus`` runs it in the foreground.

Several nimbus processes may run; they contend through ``ClusterState.elect_nimbus`` and
the leader alone writes (submit, kill, (de)activate, rebalance, the monitor). A standby
serves the read-only GETs from ZooKeeper and answers writes with 503 and the leader's
``host:port`` (``NimbusClient`` retries there). A standby also copies every live
topology's bundle from the leader, so that it can take over and still serve the code
(Storm's nimbus code sync).

Leader loop: every ``nimbus.monitor.freq.secs``, at once when the set of supervisors
changes (a watch), and when a silence is due to run out, it reassigns the executors of
active and inactive topologies whose worker has been silent past ``nimbus.task.timeout.secs``
(newly assigned ones get ``nimbus.task.launch.secs``) or whose supervisor is gone or silent
past ``nimbus.supervisor.timeout.secs``; an assignment is written only if it changed. Worker
beats and supervisor heartbeats come in the supervisors' reports (``take_report``, kept in
memory by ``beats.BeatTable``; nothing per interval goes to ZooKeeper) and are timed by
nimbus's own clock when it sees them advance (as in Storm), so clock skew between hosts does
not matter. A new leader has heard nothing yet: it judges nothing dead for the task timeout
(``liveness.ReconnectGrace``), and it first makes every supervisor's part of the assignments
agree with them (``ClusterState.reconcile_node_parts``).

Kill and rebalance delays (``wait_secs``) are deadlines of the leader. A new leader resumes
them: a killed topology is removed after its ``topology.message.timeout.secs`` counted from
the takeover, and a rebalancing topology is rebalanced at once and made active again
(the status it had before the rebalance is known only to the leader that began it).

Verbs, as in every daemon: ``start()`` binds the API and joins the cluster, ``run()`` blocks
until stopped and shuts down (returning the exit code), ``stop()`` asks it to stop.
"""
from __future__ import annotations

import itertools
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import structlog

from squall.daemons.http.limits import HttpLimits
from squall.daemons.http.refusals import Refusals
from squall.daemons.http.server import HttpServer
from squall.daemons.http.tls_material import TlsMaterial, TlsMaterialError, server_context
from squall.daemons.insecure import warn_insecure
from squall.daemons.local_state import private_dir
from squall.daemons.metrics.exposition import metrics_app
from squall.daemons.nimbus import status, worker_logs
from squall.daemons.nimbus.access import AccessError, ApiAccess, server_tls_files
from squall.daemons.nimbus.api import MAX_JSON_BODY, make_app, no_such_topology
from squall.daemons.nimbus.auth import TokenFile, TokenFileError, published_tokens
from squall.daemons.nimbus.beats import BeatTable
from squall.daemons.nimbus.code_store import CodeStore, Upload, digest
from squall.daemons.nimbus.code_sync import CodeSync
from squall.daemons.nimbus.guard import ApiError, Guard
from squall.daemons.nimbus.liveness import (
    ReconnectGrace,
    last_heard,
    lost_node,
    next_judgement,
    supervisor_alive,
    vouched_while_away,
)
from squall.daemons.nimbus.metrics import nimbus_series
from squall.daemons.nimbus.rates import RateHistory
from squall.daemons.nimbus.scheduler import (
    ExecutorId,
    RoundSlots,
    Slot,
    SlotUse,
    all_heard,
    available_slots,
    by_slot,
    compute_assignment,
    dead_executors,
    even_split,
    slots_warning,
    start_times_after,
    worker_shortfall,
)
from squall.daemons.nimbus.secrets import new_topology_secrets
from squall.daemons.nimbus.validate import (
    Submission,
    SubmissionError,
    check_name,
    check_structure,
    validate_submission,
)
from squall.daemons.reports import ReportedBeat, parse_report
from squall.daemons.state import (
    Assignment,
    ClusterState,
    ClusterStateError,
    NimbusElection,
    PublishedTokens,
    SupervisorInfo,
    TopologyInfo,
    Watch,
)
from squall.daemons.timers import SYSTEM_CLOCK, Clock, DeadlineQueue
from squall.model import executors as executors_of
from squall.model import system_counts, task_ids

log = structlog.get_logger("squall.nimbus")

REMOVE, REBALANCE, SWEEP = "remove", "rebalance", "sweep"
# After a topology is removed, its ZooKeeper state is swept once more this much later:
# workers that had not yet noticed the removal may have written a last beat or error.
SWEEP_DELAY_SECS = 30.0
MAX_WAIT_SECS = 7 * 24 * 3600.0
MAX_WORKERS = 10_000
THREAD_JOIN_SECS = 3.0  # how long shutdown waits for the election and code-sync threads


def _number(value: Any, what: str, *, minimum: float = 0.0, maximum: float = MAX_WAIT_SECS) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not minimum <= value <= maximum:
        raise ApiError(400, f"{what} must be a number from {minimum:g} to {maximum:g}, got {value!r}")
    return float(value)


def _integer(value: Any, what: str, minimum: int, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise ApiError(400, f"{what} must be an integer from {minimum} to {maximum}, got {value!r}")
    return value


class Nimbus:
    """One nimbus process: cluster state, code store, election, leader loop, the HTTP API and
    its operations (called by ``api.make_app`` on the server's threads)."""

    def __init__(self, conf: Mapping[str, Any], clock: Clock = SYSTEM_CLOCK) -> None:
        self.conf = dict(conf)
        self.clock = clock
        self.host = str(conf["nimbus.host"])
        self.bind_host = str(conf.get("nimbus.bind.host") or self.host)
        self.port = int(conf["nimbus.port"])
        self.identifier = f"{self.host}:{self.port}"
        self.max_upload = int(conf["nimbus.code.max.upload.bytes"])
        self.monitor_freq = float(conf["nimbus.monitor.freq.secs"])
        self.task_timeout = float(conf["nimbus.task.timeout.secs"])
        self.launch_timeout = float(conf["nimbus.task.launch.secs"])
        self.supervisor_timeout = float(conf["nimbus.supervisor.timeout.secs"])
        self.restart_grace = float(conf["supervisor.restart.grace.secs"])
        self._grace = ReconnectGrace(self.task_timeout, clock)
        self._away_expired: list[str] = []  # away supervisors past their grace, to delete
        self.store = CodeStore(Path(conf["squall.local.dir"]) / "nimbus" / "topologies")
        self.state = ClusterState(conf)
        self.election: NimbusElection | None = None
        self.started_at = clock.time()
        self._lock = threading.RLock()  # every write to the cluster, and the leader's round
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._timers = DeadlineQueue(clock)  # keys: (action, topology id)
        self._ids = itertools.count(1)
        self._prev_status: dict[str, str] = {}  # rebalancing topology -> status to return to
        self.beats = BeatTable()  # what supervisors reported (leader only)
        self._judge_at: float | None = None  # when the next silence runs out (nimbus time)
        self._parts_checked = False  # this leadership has reconciled the supervisors' parts
        self._sup_seen: dict[str, tuple[tuple[float, bool], float]] = {}  # -> ((time, away), seen at)
        # supervisor -> the last round that saw it away within its restart grace: its workers
        # report through it, so their silence counts from then (liveness.vouched_while_away)
        self._vouched: dict[str, float] = {}
        self._counts: dict[str, dict[str, tuple[int, int]]] = {}  # structure cache by topology id
        self._components: dict[str, tuple[Any, dict[ExecutorId, str]]] = {}  # by topology id
        self._shapes: dict[str, tuple[Any, ...]] = {}  # by topology id: see _shape
        self._slot_use = SlotUse({})  # which topology holds which slot, kept from round to round
        self._warned: set[tuple[str, str]] = set()
        self._watch: Watch | None = None
        self._registered: dict[str, SupervisorInfo] | None = None  # the supervisors' nodes, as the watch saw them
        self._sync: CodeSync | None = None
        self._server: HttpServer | None = None
        self._tls: TlsMaterial | None = None  # the API's certificate and key, read again when changed
        self.refusals = Refusals(clock)
        self.guard: Guard | None = None
        self.access = ApiAccess()
        self._published: PublishedTokens | None = None  # the token table last put in ZooKeeper
        self.counts: Counter[str] = Counter()  # rounds, assignments, moved, reports refused (/metrics)
        self.round_secs: tuple[float, float] | None = None  # the last leader round: (seconds, CPU seconds)
        self.rates = RateHistory()  # recent executor counters, for rates in status
        self.exit_code = 0

    # -- lifecycle ------------------------------------------------------------------
    def start(self) -> Nimbus:
        """Bind the API (port 0 picks a free one), connect to ZooKeeper, contend for
        leadership and serve; NimbusStartError when any of it fails."""
        warn_insecure(self.conf, log)
        self.guard = Guard(self._load_tokens(), self.refusals)
        try:
            private_dir(Path(self.conf["squall.local.dir"]))  # code and conf of every topology
        except OSError as exc:
            raise NimbusStartError(f"cannot use local dir {self.conf['squall.local.dir']}: {exc}") from None
        try:
            tls = server_tls_files(self.conf)
            # code sync's way to the leader, and the token nimbus shows supervisors' logviewers
            self.access = access = ApiAccess.from_conf(self.conf, self.clock)
        except AccessError as exc:
            raise NimbusStartError(str(exc)) from None
        try:
            self._tls = None if tls is None else TlsMaterial(
                tls, lambda: server_context(*tls), "TLS certificate and key", self.clock)
        except TlsMaterialError as exc:
            raise NimbusStartError(str(exc)) from None
        try:
            self._server = HttpServer(make_app(self, self.guard, metrics_app(self.metrics_series)),
                                      self.bind_host, self.port, max_body=self.max_upload + MAX_JSON_BODY,
                                      refusals=self.refusals, limits=HttpLimits.from_conf(self.conf),
                                      tls=self._tls, name="nimbus", threads=int(self.conf["nimbus.http.threads"]))
        except OSError as exc:
            raise NimbusStartError(f"nimbus cannot listen on {self.bind_host}:{self.port}: {exc}") from None
        if tls is None:
            log.warning("SECURITY OFF: the nimbus API serves plain HTTP: tokens and code travel in clear; "
                        "set nimbus.tls.cert.file and nimbus.tls.key.file")
        self.port = self._server.port
        self.identifier = f"{self.host}:{self.port}"
        self.store.clean_temporary()
        try:
            self.state.start()
        except ClusterStateError as exc:
            self._server.stop()
            raise NimbusStartError(str(exc)) from None
        self._watch = self.state.watch_supervisors(self._on_supervisors)
        self.election = self.state.elect_nimbus(self.identifier, self._lead)
        self._sync = CodeSync(self.state, self.store, self.identifier, self.max_upload, self.monitor_freq,
                              lambda: self.is_leader, self._stopping, access)
        self._sync.start()
        self._server.start()
        log.info("nimbus started", nimbus=self.identifier, listen=f"{self.bind_host}:{self.port}",
                 tls=tls is not None, auth=self.guard.tokens is not None, zk=self.state.hosts,
                 root=self.state.root, code_dir=str(self.store.root))
        return self

    def _load_tokens(self) -> TokenFile | None:
        """The API's token table; None (with a loud warning) when API security is off."""
        path = self.conf.get("nimbus.auth.tokens.file")
        if not self.conf.get("nimbus.auth.enabled", True):
            log.warning("SECURITY OFF: nimbus.auth.enabled is false: anyone who reaches the API "
                        "controls the cluster and runs code on every supervisor")
            return None
        if not path:
            log.warning("SECURITY OFF: no nimbus.auth.tokens.file: anyone who reaches the API "
                        "controls the cluster and runs code on every supervisor "
                        "(`squall dev-cluster` and `squall token add` make one)")
            return None
        try:
            tokens = TokenFile(path, self.clock)
        except TokenFileError as exc:
            raise NimbusStartError(str(exc)) from None
        log.info("API tokens loaded", file=str(path), tokens=len(tokens.table()))
        return tokens

    def stop(self, code: int = 0) -> None:
        """Ask ``run`` to return (safe from signal handlers and other threads)."""
        if code:
            self.exit_code = code
        self._stopping.set()

    def run(self) -> int:
        """Block until ``stop()`` (or the HTTP server dies), then shut down; the exit code."""
        while not self._stopping.wait(0.5):
            if self._server is not None and not self._server.alive:
                log.error("nimbus HTTP server stopped unexpectedly")
                self.stop(1)
        self._shutdown()
        return self.exit_code

    def _shutdown(self) -> None:
        """Stop serving, step down, stop the loops and close the ZooKeeper session."""
        log.info("nimbus shutting down", nimbus=self.identifier)
        self._stopping.set()
        self._wake.set()
        if self._server is not None:
            self._server.stop()
        if self._watch is not None:
            self._watch.cancel()
        if self.election is not None:
            self.election.cancel(THREAD_JOIN_SECS)
        if self._sync is not None:
            self._sync.join(THREAD_JOIN_SECS)
        self.state.close()
        log.info("nimbus stopped", nimbus=self.identifier)

    def release_zookeeper(self) -> None:
        """On a stop request (another thread): a session cut off from ZooKeeper is closed now,
        so that calls waiting in it fail instead of holding up the shutdown."""
        if not self.state.connected:
            self.state.close()

    @property
    def is_leader(self) -> bool:
        return self.election is not None and self.election.is_leader

    def _require_leader(self) -> None:
        if self.is_leader:
            return
        leader = self._leader_address()
        where = f"the leader is {leader}" if leader else "no leader is elected yet"
        raise ApiError(503, f"this nimbus ({self.identifier}) is not the leader; {where}", leader=leader)

    def _leader_address(self) -> str | None:
        try:
            return self.state.nimbus_leader()
        except ClusterStateError:
            return None

    # -- leader loop ----------------------------------------------------------------
    def _lead(self, lost: threading.Event) -> None:
        """Runs on the election thread for as long as this nimbus leads."""
        with self._lock:
            self._timers.clear()
            self.beats.clear()
            self._sup_seen.clear()
            self._vouched.clear()
            self._prev_status.clear()
            self._published = None  # a new leader publishes its own table
            self._parts_checked = False
            self._slot_use = SlotUse({})
            self._grace.restart(self.state.connections)  # no history yet: nothing is judged dead
        log.info("nimbus is the leader; no reassignment until workers could be heard", nimbus=self.identifier,
                 hold_secs=self._grace.period)
        try:
            while not lost.is_set() and not self._stopping.is_set():
                self._wake.clear()
                try:
                    with self._lock:
                        if lost.is_set():
                            break
                        started, cpu = time.perf_counter(), time.thread_time()  # measurements: real clocks
                        self._run_due_timers()
                        self._monitor()
                        self.round_secs = (time.perf_counter() - started, time.thread_time() - cpu)
                except ClusterStateError as exc:
                    log.warning("monitor round skipped: ZooKeeper unavailable", error=str(exc))
                except Exception:  # noqa: BLE001 - one bad round must not end leadership
                    log.exception("monitor round failed")
                self._sleep(lost, self._next_wait())
        finally:
            with self._lock:
                self._timers.clear()
            log.info("nimbus leadership loop ended", nimbus=self.identifier)

    def _sleep(self, lost: threading.Event, seconds: float) -> None:
        """Wait up to ``seconds`` for a wake-up, a lost leadership or a stop."""
        deadline = self.clock.monotonic() + seconds
        while not lost.is_set() and not self._stopping.is_set():
            left = deadline - self.clock.monotonic()
            if left <= 0 or self._wake.wait(min(left, 0.25)):
                return

    def _next_wait(self) -> float:
        with self._lock:
            wait = self._timers.wait_secs(self.monitor_freq)
            if self._judge_at is not None:  # a silence runs out before the next round
                wait = min(wait, max(0.0, self._judge_at - self.clock.time()) + 0.05)
            return wait

    def _schedule(self, action: str, topology_id: str, delay: float) -> None:
        self._timers.schedule((action, topology_id), delay)
        self._wake.set()

    def _run_due_timers(self) -> None:
        while (due := self._timers.pop_due()) is not None:
            action, topology_id = due  # type: ignore[misc]
            if action == REMOVE:
                self._remove(topology_id)
            elif action == REBALANCE:
                self._do_rebalance(topology_id)
            elif action == SWEEP and topology_id not in self.state.topology_ids():
                self.state.teardown_topology(topology_id)
                self.state.remove_node_parts(topology_id)  # looked for under every node

    def _monitor(self) -> None:
        """One leader round: reassign what needs it, resume timers, clean orphans."""
        now = self.clock.time()
        if not self.state.connected:
            raise ClusterStateError("not connected to ZooKeeper")
        self.counts["rounds"] += 1
        self._observe_connection(now)
        self._publish_tokens()
        supervisors = self._live_supervisors(now)
        entries = self.state.topology_entries()
        infos = {tid: info for tid, info in entries.items() if info is not None}
        ids = set(entries)  # malformed topology nodes count as present: they keep their workers
        assignments = self.state.assignments()
        unreadable = set(self.state.assignment_ids()) - set(assignments)
        if not self._parts_checked:
            self._reconcile_parts(assignments, unreadable)
        self._recover_unreadable(ids - set(infos), unreadable & ids, assignments)
        # The reads above may have waited for a reconnection: judge by the count after them.
        self._observe_connection(self.clock.time())
        hold = self._grace.active()
        for sid in self._away_expired if not hold else ():
            if self.state.remove_supervisor_if_away(sid):
                log.info("supervisor did not come back within its restart grace; node removed",
                         supervisor=sid)
        slots = RoundSlots.of({sid: s.ports for sid, s in supervisors.items()},
                              {tid: a.executors for tid, a in assignments.items()}, self._slot_use)
        # Topologies that lost a supervisor first: a death is acted on within the round's first
        # moments, not after every healthy topology has been looked at.
        for topology_id, info in sorted(infos.items(), key=lambda kv: (not lost_node(assignments.get(kv[0]),
                                                                                      supervisors), kv[0])):
            if info.status == "killed":
                if (REMOVE, topology_id) not in self._timers:
                    self._schedule(REMOVE, topology_id, self._message_timeout(info))
            elif info.status == "rebalancing":
                if (REBALANCE, topology_id) not in self._timers:
                    self._schedule(REBALANCE, topology_id, 0.0)
            else:
                try:
                    self._reassign(info, assignments, supervisors, now, hold=hold, slots=slots)
                except (ValueError, TypeError) as exc:  # e.g. a hand-edited node: skip this one
                    self._warn_once(topology_id, "bad-record", "cannot schedule topology",
                                    error=str(exc))
        for topology_id in sorted(assignments.keys() - ids):
            log.warning("removing assignment of unknown topology", topology_id=topology_id)
            self.state.remove_assignment(topology_id)
        for topology_id in self.store.ids():
            if topology_id not in ids:
                log.info("removing code of unknown topology", topology_id=topology_id)
                self.store.remove(topology_id)
        self.beats.retain(ids, self._sup_seen)
        self._counts = {k: v for k, v in self._counts.items() if k in ids}
        self._components = {k: v for k, v in self._components.items() if k in ids}
        self._shapes = {k: v for k, v in self._shapes.items() if k in ids}
        self.rates.retain(ids)
        self.rates.forget_stale(self.clock.time())
        self._judge_at = self._next_judgement(supervisors, now)

    def _next_judgement(self, supervisors: Mapping[str, SupervisorInfo], judged: float) -> float | None:
        """When the next beat or supervisor heartbeat heard runs out of its timeout (what ran
        out before ``judged``, this round's time, was judged in it)."""
        reported = self.beats.reported_at()
        sups = next_judgement((last_heard(self._sup_seen[sid][1], reported.get(sid)) for sid in supervisors
                               if sid in self._sup_seen and not supervisors[sid].away),
                              self.supervisor_timeout, judged)
        beats = next_judgement([*self.beats.seen_times(), *self._vouched.values()], self.task_timeout, judged)
        return min((t for t in (sups, beats) if t is not None), default=None)

    def _recover_unreadable(self, topologies: set[str], assignments_unreadable: set[str],
                            assignments: dict[str, Assignment]) -> None:
        """Damaged but not lost: a topology whose node is malformed keeps its workers and its
        name (it is reported, and can be killed by id); a malformed assignment is rebuilt from
        the supervisors' parts of it, so that rewriting it moves nothing."""
        for topology_id in sorted(topologies):
            self._warn_once(topology_id, "unreadable", "topology node unreadable: its workers keep "
                            "running and its name stays taken; an admin can kill it by id")
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
        current = published_tokens(self.guard.tokens if self.guard is not None else None)
        if current == self._published:
            return
        try:
            self.state.set_api_tokens(current)
        except ValueError as exc:  # too many tokens for one node: supervisors keep the last table
            self._warn_once("", "tokens", "cannot publish the API tokens to supervisors", error=str(exc))
            return
        self._published = current
        log.info("API tokens published for supervisors", enabled=current.enabled, tokens=len(current.entries))

    # -- observations ---------------------------------------------------------------
    def _observe_connection(self, now: float) -> None:
        """After a (re)connection: hold reassignments for the task timeout, and count silence
        from now, not from before the outage."""
        if self._grace.observe(self.state.connections):
            log.info("connected to ZooKeeper: no reassignment until workers could be heard",
                     hold_secs=self._grace.period)
            self.beats.restart_silence(now)
            self._sup_seen = {k: (v[0], now) for k, v in self._sup_seen.items()}

    def _on_supervisors(self, supervisors: dict[str, SupervisorInfo]) -> None:
        # kazoo's thread: keep the set (a round then reads no supervisor node) and wake the loop.
        self._registered = supervisors
        self._wake.set()

    def _supervisors(self) -> dict[str, SupervisorInfo]:
        """Every registered supervisor: as the watch last delivered them (kept current by
        ZooKeeper's events, resynchronised after a reconnection), else read now."""
        registered = self._registered
        return registered if registered is not None else self.state.supervisors()

    def _live_supervisors(self, now: float) -> dict[str, SupervisorInfo]:
        """Registered supervisors heard within the supervisor timeout: a report, or a change
        of their node (supervisors of an earlier squall refresh it instead of reporting);
        silence counts from this leadership's start at the earliest."""
        out: dict[str, SupervisorInfo] = {}
        sups = self._supervisors()
        reported = self.beats.reported_at()
        self._away_expired = []
        for sid, info in sups.items():
            seen = self._sup_seen.get(sid)
            if seen is None or seen[0] != (info.time, info.away):
                seen = ((info.time, info.away), now)
                self._sup_seen[sid] = seen
            heard = seen[1] if info.away else last_heard(seen[1], reported.get(sid))
            if supervisor_alive(info.away, now - heard, self.supervisor_timeout, self.restart_grace):
                out[sid] = info
                if info.away:
                    self._vouched[sid] = now
                self._warned.discard(("supervisor", sid))
                continue
            if info.away:
                self._away_expired.append(sid)
            elif ("supervisor", sid) not in self._warned:
                self._warned.add(("supervisor", sid))
                log.warning("supervisor silent; its slots are not used", supervisor=sid,
                            silent_secs=round(now - heard, 1))
        self._sup_seen = {k: v for k, v in self._sup_seen.items() if k in sups}
        self._vouched = {k: v for k, v in self._vouched.items() if k in sups}
        return out

    def _observed_beats(self, topology_id: str, now: float,
                        assignment: Assignment | None) -> dict[Slot, tuple[float, list[ExecutorId]]]:
        """Beats by slot, timed by when this nimbus saw each beat advance. A slot the reports
        do not cover (with stats) is looked up in ZooKeeper too: a worker of an earlier squall
        beats there during a rolling upgrade (its counters go to the rate history then)."""
        heard = self.beats.heard(topology_id)
        if assignment is not None and self.beats.wants_legacy(topology_id, assignment.slots()):
            legacy = self.state.worker_beats(topology_id)
            self.beats.take_legacy(topology_id, legacy, now)
            for beat in legacy.values():
                self.rates.add(topology_id, ReportedBeat.of(beat).samples())
            heard = self.beats.heard(topology_id)
        return {slot: (h.seen, h.beat.executors) for slot, h in heard.items()}

    def _component_counts(self, topology_id: str) -> dict[str, tuple[int, int]] | None:
        """component -> (parallelism, num_tasks) from the stored structure.json, or None."""
        counts = self._counts.get(topology_id)
        if counts is None:
            structure = self.store.structure(topology_id)
            if structure is None:
                return None
            try:
                counts = check_structure(structure)
            except SubmissionError as exc:
                log.warning("stored structure.json is invalid", topology_id=topology_id, error=str(exc))
                return None
            self._counts[topology_id] = counts
        return counts

    def _executor_components(self, info: TopologyInfo) -> dict[ExecutorId, str] | None:
        """Executor -> component, computed again only when the parallelism or the ackers
        change (every round asks it of every topology)."""
        counts = self._component_counts(info.id)
        if counts is None:
            return None
        key = (tuple(sorted(info.component_parallelism.items())), info.conf.get("topology.acker.executors"))
        cached = self._components.get(info.id)
        if cached is not None and cached[0] == key:
            return cached[1]
        system = system_counts(counts, info.conf)
        components = executors_of(system, task_ids(system), info.component_parallelism)
        self._components[info.id] = (key, components)
        return components

    # -- scheduling -----------------------------------------------------------------
    def _reassign(self, info: TopologyInfo, assignments: dict[str, Assignment],
                  supervisors: Mapping[str, SupervisorInfo], now: float,
                  scratch: bool = False, hold: bool = False, slots: RoundSlots | None = None) -> Assignment | None:
        """Compute the topology's assignment and write it if it changed; returns the one in force.

        ``hold`` (the grace after a reconnection): an existing assignment stays as it is; beats
        are still read, so that they are timed from now. ``slots``: the round's (its slot use
        kept up to date here), else made from ``supervisors`` and ``assignments``."""
        topology_id = info.id
        current = assignments.get(topology_id)
        if hold and current is not None and not scratch:
            self._observed_beats(topology_id, now, current)
            return current
        components = self._executor_components(info)
        if components is None and current is None:
            self._warn_once(topology_id, "no-code", "cannot schedule: this nimbus has no code for it")
            return None
        # Without code here, the executor set stays as it is.
        wanted_set: Mapping[ExecutorId, Any] = (components if components is not None
                                                else current.executors)  # type: ignore[union-attr]
        cur_map: Mapping[ExecutorId, Slot] = current.executors if current else {}
        cur_start = current.executor_start if current else {}
        placed, even = self._shape(topology_id, current, wanted_set, info.num_workers)
        dead: set[ExecutorId] = set()
        if cur_map and not scratch:
            beats = self._observed_beats(topology_id, now, current)
            if self._vouched:
                beats = vouched_while_away(beats, placed, self._vouched)
            if not all_heard(placed, beats, now, self.task_timeout):
                dead = dead_executors(cur_map, beats, cur_start, now, self.task_timeout, self.launch_timeout)
        if slots is None:
            slots = RoundSlots.of({sid: s.ports for sid, s in supervisors.items()},
                                  {tid: a.executors for tid, a in assignments.items()})
        if (not scratch and not dead and even and all(port in slots.ports.get(node, ()) and
                                                      slots.used.held_alone(topology_id, (node, port))
                                                      for node, port in placed)):
            new = cur_map  # healthy and unchanged (scheduler.keeps_current): most topologies, most rounds
        else:
            new = compute_assignment(sorted(wanted_set), info.num_workers, cur_map, set(cur_map) - dead, slots.ports,
                                     slots.used.by_others(topology_id), scratch=scratch, live=slots.live)
        if not new:
            self._warn_once(topology_id, "no-slots", "no free slot: the topology waits for one",
                            executors=len(wanted_set))
            return current
        self._warned.discard((topology_id, "no-slots"))
        node_host = {node: supervisors[node].host for node, _ in set(new.values())}
        if (current is not None and new == cur_map and node_host == current.node_host
                and current.code_digest == info.code_digest):
            return current
        assignment = Assignment(
            topology_id=topology_id, executors=new, node_host=node_host,
            executor_start=start_times_after(cur_map, new, cur_start, now),
            code_digest=info.code_digest, version=(current.version + 1) if current else 1)
        if current is not None:
            self.state.set_assignment(assignment, current)
        else:  # new, or its stored assignment is unreadable: the state layer looks for old parts
            self.state.set_assignment(assignment)
        assignments[topology_id] = assignment
        slots.used.update(topology_id, new)
        moved = sum(1 for ex, slot in new.items() if cur_map.get(ex) not in (None, slot))
        self.counts["assignments"] += 1
        self.counts["moved"] += moved
        log.info("assignment written", topology_id=topology_id, version=assignment.version,
                 workers=len(assignment.slots()), executors=len(new), moved=moved, dead=len(dead),
                 scratch=scratch)
        short = worker_shortfall(info.num_workers, len(wanted_set), new)
        if short:
            log.warning("not enough free slots for the requested workers", topology_id=topology_id,
                        requested=info.num_workers, missing=short)
        return assignment

    def _shape(self, topology_id: str, current: Assignment | None, wanted: Mapping[ExecutorId, Any],
               num_workers: int) -> tuple[dict[Slot, frozenset[ExecutorId]], bool]:
        """The assignment's executors by slot, and whether it is an even split of ``wanted``
        (scheduler.even_split): worked out again only when the assignment, the executor set
        or the worker count changes, not every round."""
        cached = self._shapes.get(topology_id)
        if cached is not None and cached[0] is current and cached[1] is wanted and cached[2] == num_workers:
            return cached[3]
        placed = by_slot(current.executors) if current is not None else {}
        shape = (placed, current is not None and even_split(sorted(wanted), num_workers, current.executors, placed))
        self._shapes[topology_id] = (current, wanted, num_workers, shape)
        return shape

    def _warn_once(self, topology_id: str, kind: str, message: str, **fields: Any) -> None:
        if (topology_id, kind) not in self._warned:
            self._warned.add((topology_id, kind))
            log.warning(message, topology_id=topology_id, **fields)

    def _message_timeout(self, info: TopologyInfo) -> float:
        value = info.conf.get("topology.message.timeout.secs")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            value = self.conf["topology.message.timeout.secs"]
        return float(value)

    # -- operations (API) -----------------------------------------------------------
    def _lookup(self, name: str, unreadable: bool = False) -> TopologyInfo:
        """The live topology with this name (or id); 404 when there is none. A topology whose
        node is malformed is found by id (its stand-in, ``status.with_unreadable``) only with
        ``unreadable`` (owner checks and kill); otherwise it is a 409 that says what to do."""
        infos = status.with_unreadable(self.state.topology_entries())
        found = infos.get(name) or next((i for i in infos.values() if i.name == name), None)
        if found is None:
            raise ApiError(404, no_such_topology(name))
        if found.status == status.UNREADABLE and not (unreadable and found.id == name):
            raise ApiError(409, f"the ZooKeeper node of topology {found.id} is unreadable (see nimbus's "
                                f"log); an admin can kill it by id: squall kill {found.id}", id=found.id)
        return found

    def _new_id(self, name: str) -> str:
        existing = set(self.state.topology_ids())
        while True:
            topology_id = f"{name}-{next(self._ids)}-{int(self.clock.time())}"
            if topology_id not in existing and not self.store.has(topology_id):
                return topology_id

    def owner_of(self, name: str) -> str | None:
        """The user who submitted the topology with this name or id; None when there is none
        ("" for one whose node is unreadable: admins only)."""
        try:
            return self._lookup(name, unreadable=True).owner
        except ApiError as exc:  # 409: named by its name, its node unreadable: admins may hear why
            return "" if exc.status == 409 else None

    def submit(self, name: str, receive: Callable[[Upload], None], owner: str) -> dict[str, Any]:
        """Receive the bundle (``receive`` streams the request body into a private file),
        validate it, store the code, write TopologyInfo (owned by ``owner``) and the assignment."""
        self._require_leader()  # a standby refuses before reading the bundle
        with self.store.upload() as upload:
            try:
                check_name(name)
                receive(upload)
                sub = validate_submission(name, upload.reader(), upload.size, self.max_upload)
            except SubmissionError as exc:
                log.info("submission refused", name=name, status=exc.status, error=str(exc))
                raise ApiError(exc.status, str(exc)) from None
            return self._admit(sub, upload, owner)

    def _admit(self, sub: Submission, upload: Upload, owner: str) -> dict[str, Any]:
        with self._lock:
            self._require_leader()
            for info in status.with_unreadable(self.state.topology_entries()).values():
                if info.name == sub.name:  # an unreadable node keeps its name taken until it is killed
                    extra = {"killed": " (it is being killed)",
                             status.UNREADABLE: " (its ZooKeeper node is unreadable: an admin can find it in "
                                                "`squall list` and kill it by id)"}
                    seen = {"id": info.id} if info.owner == owner else {}  # another user's id stays unknown
                    raise ApiError(409, f"a topology named {sub.name!r} is already running"
                                        f"{extra.get(info.status, '')}", **seen)
            conf = dict(sub.conf)
            conf["topology.name"] = sub.name
            workers = conf.get("topology.workers") or self.conf["topology.workers"]
            conf["topology.workers"] = int(workers)
            if conf.get("topology.acker.executors") is None:
                # Fixed at submit (as Storm's nimbus does): a rebalance to more workers
                # must not change the task ids the workers compute.
                conf["topology.acker.executors"] = int(workers)
            system = system_counts(sub.counts, conf)
            topology_id = self._new_id(sub.name)
            code_digest = self.store.put(topology_id, upload, sub.structure)
            self._counts[topology_id] = sub.counts
            info = TopologyInfo(
                id=topology_id, name=sub.name, status="active", num_workers=int(workers),
                component_parallelism={c: p for c, (p, _) in system.items()},
                code_digest=code_digest, submitted_at=self.clock.time(), conf=conf, owner=owner)
            try:
                # Secrets first: the topology's beats and errors nodes need them.
                self.state.set_topology_secrets(topology_id, new_topology_secrets())
                self.state.set_topology(info)
                now = self.clock.time()
                assignment = self._reassign(info, self.state.assignments(),
                                            self._live_supervisors(now), now)
            except BaseException:
                self._undo_submit(topology_id)
                raise
        log.info("topology submitted", topology_id=topology_id, name=sub.name, owner=owner, digest=code_digest,
                 bytes=upload.size, workers=len(assignment.slots()) if assignment else 0)
        reply: dict[str, Any] = {"id": topology_id, "name": sub.name, "owner": owner, "status": "active",
                                 "digest": code_digest,
                                 "workers": len(assignment.slots()) if assignment else 0,
                                 "executors": sum(p for p, _ in system.values())}
        warning = slots_warning(int(workers), reply["executors"], len(assignment.slots()) if assignment else 0)
        if warning:
            reply["warning"] = warning
        return reply

    def _undo_submit(self, topology_id: str) -> None:
        self.store.remove(topology_id)
        self._counts.pop(topology_id, None)
        try:
            self.state.teardown_topology(topology_id)
        except ClusterStateError as exc:
            log.warning("could not undo a failed submission", topology_id=topology_id, error=str(exc))

    def kill(self, name: str, wait_secs: Any = None) -> dict[str, Any]:
        """Status killed (spouts stop) now; assignment, state and code removed after the wait."""
        wait = _number(wait_secs, "wait_secs")
        with self._lock:
            self._require_leader()
            info = self._lookup(name, unreadable=True)
            if wait is None:
                wait = self._message_timeout(info)
            if info.status == status.UNREADABLE:
                log.warning("killing a topology whose ZooKeeper node is unreadable", topology_id=info.id)
            self.state.set_topology_status(info.id, "killed")  # False (and nothing) when unreadable
            self._timers.cancel((REBALANCE, info.id))
            self._prev_status.pop(info.id, None)
            log.info("topology killed", topology_id=info.id, name=info.name, wait_secs=wait)
            if wait <= 0:
                self._remove(info.id)
            else:
                self._schedule(REMOVE, info.id, wait)
        return {"id": info.id, "name": info.name, "status": "killed", "wait_secs": wait}

    def _remove(self, topology_id: str) -> None:
        self._timers.cancel((REMOVE, topology_id))
        self.state.teardown_topology(topology_id)  # the assignment goes first: workers stop
        self.store.remove(topology_id)
        self._counts.pop(topology_id, None)
        self._schedule(SWEEP, topology_id, SWEEP_DELAY_SECS)
        log.info("topology removed", topology_id=topology_id)

    def _set_status(self, name: str, status: str) -> dict[str, Any]:
        with self._lock:
            self._require_leader()
            info = self._lookup(name)
            if info.status in ("killed", "rebalancing"):
                raise ApiError(409, f"topology {info.name!r} is {info.status}")
            if info.status != status:
                self.state.set_topology_status(info.id, status)
                log.info("topology status changed", topology_id=info.id, status=status)
        return {"id": info.id, "name": info.name, "status": status}

    def activate(self, name: str) -> dict[str, Any]:
        return self._set_status(name, "active")

    def deactivate(self, name: str) -> dict[str, Any]:
        return self._set_status(name, "inactive")

    def rebalance(self, name: str, num_workers: Any = None, executors: Any = None,
                  wait_secs: Any = None) -> dict[str, Any]:
        """Storm's rebalance: status rebalancing for the wait, then a from-scratch assignment
        with the new worker count and parallelism, then the previous status again."""
        wait = _number(wait_secs, "wait_secs")
        if executors is not None and not isinstance(executors, dict):
            raise ApiError(400, "executors must be an object of component -> executor count")
        with self._lock:
            self._require_leader()
            info = self._lookup(name)
            if info.status not in ("active", "inactive"):
                raise ApiError(409, f"topology {info.name!r} is {info.status}")
            workers = info.num_workers if num_workers is None else _integer(
                num_workers, "num_workers", 1, MAX_WORKERS)
            parallelism = dict(info.component_parallelism)
            if executors:
                counts = self._component_counts(info.id)
                if counts is None:
                    raise ApiError(503, f"this nimbus has no code for {info.id}; cannot change parallelism")
                for component, n in executors.items():
                    if component not in counts:
                        raise ApiError(400, f"topology {info.name!r} has no component {component!r}")
                    tasks = counts[component][1]
                    parallelism[component] = _integer(n, f"executors of {component!r}", 1, tasks)
            if wait is None:
                wait = self._message_timeout(info)
            now = self.clock.time()
            free = available_slots({sid: s.ports for sid, s in self._live_supervisors(now).items()},
                                   {tid: a.executors for tid, a in self.state.assignments().items()},
                                   exclude_topology=info.id)
            warning = slots_warning(workers, sum(parallelism.values()), len(free))
            previous = info.status
            info.status = "rebalancing"
            info.num_workers = workers
            info.component_parallelism = parallelism
            self.state.set_topology(info)
            self._prev_status[info.id] = previous
            log.info("topology rebalancing", topology_id=info.id, workers=workers,
                     executors=executors or {}, wait_secs=wait)
            if wait <= 0:
                assignment = self._do_rebalance(info.id)
            else:
                assignment = None
                self._schedule(REBALANCE, info.id, wait)
        reply = {"id": info.id, "name": info.name, "status": previous if wait <= 0 else "rebalancing",
                 "num_workers": workers, "wait_secs": wait}
        if assignment is not None:
            reply["workers"] = len(assignment.slots())
        if warning:
            reply["warning"] = warning
        return reply

    def _do_rebalance(self, topology_id: str) -> Assignment | None:
        self._timers.cancel((REBALANCE, topology_id))
        info = self.state.topology(topology_id)
        previous = self._prev_status.pop(topology_id, "active")
        if info is None or info.status != "rebalancing":
            return None
        now = self.clock.time()
        assignment = self._reassign(info, self.state.assignments(), self._live_supervisors(now), now,
                                    scratch=True)
        self.state.set_topology_status(topology_id, previous)
        log.info("topology rebalanced", topology_id=topology_id, status=previous,
                 workers=len(assignment.slots()) if assignment else 0)
        return assignment

    # -- reads (any nimbus) ---------------------------------------------------------
    def list_topologies(self) -> list[dict[str, Any]]:
        """Every topology, one whose node is unreadable too (status ``unreadable``)."""
        return status.topology_rows(status.with_unreadable(self.state.topology_entries()),
                                    self.state.assignments(), self.clock.time())

    def topology_status(self, name: str) -> dict[str, Any]:
        """Components with their executors (host, port, counters), workers, last errors.
        The leader answers: the numbers come in the supervisors' reports, which only it hears."""
        self._require_leader()
        info = self._lookup(name)
        assignment, beats, now = self.state.assignment(info.id), self.beats.beats(info.id), self.clock.time()
        return status.topology_status(
            info, assignment, beats, self._executor_components(info) or {},
            self.store.structure(info.id) or {}, self.state.errors(info.id), now,
            rates=self.rates.rates(info.id, now), rate_window=self.rates.window)

    def topology_conf(self, name: str) -> dict[str, Any]:
        info = self._lookup(name)
        return {"id": info.id, "name": info.name, "conf": info.conf}

    def topology_errors(self, name: str) -> dict[str, Any]:
        """Every kept error of the topology, newest first."""
        info = self._lookup(name)
        errors = sorted(self.state.errors(info.id), key=lambda e: e.time, reverse=True)
        return {"id": info.id, "name": info.name, "errors": [e.to_dict() for e in errors]}

    def worker_log(self, name: str, node: str, port: int, lines: int | None = None,
                   offset: int | None = None, inode: int | None = None) -> dict[str, Any]:
        info = self._lookup(name)
        return worker_logs.worker_log(self.access, info, self.state.assignment(info.id),
                                      self.state.supervisors(), node, port,
                                      lines=lines, offset=offset, inode=inode)

    def take_report(self, supervisor_id: str, data: bytes) -> dict[str, Any]:
        """A supervisor's report (its heartbeat and its workers' beats and stats), kept in
        memory by the leader; 503 naming the leader on a standby, 400 when malformed."""
        if not self.is_leader:
            self._require_leader()
        try:
            report = parse_report(data, supervisor_id)
        except (ValueError, TypeError) as exc:
            self.counts["reports_refused"] += 1
            raise ApiError(400, f"bad report: {exc}") from None
        kept = self.beats.take(report, self.clock.time())
        for beat in report.beats:  # the rate history takes the counters as they come
            self.rates.add(beat.topology_id, beat.samples())
        return {"supervisor": supervisor_id, "beats": kept}

    def _heartbeat_ages(self, now: float) -> dict[str, float] | None:
        """Supervisor id -> seconds since its last report; None on a standby (it hears none)."""
        return {sid: now - t for sid, t in self.beats.reported_at().items()} if self.is_leader else None

    def cluster_info(self) -> dict[str, Any]:
        now = self.clock.time()
        rows = status.supervisor_rows(self._supervisors(), self.state.assignments(), now,
                                      self._heartbeat_ages(now))
        return {
            "nimbus": {"this": self.identifier, "pid": os.getpid(), "is_leader": self.is_leader,
                       "leader": self.state.nimbus_leader(), "contenders": self.state.nimbus_contenders(),
                       "uptime": round(now - self.started_at, 1)},
            "supervisors": rows,
            "slots": {"total": sum(r["slots"] for r in rows), "used": sum(r["used"] for r in rows),
                      "free": sum(r["free"] for r in rows)},
            "topologies": len(self.state.topology_ids()),
            "security": {"auth": self.guard is not None and self.guard.tokens is not None,
                         "tls": self._server is not None and self._server.tls},
        }

    def metrics_series(self) -> Any:
        """Series for /metrics (on the server's threads); ZooKeeper's part left out while it
        cannot be read."""
        now = self.clock.time()
        try:
            statuses = [i.status for i in status.with_unreadable(self.state.topology_entries()).values()]
            rows = status.supervisor_rows(self._supervisors(), self.state.assignments(), now,
                                          self._heartbeat_ages(now))
        except ClusterStateError:
            statuses, rows = None, None
        counts = {**self.counts, "reports:taken": self.beats.counts["reports"],
                  "reports:stats_dropped": self.beats.counts["stats_dropped"],
                  "reports:refused": self.counts["reports_refused"] + sum(
                      n for k, n in self.beats.counts.items() if k.startswith("refused:"))}
        out = nimbus_series(self.is_leader, counts, statuses, rows, self.round_secs)
        out.extend(self.refusals.series())
        if self._tls is not None:
            out.extend(self._tls.series())
        return out

    def bundle(self, topology_id: str) -> tuple[bytes, str]:
        data = self.store.read(topology_id)
        if data is not None:
            return data, digest(data)
        if self.state.topology(topology_id) is None:
            raise ApiError(404, f"no topology with id {topology_id!r}")
        if not self.is_leader:
            leader = self._leader_address()
            raise ApiError(503, f"this nimbus ({self.identifier}) has no copy of the code of "
                                f"{topology_id} yet; the leader is {leader}", leader=leader)
        raise ApiError(404, f"the code of {topology_id} is missing on this nimbus")



class NimbusStartError(RuntimeError):
    """Nimbus cannot start (cannot listen, no ZooKeeper); the message says why."""
