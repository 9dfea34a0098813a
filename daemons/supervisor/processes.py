"""Worker processes as the supervisor sees them: its records of launched workers, whether a
pid is still that worker, and signals that reach only it."""
from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil
import structlog

from squall.daemons import local_state
from squall.daemons.supervisor import adoption

log = structlog.get_logger("squall.supervisor")

CREATE_TIME_SLACK = 1.0  # seconds; process start times are derived from boot time
STATE_VERSION = 1  # of supervisor-state.json


@dataclass
class WorkerProc:
    """One launched worker as recorded in the local state file."""

    worker_id: str
    port: int
    topology_id: str
    executors: list[list[int]]
    code_digest: str
    pid: int | None
    create_time: float | None  # the process's start time (psutil), guards against pid reuse
    launch_time: float
    uid: int | None = None  # the user it runs as when not the supervisor's (worker_user)

    def to_record(self) -> adoption.WorkerRecord:
        return adoption.WorkerRecord(self.worker_id, self.pid, self.topology_id,
                                  frozenset((s, e) for s, e in self.executors),
                                  self.code_digest, self.launch_time)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> WorkerProc:
        def need(key: str, kinds: tuple[type, ...], nullable: bool = False) -> Any:
            value = d.get(key)
            if value is None and nullable:
                return None
            if isinstance(value, bool) or not isinstance(value, kinds):
                raise ValueError(f"field {key!r} is {value!r}")
            return value

        rows = [[s, e] for s, e in local_state.executor_rows(need("executors", (list,)))]
        worker_id = need("worker_id", (str,))
        if not local_state.valid_id(worker_id):
            raise ValueError(f"worker id {worker_id!r} is not usable")
        return cls(worker_id=worker_id, port=need("port", (int,)), topology_id=need("topology_id", (str,)),
                   executors=rows, code_digest=need("code_digest", (str,)),
                   pid=need("pid", (int,), True), create_time=need("create_time", (int, float), True),
                   launch_time=float(need("launch_time", (int, float))), uid=need("uid", (int,), True))


def process_create_time(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except (psutil.Error, OSError):
        return None


def _identity_matches(proc: psutil.Process, create_time: float | None, worker_id: str | None) -> bool:
    if create_time is not None and abs(proc.create_time() - create_time) > CREATE_TIME_SLACK:
        return False  # the pid was reused
    if worker_id:
        try:
            cmdline = proc.cmdline()
        except (psutil.AccessDenied, psutil.ZombieProcess):  # the start time matched: enough
            cmdline = []
        if cmdline and worker_id not in cmdline:
            return False
    return True


def worker_alive(pid: int | None, create_time: float | None, worker_id: str | None) -> bool:
    """Is ``pid`` running and really the worker we launched? A zombie has ended, unless only
    its first thread has (it shows as one while the others finish)."""
    if pid is None:
        return False
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE and proc.num_threads() <= 1:
            return False
        return _identity_matches(proc, create_time, worker_id)
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
    except psutil.AccessDenied:
        return True  # exists; we cannot look closer


def signal_worker(pid: int | None, create_time: float | None, worker_id: str | None, sig: int) -> bool:
    """Send ``sig`` to the worker's process group (it leads its own session), or to the pid
    alone if it left that group. Nothing is sent unless the pid is still our worker."""
    if pid is None:
        return False
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE or not _identity_matches(proc, create_time, worker_id):
            return False  # dead already, or the pid now belongs to another process
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
        return True
    except (psutil.NoSuchProcess, ProcessLookupError):
        return False
    except (psutil.AccessDenied, PermissionError) as exc:
        log.warning("cannot signal worker", pid=pid, worker=worker_id, error=str(exc))
        return False



def save_records(path: Path, supervisor_id: str, workers: Mapping[str, WorkerProc]) -> None:
    """Write the launched workers to the supervisor's state file (atomically)."""
    data = {"v": STATE_VERSION, "supervisor_id": supervisor_id,
            "workers": [asdict(w) for w in sorted(workers.values(), key=lambda w: w.port)]}
    local_state.write_atomic(path, json.dumps(data, indent=1).encode())


def parse_records(raw: bytes) -> tuple[dict[str, WorkerProc], list[str]]:
    """(records by worker id, problems with single records) from the state file's content;
    ValueError when the file as a whole is unusable."""
    data = json.loads(raw)
    if not isinstance(data, dict) or data.get("v") != STATE_VERSION:
        raise ValueError(f"not a version {STATE_VERSION} state object")
    entries = data.get("workers")
    if not isinstance(entries, list):
        raise ValueError("field 'workers' is not a list")
    out: dict[str, WorkerProc] = {}
    problems = []
    for entry in entries:
        try:
            rec = WorkerProc.from_dict(entry if isinstance(entry, dict) else {})
        except (ValueError, TypeError) as exc:
            problems.append(str(exc))
            continue
        out[rec.worker_id] = rec
    return out, problems
