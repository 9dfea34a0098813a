"""One :mod:`squall.daemons.supervisor.slot` state machine per port. Each tick observes
every port (the assignment for it, whether the code is on disk, the worker process and its
local heartbeat file), calls ``slot.step`` and hands the returned actions to
:mod:`squall.daemons.supervisor.actions`. After a restart the slots are recovered from the
local state file: workers alive and still assigned are adopted, the others killed."""
from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from squall.daemons import local_state
from squall.daemons.local_state import EXIT_PORT_IN_USE
from squall.daemons.state import NodeAssignment
from squall.daemons.supervisor import adoption
from squall.daemons.supervisor import slot as _slot
from squall.daemons.supervisor.actions import WorkerActions
from squall.daemons.supervisor.assigned import port_assignments
from squall.daemons.supervisor.downloads import CodeDownloads
from squall.daemons.supervisor.environments import EnvStatus, TopologyEnvironments
from squall.daemons.supervisor.feed import AssignmentFeed
from squall.daemons.supervisor.metrics import SupervisorMetrics
from squall.daemons.supervisor.port_probe import port_held
from squall.daemons.supervisor.processes import WorkerProc, worker_alive
from squall.daemons.supervisor.workers import LocalWorkers
from squall.daemons.timers import Clock
from squall.daemons.warn_once import WarnOnce


class PortSlots:
    """``slots``: port -> its state machine's state, for every configured port (and a
    recorded port no longer configured, until its worker is cleaned up)."""

    def __init__(self, supervisor_id: str, ports: list[int], timeouts: _slot.Timeouts, memory_max: int | None,
                 local: LocalWorkers, code: CodeDownloads, envs: TopologyEnvironments, feed: AssignmentFeed,
                 actions: WorkerActions, metrics: SupervisorMetrics, clock: Clock, logger: Any,
                 warn_once: WarnOnce, bind_host: str = "127.0.0.1", zk_max: int | None = None) -> None:
        self.id = supervisor_id
        self.ports = ports
        self.timeouts = timeouts
        self.memory_max = memory_max
        self.zk_max = zk_max  # worker.zookeeper.max.connections
        self.local = local
        self.code = code
        self.envs = envs
        self.bind_host = bind_host  # where its workers bind their ports (probed when one could not)
        self.feed = feed
        self.actions = actions
        self.metrics = metrics
        self.clock = clock
        self.log = logger
        self._warn_once = warn_once
        self.slots: dict[int, _slot.SlotState] = {}
        self.malformed_beats = 0

    @property
    def workers(self) -> dict[str, WorkerProc]:
        return self.local.records

    def my_assignments(self, snapshot: Mapping[str, NodeAssignment | None],
                       running: Mapping[int, _slot.SlotAssignment | None] | None = None
                       ) -> dict[int, _slot.SlotAssignment]:
        """Port -> what this node should run there, from its parts of the assignments; a
        malformed part keeps what ``running`` (default: the slots) says runs there."""
        if running is None:
            running = {p: s.assignment for p, s in self.slots.items()}
        out, problems = port_assignments(self.ports, snapshot, running)
        for problem in problems:
            self._warn_once(problem.key, problem.event, **problem.fields)
        return out

    # -- recovery after a restart ------------------------------------------------------------
    def recover(self, snapshot: Mapping[str, NodeAssignment | None]) -> None:
        records = self.local.load()
        self.local.kill_orphans(records, self.timeouts.shutdown_sleep)
        assigned = self.my_assignments(snapshot, {rec.port: _slot.SlotAssignment(
            rec.topology_id, frozenset((s, e) for s, e in rec.executors), rec.code_digest) for rec in records.values()})
        now = self.clock.time()
        by_port: dict[int, WorkerProc] = {}
        rec: WorkerProc | None
        for rec in sorted(records.values(), key=lambda r: r.launch_time, reverse=True):
            if rec.port in by_port:  # should not happen: one worker per port
                self.log.warning("two workers recorded for one port; killing the older", port=rec.port,
                                 worker=rec.worker_id)
                self.local.kill_now(rec, self.timeouts.shutdown_sleep)
                continue
            by_port[rec.port] = rec
        self.local.records.update({rec.worker_id: rec for rec in by_port.values()})
        for port in sorted(set(self.ports) | set(by_port)):
            rec = by_port.get(port)
            assignment = assigned.get(port) if port in self.ports else None
            alive = rec is not None and worker_alive(rec.pid, rec.create_time, rec.worker_id)
            state = adoption.recover(port, rec.to_record() if rec else None, assignment, alive, now)
            self.slots[port] = state
            if rec is None:
                continue
            fields = dict(port=port, topology=rec.topology_id, worker=rec.worker_id, pid=rec.pid)
            if state.name is _slot.State.RUNNING:
                self.log.info("worker adopted", **fields)
            elif alive:
                self.log.info("recorded worker no longer assigned; killing it", **fields)
            else:
                self.log.info("recorded worker is gone; cleaning up", **fields)
        self.local.save(self.id)

    def kill_all_workers(self) -> None:
        """Stop every worker of this node (``--kill-workers-on-exit``)."""
        self.local.stop_all(self.timeouts.shutdown_sleep)
        self.local.save(self.id)
        self.slots = {p: _slot.SlotState(port=p) for p in self.ports}

    # -- one tick ----------------------------------------------------------------------------
    def tick(self) -> None:
        """Observe and step every port, carry out the actions, drop unused code."""
        self.local.reap(self.envs.build_pids)
        snapshot = self.feed.snapshot
        assigned = self.my_assignments(snapshot or {})
        for port in sorted(self.slots):
            try:
                self._step_port(port, assigned.get(port) if port in self.ports else None)
            except Exception:  # noqa: BLE001 - one port's trouble must not stop the others
                self.log.exception("slot step failed", port=port)
        for port in [p for p, s in self.slots.items() if p not in self.ports and s.name is _slot.State.EMPTY]:
            del self.slots[port]  # a recorded port no longer configured, now cleaned up
        self.local.bound_early_output()
        if snapshot is not None:
            keep = {a.topology_id for a in assigned.values()}
            keep |= {s.assignment.topology_id for s in self.slots.values() if s.assignment is not None}
            keep |= {w.topology_id for w in self.workers.values()}
            for topology_id in self.code.cleanup(keep):
                self.log.info("code removed; topology no longer assigned here", topology=topology_id)
            for key in self.envs.cleanup(keep):
                self.log.info("topology environment removed; no topology here uses it", venv=key)

    def _step_port(self, port: int, assignment: _slot.SlotAssignment | None) -> None:
        state = self.slots[port]
        now = self.clock.time()
        view = self.local.view(state.worker_id)
        rec = self.workers.get(state.worker_id) if state.worker_id else None
        beat_time, beat_execs, ready = self._beat(state.worker_id) if state.worker_id and view.alive \
            else (None, None, None)
        code_present = assignment is not None and self.code.present(assignment.topology_id, assignment.code_digest)
        env = self.envs.status(assignment.topology_id, assignment.code_digest) if assignment is not None \
            and code_present else EnvStatus(True)
        probe = state.name is _slot.State.UNUSABLE or (view.exit_code == EXIT_PORT_IN_USE and not view.alive)
        obs = _slot.Observation(
            now=now, assignment=assignment, code_present=code_present,
            env_ready=env.ready, env_failure=env.failure, worker_exit_code=view.exit_code,
            port_in_use=port_held(self.bind_host, port) if probe else None,
            worker_alive=view.alive, worker_pid=rec.pid if rec else None,
            heartbeat_time=beat_time, heartbeat_executors=beat_execs,
            timeouts=self.timeouts, new_worker_id=uuid.uuid4().hex,
            worker_leftovers=view.leftovers, worker_ready=ready, memory_bytes=view.memory,
            memory_max_bytes=self.memory_max, oom_killed=view.oom_killed,
            zk_connections=view.zk_connections, zk_max_connections=self.zk_max,
        )
        new, actions = _slot.step(state, obs)
        self.slots[port] = new
        if new.name is not state.name:
            current = new.assignment or state.assignment
            self.log.info("slot state changed", port=port, topology=current.topology_id if current else None,
                          worker=new.worker_id or state.worker_id, previous=state.name.value,
                          state=new.name.value)
        if new.hold_until is not None and state.hold_until is None:
            self.log.warning("worker keeps dying; delaying its relaunch", port=port,
                             topology=new.assignment.topology_id if new.assignment else None,
                             crashes=new.crashes, delay_secs=round(new.hold_until - now, 1))
        for action in actions:
            self.actions.perform(port, action)
            if isinstance(action, _slot.LaunchWorker) and new.relaunch_count and action.worker_id in self.workers:
                self.metrics.counts["restarts"] += 1

    def _beat(self, worker_id: str) -> tuple[float | None, frozenset[tuple[int, int]] | None, bool | None]:
        """The worker's heartbeat: its time, executors, and whether its components finished
        starting (None when it does not say)."""
        path = self.local.layout.heartbeat_file(worker_id)
        try:
            beat = local_state.read_heartbeat(self.local.layout, worker_id)
            return (None, None, None) if beat is None else (beat.time, beat.executors, beat.ready)
        except (ValueError, OSError) as exc:
            self.malformed_beats += 1
            self._warn_once(("beat", worker_id, str(exc)), "malformed worker heartbeat ignored",
                            worker=worker_id, path=str(path), error=str(exc))
            return None, None, None
