"""Everything a worker starts, kept together: found, measured, and ended as one.

With cgroups (``cgroups.WorkerGroups``) a worker's processes are its group's: a child that
forks, calls setsid and outlives the worker is still in it. Without, they are the worker's
process tree, and the supervisor is the child subreaper of its workers (Linux
``PR_SET_CHILD_SUBREAPER``): a process whose parent dies is handed to the supervisor, not to
init; the supervisor traces it back to its worker (it saw it in that worker's tree, or it
carries ``SQUALL_WORKER_ID`` in its environment) and it counts and ends with that worker.
An adopted process traced to no worker here is ended at once. Either way the supervisor
reaps what it adopts, so nothing lingers as a zombie.

A worker's memory is its group's ``memory.current`` where the memory controller works (the
kernel then enforces ``worker.memory.max.mb`` itself), otherwise the resident set sizes of
its processes added up. Its connections to ZooKeeper are the TCP sockets of its processes
whose far end is one of ZooKeeper's addresses (``zookeeper_endpoints``): ZooKeeper takes a
bounded number from one client address, which a worker must not hold for the daemons and
the other topologies of its host.
"""
from __future__ import annotations

import ctypes
import errno
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import psutil

from squall.daemons.supervisor.cgroups import CgroupError, WorkerGroups
from squall.daemons.supervisor.processes import WorkerProc, worker_alive
from squall.daemons.supervisor.tcp_table import Endpoint
from squall.daemons.supervisor.worker_user import WorkerIdentity

WORKER_ID_ENV = "SQUALL_WORKER_ID"
PR_SET_CHILD_SUBREAPER = 36

_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None

ProcKey = tuple[int, float]  # (pid, start time): a pid alone may be reused


def zookeeper_endpoints(conf: Mapping[str, Any]) -> frozenset[Endpoint]:
    """The addresses of ``zookeeper.servers`` (each ``host`` or ``host:port``), resolved now;
    a host that does not resolve counts for nothing (a worker cannot reach it either)."""
    default = int(conf["zookeeper.port"])
    out: set[Endpoint] = set()
    for entry in conf["zookeeper.servers"]:
        host, _, port = str(entry).rpartition(":") if str(entry).count(":") == 1 else (str(entry), "", "")
        try:
            infos = socket.getaddrinfo(host, int(port) if port else default, type=socket.SOCK_STREAM)
        except (OSError, ValueError):
            continue
        out.update((str(info[4][0]), int(info[4][1])) for info in infos)
    return frozenset(out)


def become_subreaper() -> bool:
    """Make this process the child subreaper of its descendants (Linux); whether it is."""
    return _LIBC is not None and _LIBC.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def _key(proc: psutil.Process) -> ProcKey:
    return proc.pid, proc.create_time()


def _living(procs: Collection[psutil.Process]) -> list[psutil.Process]:
    out = []
    for proc in procs:
        try:
            if proc.status() != psutil.STATUS_ZOMBIE:
                out.append(proc)
        except psutil.Error:
            pass
    return out


@dataclass
class Stray:
    """An adopted process the supervisor could not trace to a worker, and ended."""

    pid: int
    command: str


@dataclass
class Containment:
    """Where the processes of this supervisor's workers are (see the module doc)."""

    groups: WorkerGroups | None = None
    _seen: dict[ProcKey, str] = field(default_factory=dict)  # every process seen in a worker's tree
    _adopted: dict[str, set[ProcKey]] = field(default_factory=dict)  # worker id -> orphans handed to us

    @property
    def kernel_memory(self) -> bool:
        """Whether the kernel enforces the workers' memory limit (their groups' memory.max)."""
        return self.groups is not None and self.groups.memory

    @property
    def kind(self) -> str:
        if self.groups is None:
            return "process tree"
        return "cgroup with memory limit" if self.groups.memory else "cgroup"

    # -- launching ------------------------------------------------------------------------
    def prepare(self, worker_id: str, memory_max: int | None, who: WorkerIdentity | None) \
            -> tuple[Callable[[], None], int | None]:
        """What the worker's process runs between fork and exec (join the worker's group,
        then become ``who``), and an fd the caller closes after the launch."""
        fd = None
        if self.groups is not None:
            self.groups.create(worker_id, memory_max)
            fd = self.groups.join_fd(worker_id)

        def setup() -> None:  # in the child: system calls only
            if fd is not None:
                os.write(fd, b"0")  # 0: the writing process
            if who is not None:
                os.setgroups([])
                os.setresgid(who.gid, who.gid, who.gid)
                os.setresuid(who.uid, who.uid, who.uid)

        return setup, fd

    def try_join(self) -> None:
        """Start a trivial process in a group of its own, as a worker would be; CgroupError
        when it cannot join (then no worker could)."""
        name = f"probe-{os.getpid()}"
        setup, fd = self.prepare(name, None, None)
        try:
            code = subprocess.run([sys.executable, "-c", "pass"], preexec_fn=setup, timeout=60,
                                  stdin=subprocess.DEVNULL, capture_output=True).returncode
        except (OSError, subprocess.SubprocessError) as exc:
            raise CgroupError(errno.EPERM, f"a process cannot join a group here: {exc}") from None
        finally:
            if fd is not None:
                os.close(fd)
            assert self.groups is not None
            self.groups.remove(name)
        if code != 0:
            raise CgroupError(errno.EPERM, f"a process in a group here exited with {code}")

    # -- looking --------------------------------------------------------------------------
    def processes(self, rec: WorkerProc) -> list[psutil.Process]:
        """Every living process of the worker, its own included while it lives."""
        if self.groups is not None:
            procs = []
            for pid in self.groups.pids(rec.worker_id):
                try:
                    procs.append(psutil.Process(pid))
                except psutil.Error:
                    pass
            return _living(procs)
        found: dict[int, psutil.Process] = {}
        roots = []
        if worker_alive(rec.pid, rec.create_time, rec.worker_id):
            try:
                roots.append(psutil.Process(rec.pid))
            except psutil.Error:
                pass
        else:
            # Its orphans were handed to us when it died, which may be after this tick's
            # adopt(): trace them now, or its end would be judged without them.
            self._adopt_orphans_of(rec)
        for pid, created in self._adopted.get(rec.worker_id, set()):
            try:
                proc = psutil.Process(pid)
                if abs(proc.create_time() - created) < 1.0:
                    roots.append(proc)
            except psutil.Error:
                pass
        for root in roots:
            found[root.pid] = root
            try:
                for child in root.children(recursive=True):
                    found[child.pid] = child
            except psutil.Error:
                pass
        living = _living(list(found.values()))
        for proc in living:
            try:
                self._seen[_key(proc)] = rec.worker_id
            except psutil.Error:
                pass
        return living

    def leftovers(self, rec: WorkerProc, procs: list[psutil.Process]) -> bool:
        """Whether processes of the worker other than its own one run."""
        return any(p.pid != rec.pid for p in procs)

    def memory(self, rec: WorkerProc, procs: list[psutil.Process]) -> int:
        """Bytes the worker's processes use together."""
        if self.groups is not None and self.groups.memory:
            current = self.groups.memory_current(rec.worker_id)
            if current is not None:
                return current
        total = 0
        for proc in procs:
            try:
                total += proc.memory_info().rss
            except psutil.Error:
                pass
        return total

    def oom_killed(self, worker_id: str) -> bool:
        return self.groups is not None and self.groups.oom_kills(worker_id) > 0

    # -- ending ---------------------------------------------------------------------------
    def kill(self, rec: WorkerProc) -> int:
        """SIGKILL every process of the worker; how many there were."""
        if self.groups is not None:
            return self.groups.kill(rec.worker_id)
        procs = self.processes(rec)
        for proc in procs:
            try:
                proc.send_signal(signal.SIGKILL)
            except psutil.Error:
                pass
        return len(procs)

    def release(self, worker_id: str) -> bool:
        """Forget a cleaned-up worker; False while its group still holds processes."""
        self._adopted.pop(worker_id, None)
        self._seen = {k: w for k, w in self._seen.items() if w != worker_id}
        return self.groups.remove(worker_id) if self.groups is not None else True

    # -- what the supervisor adopts -------------------------------------------------------
    def adopt(self, workers: Mapping[str, WorkerProc], launched: Collection[int],
              own: Callable[[], Collection[int]] = frozenset) -> list[Stray]:
        """Children of the supervisor that it did not launch: reap the dead, trace the living
        to their workers, end the rest. ``launched``: pids of workers it launched (their
        ends are collected by the launcher); ``own()``: pids of other children it runs itself
        (environment builds), asked after the children are listed."""
        strays = []
        try:
            children = psutil.Process().children()
        except psutil.Error:
            return []
        launched = {*launched, *own()}
        for child in children:
            if child.pid in launched:
                continue
            try:
                if child.status() == psutil.STATUS_ZOMBIE:
                    os.waitpid(child.pid, os.WNOHANG)
                    continue
                owner = self._owner(child)
                if owner is not None and owner in workers:
                    if self.groups is None:
                        self._adopted.setdefault(owner, set()).add(_key(child))
                    continue
                command = " ".join(child.cmdline())[:200]
                for proc in [*child.children(recursive=True), child]:
                    proc.send_signal(signal.SIGKILL)
                strays.append(Stray(child.pid, command))
            except (psutil.Error, ChildProcessError):
                continue
        return strays

    def _adopt_orphans_of(self, rec: WorkerProc) -> None:
        """Record the supervisor's children that trace back to ``rec`` as adopted (not its
        own process: a dead worker not yet reaped is a child of ours too)."""
        try:
            children = psutil.Process().children()
        except psutil.Error:
            return
        for child in children:
            try:
                if child.pid != rec.pid and self._owner(child) == rec.worker_id:
                    self._adopted.setdefault(rec.worker_id, set()).add(_key(child))
            except psutil.Error:
                continue

    def _owner(self, proc: psutil.Process) -> str | None:
        """The worker an adopted process belongs to, or None."""
        if self.groups is not None:
            return _group_worker(proc.pid, self.groups.base.name)
        owner = self._seen.get(_key(proc))
        if owner is not None:
            return owner
        try:
            return proc.environ().get(WORKER_ID_ENV)
        except psutil.Error:
            return None


def _group_worker(pid: int, base_name: str) -> str | None:
    """The worker id of the group ``pid`` is in, when that group is one of ours."""
    try:
        with open(f"/proc/{pid}/cgroup", encoding="ascii") as fh:
            text = fh.read()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("0::"):
            parts = line[3:].strip().split("/")
            if len(parts) >= 2 and parts[-2] == base_name:
                return parts[-1]
    return None


def describe(containment: Containment) -> dict[str, Any]:
    """Log fields: how workers are contained here."""
    out: dict[str, Any] = {"containment": containment.kind}
    if containment.groups is not None:
        out["cgroup"] = str(containment.groups.base)
    return out
