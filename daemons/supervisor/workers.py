"""This host's workers as processes: records, launches, looks, signals, clean-ups.

The slot machines decide (``slot``); ``LocalWorkers`` carries out what touches processes and
the workers' files. Each launched worker is recorded in ``supervisor-state.json`` (pid,
process start time, the uid it runs as) so that a restarted supervisor adopts it. A look at
a worker (``view``) covers every process it started (``containment``): whether its own
process lives, whether others it left behind do, and their memory together. A worker is
cleaned up only when all of them are gone: its log is kept under ``<log dir>/workers``, its
directory and cgroup removed.
"""
from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from squall.daemons import local_state
from squall.daemons.supervisor.containment import Containment, Endpoint
from squall.daemons.supervisor.processes import (
    WorkerProc,
    parse_records,
    process_create_time,
    save_records,
    signal_worker,
    worker_alive,
)
from squall.daemons.supervisor.tcp_table import SocketsTo
from squall.daemons.timers import Clock, sleep

ARCHIVED_LOGS_KEPT = 100  # logs of cleaned-up workers kept under <log dir>/workers
# worker.out holds what a worker prints before its own rotating log is set up; if a worker
# writes there anyway (output from before that, a child process), it is emptied past this.
EARLY_OUTPUT_MAX_BYTES = 1 << 20
GONE_AFTER_SIGKILL_SECS = 5.0


@dataclass(frozen=True)
class WorkerView:
    """One look at a worker's processes."""

    alive: bool  # its own process
    leftovers: bool  # processes it started, other than itself
    memory: int | None  # bytes, all of them together
    oom_killed: bool  # the kernel ended it at its memory limit
    exit_code: int | None = None  # its own process's, when it ended and this supervisor launched it
    zk_connections: int | None = None  # TCP connections to ZooKeeper, all of them together


class LocalWorkers:
    """The workers this supervisor owns (``records``) and the processes it launched."""

    def __init__(self, layout: local_state.LocalLayout, log_dir: Path, state_path: Path, clock: Clock,
                 containment: Containment, counts: Any, logger: Any,
                 zk_endpoints: frozenset[Endpoint] = frozenset()) -> None:
        self.layout = layout
        # A worker's connections to ZooKeeper's addresses are counted (none given: not counted).
        self.zk_sockets = SocketsTo(zk_endpoints, clock.monotonic)
        self.log_dir = log_dir
        self.state_path = state_path
        self.clock = clock
        self.containment = containment
        self.counts = counts  # the supervisor's metric counters
        self.log = logger
        self.records: dict[str, WorkerProc] = {}  # by worker id: every worker we still own
        self.children: dict[str, subprocess.Popen[bytes]] = {}  # launched by this process
        self._exits_logged: set[str] = set()
        # Cleaned up while their process had not yet ended (a forced clean-up): at most one per
        # launch, each dropped once reaped.
        self._unreaped: list[subprocess.Popen[bytes]] = []
        self._warned: set[Any] = set()

    # -- the records file -----------------------------------------------------------------
    def load(self) -> dict[str, WorkerProc]:
        try:
            raw = self.state_path.read_bytes()
        except FileNotFoundError:
            return {}
        try:
            records, problems = parse_records(raw)
        except ValueError as exc:
            bad = self.state_path.with_name(f"{self.state_path.name}.corrupt-{int(self.clock.time())}")
            os.replace(self.state_path, bad)
            self.log.error("local state file is malformed; set aside (unknown workers will be killed)",
                           path=str(self.state_path), moved_to=str(bad), error=str(exc))
            return {}
        for problem in problems:
            self.log.warning("malformed worker record skipped", path=str(self.state_path), error=problem)
        return records

    def save(self, supervisor_id: str) -> None:
        try:
            save_records(self.state_path, supervisor_id, self.records)
        except OSError as exc:
            self.log.error("cannot write the local state file", path=str(self.state_path), error=str(exc))

    # -- launching and looking ----------------------------------------------------------------
    def add(self, worker_id: str, port: int, topology_id: str, executors: Any, digest: str,
            child: subprocess.Popen[bytes], uid: int | None) -> WorkerProc:
        """Record a worker just launched."""
        self.children[worker_id] = child
        self.counts["launches"] += 1
        rec = WorkerProc(worker_id, port, topology_id, [[s, e] for s, e in sorted(executors)], digest,
                         child.pid, process_create_time(child.pid), self.clock.time(), uid)
        self.records[worker_id] = rec
        return rec

    def view(self, worker_id: str | None) -> WorkerView:
        rec = self.records.get(worker_id) if worker_id else None
        if rec is None:
            return WorkerView(False, False, None, False)
        procs = self.containment.processes(rec)
        alive = worker_alive(rec.pid, rec.create_time, rec.worker_id)
        child = self.children.get(rec.worker_id)
        return WorkerView(alive, self.containment.leftovers(rec, procs),
                          self.containment.memory(rec, procs) if procs else None,
                          not alive and self.containment.oom_killed(rec.worker_id),
                          None if alive or child is None else child.poll(),
                          self.zk_sockets.count(p.pid for p in procs) if procs and self.zk_sockets.remotes else None)

    def reap(self, own: Callable[[], Collection[int]] = frozenset) -> None:
        """Collect exit codes of the workers we launched, and what the supervisor adopted
        (see containment), so nothing lingers as a zombie. ``own()``: pids of the other
        processes the supervisor runs (environment builds), left alone."""
        for worker_id, child in list(self.children.items()):
            code = child.poll()
            if code is None or worker_id in self._exits_logged:
                continue
            self._exits_logged.add(worker_id)
            rec = self.records.get(worker_id)
            fields = dict(worker=worker_id, pid=child.pid, exit_code=code,
                          port=rec.port if rec else None, topology=rec.topology_id if rec else None)
            if code == 0:
                self.log.info("worker exited", **fields)
            else:
                self.log.warning("worker exited", **fields)
        self._unreaped = [child for child in self._unreaped if child.poll() is None]
        launched = {child.pid for child in [*self.children.values(), *self._unreaped]}
        for stray in self.containment.adopt(self.records, launched, own):
            self.log.warning("killed a process that left its worker and belongs to none here", pid=stray.pid,
                             command=stray.command)

    # -- signals ----------------------------------------------------------------------------
    def signal(self, worker_id: str, force: bool, port: int, reason: str) -> None:
        """SIGTERM the worker (its process group), or SIGKILL every process it has."""
        rec = self.records.get(worker_id)
        if rec is None:
            return
        if force:
            count = self.containment.kill(rec)
            sent = count > 0
        else:
            sent = signal_worker(rec.pid, rec.create_time, rec.worker_id, signal.SIGTERM)
            count = 1 if sent else 0
        name = "SIGKILL" if force else "SIGTERM"
        if sent:
            self.counts[f"kill:{name}"] += 1
        self.log.info("worker signalled", port=port, topology=rec.topology_id, worker=rec.worker_id,
                      pid=rec.pid, signal=name, sent=sent, processes=count, reason=reason)

    def gone(self, rec: WorkerProc) -> bool:
        """Whether the worker and everything it started have ended."""
        return not worker_alive(rec.pid, rec.create_time, rec.worker_id) and not self.containment.processes(rec)

    def kill_now(self, rec: WorkerProc, grace: float) -> None:
        """SIGTERM, wait ``grace``, SIGKILL everything: for start-up and exit, not the loop."""
        signal_worker(rec.pid, rec.create_time, rec.worker_id, signal.SIGTERM)
        if not self._wait_gone(rec, grace):
            self.log.warning("worker did not stop in time: SIGKILL", worker=rec.worker_id, pid=rec.pid)
            self.containment.kill(rec)
            signal_worker(rec.pid, rec.create_time, rec.worker_id, signal.SIGKILL)
            self._wait_gone(rec, GONE_AFTER_SIGKILL_SECS)

    def _wait_gone(self, rec: WorkerProc, secs: float) -> bool:
        """Wait at most ``secs`` for the worker's processes to end; True once they have."""
        deadline = self.clock.monotonic() + secs
        while not self.gone(rec):
            if self.clock.monotonic() >= deadline:
                return False
            self.reap()
            sleep(0.05)
        return True

    def stop_all(self, grace: float) -> None:
        """Stop every worker (``--kill-workers-on-exit``) and clean them up."""
        for rec in list(self.records.values()):
            signal_worker(rec.pid, rec.create_time, rec.worker_id, signal.SIGTERM)
        # One shutdown sleep for all of them, not one each: they were all told at once.
        deadline = self.clock.monotonic() + grace
        for rec in list(self.records.values()):
            self.kill_now(rec, max(0.0, deadline - self.clock.monotonic()))
            self.log.info("worker stopped", port=rec.port, topology=rec.topology_id, worker=rec.worker_id)
            self.cleanup(rec.worker_id, "supervisor exiting")

    def kill_orphans(self, records: Mapping[str, WorkerProc], grace: float) -> None:
        """Worker dirs and cgroups without a record (a crash between launch and record, or a
        lost state file): kill what still runs there, then remove them."""
        names = {p.name for p in self.layout.workers_dir.iterdir() if p.is_dir()}
        if self.containment.groups is not None:
            names |= set(self.containment.groups.leftover_groups())
        for name in sorted(names - set(records)):
            if not local_state.valid_id(name):
                continue
            pid = local_state.read_pid(self.layout, name)
            orphan = WorkerProc(name, 0, "unrecorded", [], "", pid, None, 0.0)
            if not self.gone(orphan):
                self.log.warning("killing unrecorded worker", worker=name, pid=pid)
                self.kill_now(orphan, grace)
            self._remove(orphan)

    # -- cleaning up ------------------------------------------------------------------------
    def cleanup(self, worker_id: str, reason: str) -> WorkerProc | None:
        rec = self.records.pop(worker_id, None)
        child = self.children.pop(worker_id, None)
        if child is not None and child.poll() is None:
            self._unreaped.append(child)  # collected by reap() once it has ended
        self._exits_logged.discard(worker_id)
        self._warned = {k for k in self._warned if worker_id not in k}
        self._remove(rec or WorkerProc(worker_id, 0, "unrecorded", [], "", None, None, 0.0))
        self.log.info("worker cleaned up", worker=worker_id, reason=reason,
                      port=rec.port if rec else None, topology=rec.topology_id if rec else None)
        return rec

    def _remove(self, rec: WorkerProc) -> None:
        self._archive_log(self.layout.worker_log(rec.worker_id), rec, "")
        self._archive_log(self.layout.worker_early_output(rec.worker_id), rec, "-early")
        shutil.rmtree(self.layout.worker_dir(rec.worker_id), ignore_errors=True)
        if not self.containment.release(rec.worker_id):
            self.log.warning("worker's cgroup still holds processes; kept", worker=rec.worker_id)

    def _archive_log(self, path: Path, rec: WorkerProc, suffix: str) -> None:
        """Keep a cleaned-up worker's log (why did it die?) under ``<log dir>/workers``, the
        supervisor's alone (0700, the logs 0600: one topology's output is not another's to
        read); a link or other non-file a worker left in its place is not followed."""
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return
        if not stat.S_ISREG(info.st_mode) or info.st_size == 0:
            return
        dest_dir = self.log_dir / "workers"
        try:
            local_state.private_dir(self.log_dir)
            local_state.private_dir(dest_dir)
            dest = dest_dir / f"{rec.topology_id}-{rec.port}-{rec.worker_id}{suffix}.log"
            shutil.move(str(path), dest)
            if info.st_uid != os.geteuid():  # a worker's own user wrote it: the supervisor's now
                os.chown(dest, os.geteuid(), os.getegid())
            os.chmod(dest, 0o600)
            kept = sorted(dest_dir.glob("*.log"), key=lambda p: p.stat().st_mtime)
            for old in kept[:-ARCHIVED_LOGS_KEPT]:
                old.unlink(missing_ok=True)
        except OSError as exc:
            self.log.warning("cannot keep worker log", worker=rec.worker_id, error=str(exc))

    def bound_early_output(self) -> None:
        for rec in self.records.values():
            path = self.layout.worker_early_output(rec.worker_id)
            try:
                emptied = local_state.truncate_if_over(path, EARLY_OUTPUT_MAX_BYTES)
            except OSError as exc:
                key = ("early", rec.worker_id)
                if key not in self._warned:
                    self._warned.add(key)
                    self.log.warning("cannot bound worker output", path=str(path), error=str(exc))
                continue
            if emptied:
                self.log.warning("worker output outside its log passed its bound; emptied", path=str(path),
                                 worker=rec.worker_id, max_bytes=EARLY_OUTPUT_MAX_BYTES)
