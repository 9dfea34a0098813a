"""What a supervisor settles once, as it starts: its id, the lock on its local dir, whom its
workers run as, and the cgroups that contain them."""
from __future__ import annotations

import fcntl
import os
import uuid
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import Any

import structlog

from squall.daemons import local_state
from squall.daemons.supervisor import cgroups, launcher
from squall.daemons.supervisor.containment import Containment
from squall.daemons.supervisor.worker_user import WorkerAccounts, WorkerUserError
from squall.errors import SquallError

log = structlog.get_logger("squall.supervisor")


class SupervisorError(SquallError, RuntimeError):
    """The supervisor cannot start or go on (exit code 1); the message says why."""


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return ""


def load_supervisor_id(conf: Mapping[str, Any], layout: local_state.LocalLayout) -> str:
    """``supervisor.id`` if set, else the id kept in ``<local dir>/supervisor-id`` (made once)."""
    fixed = conf.get("supervisor.id")
    if fixed:
        return str(fixed)
    path = layout.supervisor_id_file
    try:
        kept = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        kept = ""
    if kept and local_state.valid_id(kept):
        return kept
    if kept:
        log.warning("supervisor id file is malformed; making a new id", path=str(path), content=kept[:80])
    new = uuid.uuid4().hex
    local_state.write_atomic(path, (new + "\n").encode())
    return new


class LocalDirLock:
    """The supervisor's hold on its local dir: two supervisors sharing one would fight over
    the same workers."""

    def __init__(self, path: Path, local_dir: Path) -> None:
        self.path = path
        self.local_dir = local_dir
        self._fd: int | None = None

    def take(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise SupervisorError(f"another supervisor is using local dir {self.local_dir}") from None
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def worker_accounts(conf: MutableMapping[str, Any], local_dir: Path) -> WorkerAccounts:
    """Whom workers run as, and the command that starts them in ``conf``'s
    ``supervisor.worker.command`` (the runtime laid out for them, if they needed one);
    SupervisorError when that user could not start one."""
    try:
        accounts = WorkerAccounts.from_conf(conf)
    except WorkerUserError as exc:
        raise SupervisorError(str(exc)) from None
    # Workers pass through the local dir's parents to their own directories.
    prefix, problem = launcher.resolve_worker_command(conf, accounts.probe_identity(), local_dir.parent)
    if problem is not None:
        fix = ("set squall.local.dir to a directory outside any private home (every directory above it "
               "passable by other users)" if launcher.PASSAGE_PROBLEM in problem else
               "set supervisor.worker.runtime.dir to a directory root can write and every user can pass through")
        raise SupervisorError(f"workers run as {accounts.describe()}, but {problem}: {fix}; or set "
                              "supervisor.worker.user ('root' runs workers as root: SECURITY OFF)")
    conf["supervisor.worker.command"] = prefix
    return accounts


def worker_groups(conf: Mapping[str, Any], supervisor_id: str, logger: Any) -> cgroups.WorkerGroups | None:
    """The cgroups of this supervisor's workers where the host allows (None: their process
    trees are tracked instead); SupervisorError when ``supervisor.cgroup.dir`` names one that
    cannot be used."""
    setting = str(conf["supervisor.cgroup.dir"])
    try:
        parent = cgroups.parent_dir(setting, _read_text(cgroups.PROC_MOUNTINFO),
                                    _read_text(cgroups.PROC_CGROUP))
        groups = cgroups.WorkerGroups.open(parent, supervisor_id) if parent is not None else None
        if groups is not None:
            Containment(groups).try_join()
    except cgroups.CgroupError as exc:
        if setting != "auto":
            raise SupervisorError(f"supervisor.cgroup.dir {setting!r}: {exc}") from None
        logger.info("workers run without cgroups; their process trees are tracked instead", reason=str(exc))
        groups = None
    return groups
