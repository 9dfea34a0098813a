"""What the leader changes on a caller's request: submit, kill, activate and deactivate,
rebalance. Kill and rebalance delays (``wait_secs``) are the leader's deadlines
(:mod:`squall.daemons.nimbus.deadlines`); its rounds carry them out."""
from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from squall.daemons.nimbus import state_lineage, status
from squall.daemons.nimbus.code_store import CodeStore, Upload
from squall.daemons.nimbus.deadlines import REBALANCE, REMOVE, SWEEP, SWEEP_DELAY_SECS, LeaderDeadlines
from squall.daemons.nimbus.guard import ApiError
from squall.daemons.nimbus.heard import Hearing
from squall.daemons.nimbus.leadership import Leadership
from squall.daemons.nimbus.placement import Placement
from squall.daemons.nimbus.queries import lookup
from squall.daemons.nimbus.scheduler import available_slots, slots_warning
from squall.daemons.nimbus.secrets import new_topology_secrets
from squall.daemons.nimbus.validate import Submission, SubmissionError, check_name, validate_submission
from squall.daemons.state import Assignment, ClusterState, ClusterStateError, TopologyInfo
from squall.daemons.timers import Clock
from squall.model import system_counts

log = structlog.get_logger("squall.nimbus")

MAX_WAIT_SECS = 7 * 24 * 3600.0
MAX_WORKERS = 10_000


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


class Operations:
    """The write side of nimbus's API (on the HTTP server's threads) and the deadlines it
    sets (run by the leader's rounds); every write holds ``lock``."""

    def __init__(self, conf: Mapping[str, Any], state: ClusterState, store: CodeStore, clock: Clock,
                 lock: threading.RLock, leadership: Leadership, hearing: Hearing, placement: Placement,
                 deadlines: LeaderDeadlines) -> None:
        self.conf = conf
        self.state = state
        self.store = store
        self.clock = clock
        self._lock = lock
        self.leadership = leadership
        self.hearing = hearing
        self.placement = placement
        self.deadlines = deadlines
        self.max_upload = int(conf["nimbus.code.max.upload.bytes"])
        self._ids = itertools.count(1)
        self._prev_status: dict[str, str] = {}  # rebalancing topology -> status to return to

    def restart(self) -> None:
        """A new leadership: the status a rebalance began from was known to the last leader only."""
        self._prev_status.clear()

    def message_timeout(self, info: TopologyInfo) -> float:
        value = info.conf.get("topology.message.timeout.secs")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            value = self.conf["topology.message.timeout.secs"]
        return float(value)

    def _new_id(self, name: str) -> str:
        existing = set(self.state.topology_ids())
        while True:
            topology_id = f"{name}-{next(self._ids)}-{int(self.clock.time())}"
            if topology_id not in existing and not self.store.has(topology_id):
                return topology_id

    def submit(self, name: str, receive: Callable[[Upload], None], owner: str) -> dict[str, Any]:
        """Receive the bundle (``receive`` streams the request body into a private file),
        validate it, store the code, write TopologyInfo (owned by ``owner``) and the assignment."""
        self.leadership.require()  # a standby refuses before reading the bundle
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
            self.leadership.require()
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
            lineage = self.state.state_lineage(sub.name)
            try:
                conf[state_lineage.NAMESPACE] = state_lineage.choose(sub.name, owner, topology_id, conf, lineage)
            except state_lineage.StateRefused as exc:
                raise ApiError(409, str(exc)) from None
            code_digest = self.store.put(topology_id, upload, sub.structure)
            self.placement.remember(topology_id, sub.counts)
            info = TopologyInfo(
                id=topology_id, name=sub.name, status="active", num_workers=int(workers),
                component_parallelism={c: p for c, (p, _) in system.items()},
                code_digest=code_digest, submitted_at=self.clock.time(), conf=conf, owner=owner)
            try:
                # Secrets first: the topology's beats and errors nodes need them.
                self.state.set_topology_secrets(topology_id, new_topology_secrets())
                self.state.set_topology(info)
                self.state.set_state_lineage(sub.name, lineage.with_owner(owner, conf[state_lineage.NAMESPACE]))
                now = self.clock.time()
                assignment = self.placement.reassign(info, self.state.assignments(),
                                            self.hearing.live_supervisors(now), now)
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
        self.placement.forget(topology_id)
        try:
            self.state.teardown_topology(topology_id)
        except ClusterStateError as exc:
            log.warning("could not undo a failed submission", topology_id=topology_id, error=str(exc))

    def kill(self, name: str, wait_secs: Any = None) -> dict[str, Any]:
        """Status killed (spouts stop) now; assignment, state and code removed after the wait."""
        wait = _number(wait_secs, "wait_secs")
        with self._lock:
            self.leadership.require()
            info = lookup(self.state, name, unreadable=True)
            if wait is None:
                wait = self.message_timeout(info)
            if info.status == status.UNREADABLE:
                log.warning("killing a topology whose ZooKeeper node is unreadable", topology_id=info.id)
            self.state.set_topology_status(info.id, "killed")  # False (and nothing) when unreadable
            self.deadlines.cancel(REBALANCE, info.id)
            self._prev_status.pop(info.id, None)
            log.info("topology killed", topology_id=info.id, name=info.name, wait_secs=wait)
            if wait <= 0:
                self.remove(info.id)
            else:
                self.deadlines.schedule(REMOVE, info.id, wait)
        return {"id": info.id, "name": info.name, "status": "killed", "wait_secs": wait}

    def remove(self, topology_id: str) -> None:
        self.deadlines.cancel(REMOVE, topology_id)
        self.state.teardown_topology(topology_id)  # the assignment goes first: workers stop
        self.store.remove(topology_id)
        self.placement.forget(topology_id)
        self.deadlines.schedule(SWEEP, topology_id, SWEEP_DELAY_SECS)
        log.info("topology removed", topology_id=topology_id)

    def _set_status(self, name: str, status: str) -> dict[str, Any]:
        with self._lock:
            self.leadership.require()
            info = lookup(self.state, name)
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
            self.leadership.require()
            info = lookup(self.state, name)
            if info.status not in ("active", "inactive"):
                raise ApiError(409, f"topology {info.name!r} is {info.status}")
            workers = info.num_workers if num_workers is None else _integer(
                num_workers, "num_workers", 1, MAX_WORKERS)
            parallelism = dict(info.component_parallelism)
            if executors:
                counts = self.placement.component_counts(info.id)
                if counts is None:
                    raise ApiError(503, f"this nimbus has no code for {info.id}; cannot change parallelism")
                for component, n in executors.items():
                    if component not in counts:
                        raise ApiError(400, f"topology {info.name!r} has no component {component!r}")
                    tasks = counts[component][1]
                    parallelism[component] = _integer(n, f"executors of {component!r}", 1, tasks)
            if wait is None:
                wait = self.message_timeout(info)
            now = self.clock.time()
            free = available_slots({sid: s.usable_ports for sid, s in self.hearing.live_supervisors(now).items()},
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
                assignment = self.do_rebalance(info.id)
            else:
                assignment = None
                self.deadlines.schedule(REBALANCE, info.id, wait)
        reply = {"id": info.id, "name": info.name, "status": previous if wait <= 0 else "rebalancing",
                 "num_workers": workers, "wait_secs": wait}
        if assignment is not None:
            reply["workers"] = len(assignment.slots())
        if warning:
            reply["warning"] = warning
        return reply

    def do_rebalance(self, topology_id: str) -> Assignment | None:
        self.deadlines.cancel(REBALANCE, topology_id)
        info = self.state.topology(topology_id)
        previous = self._prev_status.pop(topology_id, "active")
        if info is None or info.status != "rebalancing":
            return None
        now = self.clock.time()
        assignment = self.placement.reassign(info, self.state.assignments(), self.hearing.live_supervisors(now), now,
                                    scratch=True)
        self.state.set_topology_status(topology_id, previous)
        log.info("topology rebalanced", topology_id=topology_id, status=previous,
                 workers=len(assignment.slots()) if assignment else 0)
        return assignment

