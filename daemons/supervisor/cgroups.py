"""One cgroup (v2) per worker: where the hierarchy is, joining it, its processes, memory, kill.

``supervisor.cgroup.dir`` picks the parent: ``auto`` is the supervisor's own cgroup in the
host's cgroup v2 hierarchy (``/sys/fs/cgroup``, or ``/sys/fs/cgroup/unified`` on a host that
keeps its controllers in v1), a path names one, ``off`` uses none. Under the parent the
supervisor makes ``squall-<supervisor id>/<worker id>``; a process started there stays
there whatever it does (fork, setsid, exit of its parent), so the group is the worker.
When the memory controller is available below the parent, ``memory.max`` (with
``memory.oom.group``: the whole worker goes together) carries ``worker.memory.max.mb``;
otherwise the supervisor measures the group's processes itself.
"""
from __future__ import annotations

import errno
import os
import signal
from pathlib import Path

from squall.daemons.timers import SYSTEM_CLOCK, Clock, sleep
from squall.errors import SquallError

PROC_MOUNTINFO = "/proc/self/mountinfo"
PROC_CGROUP = "/proc/self/cgroup"


class CgroupError(SquallError, OSError):
    """A cgroup could not be made or used; the message says which and why."""


def cgroup2_mount(mountinfo: str) -> str | None:
    """Where the cgroup v2 hierarchy is mounted, from ``/proc/self/mountinfo``'s text."""
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        fields = left.split()
        if sep and right.split()[:1] == ["cgroup2"] and len(fields) >= 5:
            return fields[4].replace("\\040", " ")
    return None


def own_cgroup(proc_cgroup: str) -> str | None:
    """This process's cgroup v2 path (``0::/path``) from ``/proc/self/cgroup``'s text."""
    for line in proc_cgroup.splitlines():
        if line.startswith("0::"):
            return line[3:].strip() or "/"
    return None


def parent_dir(setting: str, mountinfo: str, proc_cgroup: str) -> Path | None:
    """The directory workers' cgroups go under for ``supervisor.cgroup.dir``; None: none."""
    if setting == "off":
        return None
    if setting != "auto":
        return Path(setting)
    mount, own = cgroup2_mount(mountinfo), own_cgroup(proc_cgroup)
    if mount is None or own is None:
        return None
    return Path(mount) / own.lstrip("/")


def _read(path: Path) -> str:
    return path.read_text(encoding="ascii", errors="replace")


class WorkerGroups:
    """The cgroups of one supervisor's workers, under ``base`` (``<parent>/squall-<id>``)."""

    def __init__(self, base: Path, memory: bool) -> None:
        self.base = base
        self.memory = memory  # memory.max works in the workers' groups

    @classmethod
    def open(cls, parent: Path, supervisor_id: str) -> WorkerGroups:
        """Make (or reuse) this supervisor's directory under ``parent``; CgroupError when the
        hierarchy is not writable here (then workers run without cgroups)."""
        base = parent / f"squall-{supervisor_id}"
        try:
            if not (parent / "cgroup.procs").is_file():
                raise CgroupError(errno.ENOENT, f"{parent} is not a cgroup v2 directory")
            base.mkdir(exist_ok=True)
        except OSError as exc:
            raise CgroupError(exc.errno or errno.EIO, f"cannot make {base}: {exc.strerror or exc}") from None
        return cls(base, _enable_memory(parent, base))

    def path(self, worker_id: str) -> Path:
        return self.base / worker_id

    def create(self, worker_id: str, memory_max: int | None) -> Path:
        """The worker's group, made empty; its memory limit set where that works."""
        path = self.path(worker_id)
        path.mkdir(exist_ok=True)
        if self.memory and memory_max is not None:
            (path / "memory.max").write_text(str(memory_max), encoding="ascii")
            (path / "memory.oom.group").write_text("1", encoding="ascii")
            if (path / "memory.swap.max").exists():  # swapping would only hide the excess
                (path / "memory.swap.max").write_text("0", encoding="ascii")
        return path

    def join_fd(self, worker_id: str) -> int:
        """An fd on the group's ``cgroup.procs``: a child writes its pid there before it execs."""
        return os.open(self.path(worker_id) / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)

    def pids(self, worker_id: str) -> list[int]:
        """Every process in the worker's group (none when it has no group)."""
        try:
            return [int(p) for p in _read(self.path(worker_id) / "cgroup.procs").split()]
        except (OSError, ValueError):
            return []

    def memory_current(self, worker_id: str) -> int | None:
        if not self.memory:
            return None
        try:
            return int(_read(self.path(worker_id) / "memory.current").strip())
        except (OSError, ValueError):
            return None

    def oom_kills(self, worker_id: str) -> int:
        """How many of the group's processes the kernel killed at its memory limit."""
        if not self.memory:
            return 0
        try:
            for line in _read(self.path(worker_id) / "memory.events").splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def kill(self, worker_id: str) -> int:
        """SIGKILL every process in the group (``cgroup.kill`` where the kernel has it);
        how many were there."""
        pids = self.pids(worker_id)
        try:
            (self.path(worker_id) / "cgroup.kill").write_text("1", encoding="ascii")
            return len(pids)
        except OSError:
            pass
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        return len(pids)

    def remove(self, worker_id: str) -> bool:
        """Remove the worker's (empty) group; False while processes remain in it."""
        try:
            os.rmdir(self.path(worker_id))
            return True
        except FileNotFoundError:
            return True
        except OSError:
            return False

    def leftover_groups(self) -> list[str]:
        """Worker ids that still have a group here."""
        try:
            return sorted(p.name for p in self.base.iterdir() if p.is_dir())
        except OSError:
            return []

    def close(self) -> None:
        """Remove the groups no process is left in, and this supervisor's directory once
        empty (a worker left running keeps its group for the next supervisor to adopt)."""
        remove_tree(self.base)


def supervisor_base(local_dir: Path) -> Path | None:
    """Where a supervisor started from this process's cgroup with ``auto`` keeps its
    workers' groups (for harnesses that clean up after it); None when it has none."""
    try:
        supervisor_id = (local_dir / "supervisor-id").read_text(encoding="utf-8").strip()
        parent = parent_dir("auto", _read(Path(PROC_MOUNTINFO)), _read(Path(PROC_CGROUP)))
    except OSError:
        return None
    return parent / f"squall-{supervisor_id}" if parent is not None and supervisor_id else None


def end_tree(base: Path, timeout: float = 5.0, clock: Clock = SYSTEM_CLOCK) -> bool:
    """SIGKILL every process in the worker groups under ``base`` and remove them all;
    whether everything went within ``timeout`` seconds (by ``clock``)."""
    deadline = clock.monotonic() + timeout
    try:
        groups = [p for p in base.iterdir() if p.is_dir()]
    except OSError:
        return not base.exists()
    for group in groups:
        WorkerGroups(base, False).kill(group.name)
    while not remove_tree(base) and clock.monotonic() < deadline:
        sleep(0.05)
    return not base.exists()


def remove_tree(base: Path) -> bool:
    """Remove ``base`` and the worker groups in it that hold no process; whether all went."""
    try:
        children = [p for p in base.iterdir() if p.is_dir()]
    except FileNotFoundError:
        return True
    except OSError:
        return False
    for child in children:
        try:
            os.rmdir(child)
        except OSError:
            pass
    try:
        os.rmdir(base)
        return True
    except OSError:
        return False


def _enable_memory(parent: Path, base: Path) -> bool:
    """Make the memory controller available in the workers' groups, where the hierarchy
    lets this supervisor (the parent must offer it, and ``base`` holds no process)."""
    try:
        if "memory" not in _read(parent / "cgroup.controllers").split():
            return False
        if "memory" not in _read(parent / "cgroup.subtree_control").split():
            (parent / "cgroup.subtree_control").write_text("+memory", encoding="ascii")
        if "memory" not in _read(base / "cgroup.subtree_control").split():
            (base / "cgroup.subtree_control").write_text("+memory", encoding="ascii")
        return True
    except OSError:
        return False
