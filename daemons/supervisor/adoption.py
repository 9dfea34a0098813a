"""A restarted supervisor's starting state for each port: the worker it recorded at launch,
adopted when it still runs what is assigned, killed otherwise; pure, no I/O."""
from __future__ import annotations

from dataclasses import dataclass

from squall.daemons.supervisor.slot import SlotAssignment, SlotState, State, executor_set
from squall.daemons.supervisor.verdicts import ExecutorId


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
        object.__setattr__(self, "executors", executor_set(self.executors))

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
    adopted as RUNNING (its heartbeat is judged by the next ``slot.step``; one that has not
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
