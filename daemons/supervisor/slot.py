"""The supervisor's per-port state machine, after Storm's ``Slot``; pure, no I/O.

The supervisor keeps one :class:`SlotState` per port. Each tick it gathers an
:class:`Observation` about that port (the assignment it read, whether the code is on disk,
the worker process, what else of the worker still runs, its memory and its local
heartbeat), calls :func:`step`, performs the returned actions in order, and keeps the new
state. All knowledge of time, processes and files lives in the observation, so every
transition can be tested without starting anything; the verdicts on a worker are in
:mod:`squall.daemons.supervisor.verdicts`.

States (Storm's names, and WAITING_FOR_ENV)::

    EMPTY --assignment--> WAITING_FOR_BLOB --code present--> WAITING_FOR_WORKER_START
      ^         \\--code already present-------------------------^        |
      |                        \\--its environment not built--> WAITING_FOR_ENV --built--^
      |                                          heartbeat, prepared      |
      |                                                          v         |
      +-- KILL <--assignment changed/removed-- RUNNING <----------+         |
                                                   |  silent / exited       |
                      KILL_AND_RELAUNCH <----------+------- not started by start timeout
                                                   |
                                   over worker.memory.max.mb (SIGKILL at once, reported)

UNUSABLE is a port another process holds: its worker exited saying it could not bind it, and
the supervisor's own probe found it taken. The slot starts nothing and is reported to nimbus
as unusable (nimbus moves its executors) until the probe finds the port free again.

WAITING_FOR_ENV is the code's Python environment being built (a topology that ships a
requirements file): asked for again every ``download_retry`` (the builder decides whether a
failed build is due again), and each new failure is reported to the topology's errors.

A kill sends SIGTERM, then SIGKILL once ``shutdown_sleep`` has passed while the process
lives, then cleans up; KILL_AND_RELAUNCH then relaunches the same assignment, KILL moves on
to whatever is assigned now (possibly nothing). A worker whose process is already gone is
cleaned up and relaunched in the same step, unless it died soon after its launch more than
once in a row: then the slot stays EMPTY, holding that assignment's relaunch for a back-off
that belongs to it alone (any other assignment starts at once). Processes a worker leaves
behind (children that outlive it) are SIGKILLed as soon as its own process is gone, and
nothing else starts on the port until they are gone too.
"""
from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Union

from squall.daemons.local_state import EXIT_PORT_IN_USE
from squall.daemons.supervisor import verdicts
from squall.daemons.supervisor.verdicts import ExecutorId, Problem


class State(str, enum.Enum):
    EMPTY = "EMPTY"
    WAITING_FOR_BLOB = "WAITING_FOR_BLOB"
    WAITING_FOR_ENV = "WAITING_FOR_ENV"
    WAITING_FOR_WORKER_START = "WAITING_FOR_WORKER_START"
    RUNNING = "RUNNING"
    KILL = "KILL"
    KILL_AND_RELAUNCH = "KILL_AND_RELAUNCH"
    UNUSABLE = "UNUSABLE"


def executor_set(executors: Iterable[Any]) -> frozenset[ExecutorId]:
    return verdicts.executors(executors)


@dataclass(frozen=True)
class SlotAssignment:
    """What this port should run: a topology's executors and the digest of its code."""

    topology_id: str
    executors: frozenset[ExecutorId]
    code_digest: str

    def __post_init__(self) -> None:
        # Accept lists (e.g. straight from JSON) and compare as sets.
        object.__setattr__(self, "executors", executor_set(self.executors))


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
    crashes: int = 0  # quick deaths in a row of this assignment's workers (verdicts.crashes_after)
    hold_until: float | None = None  # EMPTY: ``assignment``'s relaunch waits until then
    env_reported: float | None = None  # WAITING_FOR_ENV: when the failure last reported happened
    unusable: str | None = None  # UNUSABLE: why


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
    worker_leftovers: bool = False  # processes of the worker other than its own still run
    worker_ready: bool | None = None  # every open/prepare returned (None: the beat does not say)
    memory_bytes: int | None = None  # what the worker's processes use together
    memory_max_bytes: int | None = None  # worker.memory.max.mb; None: no limit
    oom_killed: bool = False  # the kernel ended the worker at its cgroup's memory limit
    env_ready: bool = True  # the code's Python environment is built, or it needs none (with code_present)
    env_failure: tuple[float, str] | None = None  # (when, why) building that environment last failed
    worker_exit_code: int | None = None  # the worker's own exit code, when it is gone and known
    port_in_use: bool | None = None  # the supervisor's probe of the port: held by another process (None: not probed)
    zk_connections: int | None = None  # TCP connections the worker's processes hold to ZooKeeper
    zk_max_connections: int | None = None  # worker.zookeeper.max.connections; None: no limit


# --- actions: plain data the supervisor carries out in order -------------------------------

@dataclass(frozen=True)
class DownloadCode:
    """Fetch the topology's code from nimbus and check its digest (idempotent for the supervisor)."""

    topology_id: str
    digest: str


@dataclass(frozen=True)
class BuildEnvironment:
    """Build the Python environment the topology's code asks for, unless it is built, being
    built or failed too recently (idempotent for the supervisor)."""

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


@dataclass(frozen=True)
class ReportProblem:
    """Tell the topology's errors why the supervisor ended one of its workers (or, with no
    ``worker_id``, why it cannot start one)."""

    topology_id: str
    port: int
    worker_id: str | None
    problem: Problem


Action = Union[DownloadCode, BuildEnvironment, LaunchWorker, KillWorker, CleanupWorker, ReportProblem]
Result = tuple[SlotState, list[Action]]


# --- transitions ---------------------------------------------------------------------------

def step(state: SlotState, obs: Observation) -> Result:
    """Advance one port's state machine by one observation; returns (new state, actions)."""
    if state.worker_id is not None and obs.worker_pid is not None:
        state = replace(state, pid=obs.worker_pid)
    if state.worker_id is not None and not obs.worker_alive and obs.worker_leftovers:
        return _end_leftovers(state, obs)
    return _HANDLERS[state.name](state, obs)


def _prepare(state: SlotState, obs: Observation, relaunch: bool, reason: str) -> Result:
    """From a port with no worker: start on whatever is assigned now."""
    assignment = obs.assignment
    if assignment is None:
        return SlotState(port=state.port), []
    count = state.relaunch_count + 1 if relaunch else 0
    crashes = state.crashes if relaunch else 0
    if obs.code_present:
        return _code_present(state.port, assignment, obs, count, crashes, reason)
    waiting = SlotState(
        port=state.port,
        name=State.WAITING_FOR_BLOB,
        assignment=assignment,
        relaunch_count=count,
        download_time=obs.now,
        crashes=crashes,
    )
    return waiting, [DownloadCode(assignment.topology_id, assignment.code_digest)]


def _code_present(port: int, assignment: SlotAssignment, obs: Observation, count: int, crashes: int,
                  reason: str) -> Result:
    """The code is on disk: launch, or first wait for its Python environment."""
    if obs.env_ready:
        return _launch(port, assignment, obs, count, crashes, reason)
    waiting = SlotState(port=port, name=State.WAITING_FOR_ENV, assignment=assignment, relaunch_count=count,
                        download_time=obs.now, crashes=crashes)
    return _env_failure(waiting, obs, [BuildEnvironment(assignment.topology_id, assignment.code_digest)])


def _env_failure(state: SlotState, obs: Observation, actions: list[Action]) -> Result:
    """Report a failure of the environment's build that this slot has not reported yet."""
    failure = obs.env_failure
    if failure is None or failure[0] == state.env_reported or state.assignment is None:
        return state, actions
    problem = Problem(verdicts.ENVIRONMENT, failure[1])
    report = ReportProblem(state.assignment.topology_id, state.port, None, problem)
    return replace(state, env_reported=failure[0]), actions + [report]


def _launch(port: int, assignment: SlotAssignment, obs: Observation, count: int, crashes: int,
            reason: str) -> Result:
    if not obs.new_worker_id:
        raise ValueError(f"port {port}: launching a worker needs observation.new_worker_id")
    starting = SlotState(
        port=port,
        name=State.WAITING_FOR_WORKER_START,
        assignment=assignment,
        worker_id=obs.new_worker_id,
        launch_time=obs.now,
        relaunch_count=count,
        crashes=crashes,
    )
    launch = LaunchWorker(
        assignment.topology_id, obs.new_worker_id, port,
        assignment.executors, assignment.code_digest, reason,
    )
    return starting, [launch]


def _report(state: SlotState, problem: Problem) -> list[Action]:
    if state.assignment is None or state.worker_id is None:
        return []
    return [ReportProblem(state.assignment.topology_id, state.port, state.worker_id, problem)]


def _after_death(state: SlotState, obs: Observation, relaunch: bool, reason: str) -> Result:
    """The worker's processes are gone: clean it up, then start on the current assignment;
    the same assignment after quick deaths in a row waits out its back-off first."""
    actions: list[Action] = []
    if state.worker_id is not None:
        actions.append(CleanupWorker(state.worker_id, reason))
    same = relaunch and obs.assignment == state.assignment
    if same:
        crashes = verdicts.crashes_after(state.crashes, state.launch_time, obs.now)
        state = replace(state, crashes=crashes)
        delay = verdicts.relaunch_delay(crashes)
        if delay > 0:
            held = SlotState(port=state.port, assignment=state.assignment, relaunch_count=state.relaunch_count,
                             crashes=crashes, hold_until=obs.now + delay)
            return held, actions
    new_state, more = _prepare(state, obs, same, reason)
    return new_state, actions + more


def _died(state: SlotState, obs: Observation, reason: str) -> Result:
    """A starting or running worker of the current assignment is gone (reported when the
    kernel ended it at its memory limit). One that could not bind its port, which the probe
    finds held, leaves the slot UNUSABLE."""
    if obs.worker_exit_code == EXIT_PORT_IN_USE and obs.port_in_use:
        problem = verdicts.port_problem(state.port)
        actions: list[Action] = _report(state, problem)
        if state.worker_id is not None:
            actions.append(CleanupWorker(state.worker_id, problem.kind))
        return SlotState(port=state.port, name=State.UNUSABLE, unusable=problem.text), actions
    report = _report(state, verdicts.oom_problem(obs.memory_max_bytes)) if obs.oom_killed else []
    new_state, actions = _after_death(state, obs, True, reason)
    return new_state, report + actions


def _end_leftovers(state: SlotState, obs: Observation) -> Result:
    """The worker's own process is gone but processes it started live on (a child that
    ignores SIGTERM and left its session): SIGKILL them now, and start nothing here until
    they are gone (they may hold the port)."""
    actions: list[Action] = []
    if state.name in (State.RUNNING, State.WAITING_FOR_WORKER_START):
        relaunch = obs.assignment == state.assignment
        if relaunch and obs.oom_killed:
            actions += _report(state, verdicts.oom_problem(obs.memory_max_bytes))
        state = replace(state, name=State.KILL_AND_RELAUNCH if relaunch else State.KILL, kill_time=obs.now)
    kill = KillWorker(state.pid, True, state.worker_id, "processes the worker left behind")
    return state, actions + [kill]


def _begin_kill(state: SlotState, obs: Observation, name: State, reason: str) -> Result:
    """Enter KILL / KILL_AND_RELAUNCH; a process already dead skips the wait."""
    if not obs.worker_alive:
        return _after_death(state, obs, name is State.KILL_AND_RELAUNCH, reason)
    killing = replace(state, name=name, kill_time=obs.now)
    return killing, [KillWorker(state.pid, False, state.worker_id, reason)]


def _hog_problem(obs: Observation) -> Problem | None:
    """The worker takes more than its share of the host: memory, or ZooKeeper's connections."""
    return (verdicts.memory_problem(obs.memory_bytes, obs.memory_max_bytes)
            or verdicts.zookeeper_problem(obs.zk_connections, obs.zk_max_connections))


def _kill_for(state: SlotState, obs: Observation, problem: Problem, force: bool) -> Result:
    """End a worker for a verdict, and report it; ``force``: SIGKILL without the grace."""
    if not force:
        new_state, actions = _begin_kill(state, obs, State.KILL_AND_RELAUNCH, problem.text)
        return new_state, _report(state, problem) + actions
    killing = replace(state, name=State.KILL_AND_RELAUNCH, kill_time=obs.now)
    return killing, _report(state, problem) + [KillWorker(state.pid, True, state.worker_id, problem.kind)]


def _handle_empty(state: SlotState, obs: Observation) -> Result:
    held = state.hold_until is not None and obs.assignment == state.assignment
    if held and obs.now < state.hold_until:  # type: ignore[operator]
        return state, []
    return _prepare(state, obs, relaunch=held, reason="relaunching after back-off" if held else "assigned")


def _handle_waiting_for_blob(state: SlotState, obs: Observation) -> Result:
    if obs.assignment != state.assignment:
        return _prepare(state, obs, relaunch=False, reason="assignment changed")
    assert state.assignment is not None
    if obs.code_present:
        return _code_present(state.port, state.assignment, obs, state.relaunch_count, state.crashes, "code present")
    if state.download_time is None or obs.now - state.download_time >= obs.timeouts.download_retry:
        again = replace(state, download_time=obs.now)
        return again, [DownloadCode(state.assignment.topology_id, state.assignment.code_digest)]
    return state, []


def _handle_waiting_for_env(state: SlotState, obs: Observation) -> Result:
    if obs.assignment != state.assignment or not obs.code_present:
        return _prepare(state, obs, relaunch=False, reason="assignment changed" if obs.assignment != state.assignment
                        else "code gone")
    assert state.assignment is not None
    if obs.env_ready:
        return _launch(state.port, state.assignment, obs, state.relaunch_count, state.crashes, "environment built")
    actions: list[Action] = []
    if state.download_time is None or obs.now - state.download_time >= obs.timeouts.download_retry:
        actions.append(BuildEnvironment(state.assignment.topology_id, state.assignment.code_digest))
        state = replace(state, download_time=obs.now)
    return _env_failure(state, obs, actions)


def _handle_unusable(state: SlotState, obs: Observation) -> Result:
    if obs.port_in_use is False:
        return _prepare(SlotState(port=state.port), obs, relaunch=False, reason="port free again")
    return state, []


def _beat_problem(state: SlotState, obs: Observation) -> str | None:
    """Why the worker's heartbeat is not good enough to call it running, or None."""
    assigned = state.assignment.executors if state.assignment is not None else None
    return verdicts.beat_problem(assigned, obs.heartbeat_time, obs.heartbeat_executors, obs.now,
                                 obs.timeouts.worker)


def _ended(state: SlotState, obs: Observation, exited: str) -> Result | None:
    """What ends a launched worker whether it is starting or running: its assignment
    changed, it exited (``exited`` says so), or it takes more than its share (memory, ZooKeeper
    connections); else None."""
    if obs.assignment != state.assignment:
        return _begin_kill(state, obs, State.KILL, "assignment changed")
    if not obs.worker_alive:
        return _died(state, obs, exited)
    hog = _hog_problem(obs)
    if hog is not None:
        return _kill_for(state, obs, hog, force=True)
    return None


def _handle_waiting_for_worker_start(state: SlotState, obs: Observation) -> Result:
    ended = _ended(state, obs, "worker exited while starting")
    if ended is not None:
        return ended
    problem = _beat_problem(state, obs)
    if problem is None:
        start = verdicts.start_problem(obs.worker_ready, state.launch_time, obs.now, obs.timeouts.start)
        if start is not None:
            return _kill_for(state, obs, start, force=False)
        if obs.worker_ready is False:  # beating, still in open/prepare
            return state, []
        return replace(state, name=State.RUNNING), []
    if problem == "heartbeat reports other executors":
        return _begin_kill(state, obs, State.KILL_AND_RELAUNCH, problem)
    assert state.launch_time is not None
    if obs.now - state.launch_time > obs.timeouts.start:
        return _begin_kill(state, obs, State.KILL_AND_RELAUNCH, "no heartbeat within start timeout")
    return state, []


def _handle_running(state: SlotState, obs: Observation) -> Result:
    ended = _ended(state, obs, "worker exited")
    if ended is not None:
        return ended
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
    State.WAITING_FOR_ENV: _handle_waiting_for_env,
    State.WAITING_FOR_WORKER_START: _handle_waiting_for_worker_start,
    State.RUNNING: _handle_running,
    State.KILL: _handle_kill,
    State.KILL_AND_RELAUNCH: _handle_kill,
    State.UNUSABLE: _handle_unusable,
}

