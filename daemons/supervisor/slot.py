"""The supervisor's per-port state machine, after Storm's ``Slot``; pure, no I/O.

The supervisor keeps one :class:`SlotState` per port. Each tick it gathers an
:class:`Observation` about that port (the assignment it read, whether the code is on disk,
the worker process and its local heartbeat), calls :func:`step`, performs the returned
actions in order, and keeps the new state. All knowledge of time, processes and files lives
in the observation, so every transition can be tested without starting anything.

States (Storm's names)::

    EMPTY --assignment--> WAITING_FOR_BLOB --code present--> WAITING_FOR_WORKER_START
      ^         \\--code already present-------------------------^        |
      |                                                     heartbeat     |
      |                                                          v         |
      +-- KILL <--assignment changed/removed-- RUNNING <----------+         |
                                                   |  silent / exited       |
                      KILL_AND_RELAUNCH <----------+------- no beat by start timeout

A kill sends SIGTERM, then SIGKILL once ``shutdown_sleep`` has passed while the process
lives, then cleans up; KILL_AND_RELAUNCH then relaunches the same assignment, KILL moves on
to whatever is assigned now (possibly nothing). A worker whose process is already gone is
cleaned up and relaunched in the same step.
"""
from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Union

ExecutorId = tuple[int, int]

# Storm's SYSTEM_EXECUTOR_ID: a worker may report it; it is never in an assignment.
SYSTEM_EXECUTOR: ExecutorId = (-1, -1)


class State(str, enum.Enum):
    EMPTY = "EMPTY"
    WAITING_FOR_BLOB = "WAITING_FOR_BLOB"
    WAITING_FOR_WORKER_START = "WAITING_FOR_WORKER_START"
    RUNNING = "RUNNING"
    KILL = "KILL"
    KILL_AND_RELAUNCH = "KILL_AND_RELAUNCH"


def _executors(executors: Iterable[Any]) -> frozenset[ExecutorId]:
    return frozenset((int(e[0]), int(e[1])) for e in executors)


@dataclass(frozen=True)
class SlotAssignment:
    """What this port should run: a topology's executors and the digest of its code."""

    topology_id: str
    executors: frozenset[ExecutorId]
    code_digest: str

    def __post_init__(self) -> None:
        # Accept lists (e.g. straight from JSON) and compare as sets.
        object.__setattr__(self, "executors", _executors(self.executors))


@dataclass(frozen=True)
class Timeouts:
    """Seconds; ``from_conf`` reads Storm's supervisor keys."""

    start: float = 120.0  # supervisor.worker.start.timeout.secs
    worker: float = 30.0  # supervisor.worker.timeout.secs
    shutdown_sleep: float = 3.0  # supervisor.worker.shutdown.sleep.secs
    download_retry: float = 3.0  # supervisor.monitor.frequency.secs: re-ask for missing code

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any]) -> Timeouts:
        return cls(
            start=float(conf["supervisor.worker.start.timeout.secs"]),
            worker=float(conf["supervisor.worker.timeout.secs"]),
            shutdown_sleep=float(conf["supervisor.worker.shutdown.sleep.secs"]),
            download_retry=float(conf["supervisor.monitor.frequency.secs"]),
        )


@dataclass(frozen=True)
class SlotState:
    """One port's state. ``assignment`` is what the current worker (or download) is for."""

    port: int
    name: State = State.EMPTY
    assignment: SlotAssignment | None = None
    worker_id: str | None = None
    pid: int | None = None
    launch_time: float | None = None
    kill_time: float | None = None  # when SIGTERM was sent; None: not yet
    relaunch_count: int = 0  # relaunches of this same assignment in a row
    download_time: float | None = None  # when the code was last asked for


@dataclass(frozen=True)
class Observation:
    """What the supervisor saw for this port just now.

    The worker fields are about ``state.worker_id`` (ignored when there is none).
    ``code_present`` is about ``assignment``'s digest. ``new_worker_id`` is a fresh id the
    step uses only if it launches a worker (the supervisor makes one per observation).
    """

    now: float
    assignment: SlotAssignment | None = None
    code_present: bool = False
    worker_alive: bool = False
    worker_pid: int | None = None
    heartbeat_time: float | None = None
    heartbeat_executors: frozenset[ExecutorId] | None = None  # None: beat named no executors
    timeouts: Timeouts = field(default_factory=Timeouts)
    new_worker_id: str | None = None


# --- actions: plain data the supervisor carries out in order -------------------------------

@dataclass(frozen=True)
class DownloadCode:
    """Fetch the topology's code from nimbus and check its digest (idempotent for the supervisor)."""

    topology_id: str
    digest: str


@dataclass(frozen=True)
class LaunchWorker:
    """Start ``worker start <topology> <supervisor> <port> <worker_id>``; record it for :func:`recover`."""

    topology_id: str
    worker_id: str
    port: int
    executors: frozenset[ExecutorId] = frozenset()
    code_digest: str = ""
    reason: str = ""


@dataclass(frozen=True)
class KillWorker:
    """SIGTERM (``force=False``) or SIGKILL the worker; ``pid`` None: look it up by ``worker_id``."""

    pid: int | None
    force: bool
    worker_id: str | None = None
    reason: str = ""


@dataclass(frozen=True)
class CleanupWorker:
    """The worker's process is gone: remove its heartbeat and local record."""

    worker_id: str
    reason: str = ""


Action = Union[DownloadCode, LaunchWorker, KillWorker, CleanupWorker]
Result = tuple[SlotState, list[Action]]


# --- transitions ---------------------------------------------------------------------------

def step(state: SlotState, obs: Observation) -> Result:
    """Advance one port's state machine by one observation; returns (new state, actions)."""
    if state.worker_id is not None and obs.worker_pid is not None:
        state = replace(state, pid=obs.worker_pid)
    return _HANDLERS[state.name](state, obs)


def _prepare(state: SlotState, obs: Observation, relaunch: bool, reason: str) -> Result:
    """From a port with no worker: start on whatever is assigned now."""
    assignment = obs.assignment
    if assignment is None:
        return SlotState(port=state.port), []
    count = state.relaunch_count + 1 if relaunch else 0
    if obs.code_present:
        return _launch(state.port, assignment, obs, count, reason)
    waiting = SlotState(
        port=state.port,
        name=State.WAITING_FOR_BLOB,
        assignment=assignment,
        relaunch_count=count,
        download_time=obs.now,
    )
    return waiting, [DownloadCode(assignment.topology_id, assignment.code_digest)]


def _launch(port: int, assignment: SlotAssignment, obs: Observation, count: int, reason: str) -> Result:
    if not obs.new_worker_id:
        raise ValueError(f"port {port}: launching a worker needs observation.new_worker_id")
    starting = SlotState(
        port=port,
        name=State.WAITING_FOR_WORKER_START,
        assignment=assignment,
        worker_id=obs.new_worker_id,
        launch_time=obs.now,
        relaunch_count=count,
    )
    launch = LaunchWorker(
        assignment.topology_id, obs.new_worker_id, port,
        assignment.executors, assignment.code_digest, reason,
    )
    return starting, [launch]


def _after_death(state: SlotState, obs: Observation, relaunch: bool, reason: str) -> Result:
    """The worker's process is gone: clean it up, then start on the current assignment."""
    actions: list[Action] = []
    if state.worker_id is not None:
        actions.append(CleanupWorker(state.worker_id, reason))
    same = relaunch and obs.assignment == state.assignment
    new_state, more = _prepare(state, obs, same, reason)
    return new_state, actions + more


def _begin_kill(state: SlotState, obs: Observation, name: State, reason: str) -> Result:
    """Enter KILL / KILL_AND_RELAUNCH; a process already dead skips the wait."""
    if not obs.worker_alive:
        return _after_death(state, obs, name is State.KILL_AND_RELAUNCH, reason)
    killing = replace(state, name=name, kill_time=obs.now)
    return killing, [KillWorker(state.pid, False, state.worker_id, reason)]


def _handle_empty(state: SlotState, obs: Observation) -> Result:
    return _prepare(state, obs, relaunch=False, reason="assigned")


def _handle_waiting_for_blob(state: SlotState, obs: Observation) -> Result:
    if obs.assignment != state.assignment:
        return _prepare(state, obs, relaunch=False, reason="assignment changed")
    assert state.assignment is not None
    if obs.code_present:
        return _launch(state.port, state.assignment, obs, state.relaunch_count, "code present")
    if state.download_time is None or obs.now - state.download_time >= obs.timeouts.download_retry:
        again = replace(state, download_time=obs.now)
        return again, [DownloadCode(state.assignment.topology_id, state.assignment.code_digest)]
    return state, []


def _beat_problem(state: SlotState, obs: Observation) -> str | None:
    """Why the worker's heartbeat is not good enough to call it running, or None."""
    if obs.heartbeat_time is None:
        return "no heartbeat"
    if obs.heartbeat_executors is not None and state.assignment is not None:
        reported = _executors(obs.heartbeat_executors) - {SYSTEM_EXECUTOR}
        if reported != state.assignment.executors:
            return "heartbeat reports other executors"
    if obs.now - obs.heartbeat_time > obs.timeouts.worker:
        return "heartbeat timed out"
    return None


def _handle_waiting_for_worker_start(state: SlotState, obs: Observation) -> Result:
    if obs.assignment != state.assignment:
        return _begin_kill(state, obs, State.KILL, "assignment changed")
    if not obs.worker_alive:
        return _begin_kill(state, obs, State.KILL_AND_RELAUNCH, "worker exited while starting")
    problem = _beat_problem(state, obs)
    if problem is None:
        return replace(state, name=State.RUNNING), []
    if problem == "heartbeat reports other executors":
        return _begin_kill(state, obs, State.KILL_AND_RELAUNCH, problem)
    assert state.launch_time is not None
    if obs.now - state.launch_time > obs.timeouts.start:
        return _begin_kill(state, obs, State.KILL_AND_RELAUNCH, "no heartbeat within start timeout")
    return state, []


def _handle_running(state: SlotState, obs: Observation) -> Result:
    if obs.assignment != state.assignment:
        return _begin_kill(state, obs, State.KILL, "assignment changed")
    if not obs.worker_alive:
        return _begin_kill(state, obs, State.KILL_AND_RELAUNCH, "worker exited")
    problem = _beat_problem(state, obs)
    if problem == "no heartbeat":
        # An adopted worker (see recover) may not have beaten yet: same grace as a start.
        launched = state.launch_time if state.launch_time is not None else obs.now
        if obs.now - launched <= obs.timeouts.start:
            return state, []
    if problem is not None:
        return _begin_kill(state, obs, State.KILL_AND_RELAUNCH, problem)
    return state, []


def _handle_kill(state: SlotState, obs: Observation) -> Result:
    relaunch = state.name is State.KILL_AND_RELAUNCH
    if not obs.worker_alive:
        return _after_death(state, obs, relaunch, "worker stopped")
    if state.kill_time is None:
        reason = "relaunching" if relaunch else "no longer assigned"
        return replace(state, kill_time=obs.now), [KillWorker(state.pid, False, state.worker_id, reason)]
    if obs.now - state.kill_time >= obs.timeouts.shutdown_sleep:
        # Sent every step until the process is gone, so a lost signal is retried.
        return state, [KillWorker(state.pid, True, state.worker_id, "still alive after shutdown sleep")]
    return state, []


_HANDLERS = {
    State.EMPTY: _handle_empty,
    State.WAITING_FOR_BLOB: _handle_waiting_for_blob,
    State.WAITING_FOR_WORKER_START: _handle_waiting_for_worker_start,
    State.RUNNING: _handle_running,
    State.KILL: _handle_kill,
    State.KILL_AND_RELAUNCH: _handle_kill,
}


# --- adoption after a supervisor restart -----------------------------------------------------

@dataclass(frozen=True)
class WorkerRecord:
    """What the supervisor wrote to local disk when it launched a worker (from LaunchWorker)."""

    worker_id: str
    pid: int | None
    topology_id: str
    executors: frozenset[ExecutorId]
    code_digest: str
    launch_time: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "executors", _executors(self.executors))

    @property
    def assignment(self) -> SlotAssignment:
        return SlotAssignment(self.topology_id, self.executors, self.code_digest)


def recover(
    port: int,
    local_worker_record: WorkerRecord | None,
    assignment: SlotAssignment | None,
    process_alive: bool,
    now: float,
) -> SlotState:
    """A restarted supervisor's starting state for ``port``.

    A worker that is alive and still assigned the same topology, executors and code is
    adopted as RUNNING (its heartbeat is judged by the next :func:`step`; one that has not
    beaten yet keeps the start timeout from its launch time). Any other recorded worker
    goes to KILL with no signal sent yet, so the next step terminates and cleans it. No
    record: EMPTY.
    """
    record = local_worker_record
    if record is None:
        return SlotState(port=port)
    adopt = process_alive and assignment is not None and assignment == record.assignment
    return SlotState(
        port=port,
        name=State.RUNNING if adopt else State.KILL,
        assignment=record.assignment,
        worker_id=record.worker_id,
        pid=record.pid,
        launch_time=min(record.launch_time, now),  # a clock set back must not extend grace
    )
