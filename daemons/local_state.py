"""The local state a supervisor shares with its workers (Storm's ``LocalState``).

Both sides use this module, never their own copies: the directory layout under
``squall.local.dir``, atomic writes, the worker's pid file and its local heartbeat (the
record the supervisor's slot machine reads to decide whether a worker lives)::

    <local dir>/
      supervisor-id, supervisor-conf.yaml, supervisor-state.json, supervisor.lock
      topologies/<topology id>/       extracted code bundles (code/, topology.bin, conf.json)
      workers/<worker id>/            pid, heartbeat.json, stats.json (executor stats for nimbus,
                                      sent on in the supervisor's reports), metrics.json,
                                      worker.log (rotated by the
                                      worker: worker.log.1 ...), worker.out (output before the
                                      worker's log is set up, captured by the supervisor),
                                      events.log (sampled tuples, rotated: events.log.1),
                                      profile-<id>.txt (profiles an operator asked for);
                                      from the supervisor at each launch: credentials.json and
                                      assignment.json (0600, see credentials and launch_assignment)
      logs/                           daemon logs; logs/workers/ keeps cleaned-up workers' logs
"""
from __future__ import annotations

import json
import os
import stat
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from squall.runtime.stats import WorkerStats

ExecutorId = tuple[int, int]
# A worker's exit code when another process holds its port (it could not bind it); its
# supervisor then probes the port and, when it is held, takes the slot out of use.
EXIT_PORT_IN_USE = 3


def write_atomic(path: Path, data: bytes, sync: bool = True) -> None:
    """Write ``data`` through a temporary file in the same directory, fsync (unless ``sync``
    is false: for data worth nothing after a crash), rename: readers see the old content or
    the new, never half of it. The file is 0600 (mkstemp's: a fresh name, O_EXCL), and a
    symlink or file planted at ``path`` is replaced, never written through."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            if sync:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_regular(path: Path, limit: int, private: bool = False) -> bytes:
    """The content of a regular file (no symlink followed, no FIFO waited on) of at most
    ``limit`` bytes; ``private``: it must also be the caller's own with no group or other
    bits. ValueError (or OSError, FileNotFoundError when absent) naming the problem. What a
    supervisor reads from a worker's directory goes through here: the worker owns that
    directory and may have planted anything in it."""
    # O_NONBLOCK: a FIFO planted there must not block the open (it is refused below).
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"{path} is not a regular file")
        if private and (info.st_uid != os.getuid() or info.st_mode & 0o077):
            raise ValueError(f"{path} must be owned by uid {os.getuid()} with mode 0600")
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"{path} is larger than {limit} bytes")
    return data


def read_private(path: Path, limit: int) -> bytes:
    """The content of a file only its owner may read, which must be the caller (no symlink,
    uid ours, no group or other bits) and at most ``limit`` bytes; ValueError (or OSError)
    naming the problem."""
    return read_regular(path, limit, private=True)


def set_tree_modes(root: Path, directories: int, files: int, executables: int) -> None:
    """Give ``root`` and every directory under it ``directories``, and every regular file
    ``files`` (``executables`` when its owner may run it). Symlinks are left alone (never
    followed)."""
    for dirpath, _dirnames, filenames in os.walk(root):
        os.chmod(dirpath, directories)
        for name in filenames:
            path = os.path.join(dirpath, name)
            mode = os.lstat(path).st_mode
            if stat.S_ISREG(mode):
                os.chmod(path, executables if mode & stat.S_IXUSR else files)


def tree_bytes(roots: Iterable[Path], limit: int) -> int:
    """Bytes the regular files under ``roots`` take (links not followed, missing roots 0),
    counted until the total passes ``limit``."""
    total = 0
    for root in roots:
        for dirpath, _dirnames, filenames in os.walk(root):
            for name in filenames:
                try:
                    info = os.lstat(os.path.join(dirpath, name))
                except OSError:  # gone while counting
                    continue
                if stat.S_ISREG(info.st_mode):
                    total += info.st_size
            if total > limit:
                return total
    return total


def make_private(root: Path) -> None:
    """Make ``root`` and everything under it readable by its owner only: directories 0700,
    files 0600 (0700 when executable)."""
    set_tree_modes(root, 0o700, 0o600, 0o700)


def private_dir(path: Path) -> Path:
    """Create ``path`` (and missing parents) if needed and make it 0700."""
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def valid_id(value: str) -> bool:
    """Usable as a node, worker or file name: printable, no whitespace, no path parts."""
    return bool(value) and "/" not in value and value not in (".", "..") and value.isprintable() \
        and not any(c.isspace() for c in value)


@dataclass(frozen=True)
class LocalLayout:
    """Paths under one ``squall.local.dir``."""

    root: Path

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any]) -> LocalLayout:
        return cls(Path(str(conf["squall.local.dir"])).expanduser().absolute())

    # supervisor files
    @property
    def supervisor_id_file(self) -> Path:
        return self.root / "supervisor-id"

    @property
    def supervisor_conf_file(self) -> Path:
        """The supervisor's effective config; workers read it through ``SQUALL_CONF``."""
        return self.root / "supervisor-conf.yaml"

    @property
    def supervisor_state_file(self) -> Path:
        return self.root / "supervisor-state.json"

    @property
    def supervisor_lock_file(self) -> Path:
        return self.root / "supervisor.lock"

    # code and workers
    @property
    def topologies_dir(self) -> Path:
        return self.root / "topologies"

    def topology_dir(self, topology_id: str) -> Path:
        return self.topologies_dir / topology_id

    @property
    def venvs_dir(self) -> Path:
        """Topologies' Python environments (supervisor.environments)."""
        return self.root / "venvs"

    @property
    def workers_dir(self) -> Path:
        return self.root / "workers"

    def worker_dir(self, worker_id: str) -> Path:
        return self.workers_dir / worker_id

    def pid_file(self, worker_id: str) -> Path:
        return self.worker_dir(worker_id) / "pid"

    def heartbeat_file(self, worker_id: str) -> Path:
        return self.worker_dir(worker_id) / "heartbeat.json"

    def metrics_file(self, worker_id: str) -> Path:
        return self.worker_dir(worker_id) / "metrics.json"

    def stats_file(self, worker_id: str) -> Path:
        return self.worker_dir(worker_id) / "stats.json"

    def launch_assignment_file(self, worker_id: str) -> Path:
        """The assignment the supervisor launched the worker for (see launch_assignment)."""
        return self.worker_dir(worker_id) / "assignment.json"

    def worker_log(self, worker_id: str) -> Path:
        return self.worker_dir(worker_id) / "worker.log"

    def worker_early_output(self, worker_id: str) -> Path:
        return self.worker_dir(worker_id) / "worker.out"

    def events_log(self, worker_id: str) -> Path:
        """Tuples sampled by ``squall debug`` (JSON lines; rotated once: events.log.1)."""
        return self.worker_dir(worker_id) / "events.log"

    def profile_file(self, worker_id: str, profile_id: str) -> Path:
        """A profile's result; ``profile_id`` is checked by the caller (operator_requests)."""
        return self.worker_dir(worker_id) / f"profile-{profile_id}.txt"


def truncate_if_over(path: Path, limit: int) -> bool:
    """Empty ``path`` when it has grown past ``limit`` bytes (its writers open it with
    O_APPEND, so they go on at the new end); whether it was emptied. Only a regular file
    is emptied: a link planted in its place is not followed."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        return False
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(f"{path} is not a regular file")
        if info.st_size <= limit:
            return False
        os.ftruncate(fd, 0)
        return True
    finally:
        os.close(fd)


# --- the worker's pid file -----------------------------------------------------------------

def write_pid(layout: LocalLayout, worker_id: str, pid: int) -> None:
    write_atomic(layout.pid_file(worker_id), str(pid).encode())


def read_pid(layout: LocalLayout, worker_id: str) -> int | None:
    """The pid a worker wrote, or None when absent or unreadable."""
    try:
        return int(read_regular(layout.pid_file(worker_id), 64).decode("ascii").strip())
    except (OSError, ValueError):
        return None


# --- the worker's local heartbeat ------------------------------------------------------------

HEARTBEAT_MAX_BYTES = 1 << 20  # a beat names the worker's executors: far less than this

@dataclass(frozen=True)
class LocalHeartbeat:
    """What a worker tells its supervisor it is alive with, and which executors it runs."""

    time: float
    topology_id: str
    port: int
    worker_id: str
    pid: int
    executors: frozenset[ExecutorId] | None
    ready: bool | None = None  # every spout opened and bolt prepared; None: not said

    def to_json(self) -> bytes:
        executors = None if self.executors is None else [[s, e] for s, e in sorted(self.executors)]
        beat = {"time": self.time, "topology_id": self.topology_id, "port": self.port,
                "worker_id": self.worker_id, "pid": self.pid, "executors": executors}
        if self.ready is not None:
            beat["ready"] = self.ready
        return json.dumps(beat).encode()


def _int_pair(row: Any) -> ExecutorId:
    if (not isinstance(row, list) or len(row) != 2
            or not all(isinstance(x, int) and not isinstance(x, bool) for x in row)):
        raise ValueError(f"executor {row!r} is not [start, end]")
    return (row[0], row[1])


def executor_rows(rows: Any) -> list[ExecutorId]:
    """A JSON list of ``[start, end]`` pairs, checked; ValueError naming the bad row."""
    if not isinstance(rows, list):
        raise ValueError(f"executors {rows!r} is not a list")
    return [_int_pair(row) for row in rows]


def parse_heartbeat(raw: bytes, worker_id: str) -> LocalHeartbeat:
    """A heartbeat file's content, checked; ValueError naming the problem."""
    try:
        beat = json.loads(raw)
    except RecursionError:  # a file of "[[[[..." written by user code
        raise ValueError("heartbeat is nested too deeply") from None
    if not isinstance(beat, dict):
        raise ValueError(f"expected a JSON object, got {type(beat).__name__}")
    t = beat.get("time")
    if isinstance(t, bool) or not isinstance(t, (int, float)):
        raise ValueError(f"field 'time' is {t!r}")
    if beat.get("worker_id", worker_id) != worker_id:
        raise ValueError(f"heartbeat names worker {beat.get('worker_id')!r}")
    raw_execs = beat.get("executors")
    executors = None if raw_execs is None else frozenset(executor_rows(raw_execs))
    port, pid = beat.get("port", 0), beat.get("pid", 0)
    ready = beat.get("ready")
    if ready is not None and not isinstance(ready, bool):
        raise ValueError(f"field 'ready' is {ready!r}")
    return LocalHeartbeat(float(t), str(beat.get("topology_id", "")),
                          port if isinstance(port, int) else 0, worker_id,
                          pid if isinstance(pid, int) else 0, executors, ready)


def write_heartbeat(layout: LocalLayout, beat: LocalHeartbeat) -> None:
    write_atomic(layout.heartbeat_file(beat.worker_id), beat.to_json())


def read_heartbeat(layout: LocalLayout, worker_id: str) -> LocalHeartbeat | None:
    """The worker's last heartbeat, None when there is none yet; ValueError (or OSError)
    when the file cannot be used."""
    try:
        raw = read_regular(layout.heartbeat_file(worker_id), HEARTBEAT_MAX_BYTES)
    except FileNotFoundError:
        return None
    return parse_heartbeat(raw, worker_id)


def remove_heartbeat(layout: LocalLayout, worker_id: str) -> None:
    layout.heartbeat_file(worker_id).unlink(missing_ok=True)


def heartbeat_of(now: float, topology_id: str, port: int, worker_id: str, pid: int,
                 executors: Iterable[ExecutorId], ready: bool | None = None) -> LocalHeartbeat:
    return LocalHeartbeat(now, topology_id, port, worker_id, pid, frozenset(executors), ready)


# --- the worker's metrics snapshot -------------------------------------------------------------

METRICS_MAX_BYTES = 4 << 20  # a snapshot larger than this is refused unread


def write_metrics(layout: LocalLayout, worker_id: str, data: bytes) -> None:
    """The worker's metrics snapshot (JSON); not synced: a lost one is replaced seconds later."""
    write_atomic(layout.metrics_file(worker_id), data, sync=False)


def remove_metrics(layout: LocalLayout, worker_id: str) -> None:
    layout.metrics_file(worker_id).unlink(missing_ok=True)


def read_metrics(layout: LocalLayout, worker_id: str) -> Any:
    """The worker's last metrics snapshot (parsed JSON), None when there is none yet;
    ValueError (or OSError) when the file cannot be used."""
    try:
        raw = read_regular(layout.metrics_file(worker_id), METRICS_MAX_BYTES)
    except FileNotFoundError:
        return None
    return json.loads(raw)


# --- the worker's executor stats (for nimbus, through the supervisor's report) ------------------

STATS_MAX_BYTES = 512_000  # a stats file larger than this is refused unread (workers write < 256 kB)


@dataclass(frozen=True)
class StatsFile:
    """What a worker adds to its beat in its supervisor's report: its uptime and its stats.
    The file is ``{"uptime": secs, "stats": WorkerStats wire form}``."""

    uptime: float
    stats: WorkerStats

    def to_json(self) -> bytes:
        return json.dumps({"uptime": self.uptime, "stats": self.stats.to_dict()}, separators=(",", ":")).encode()


def write_stats(layout: LocalLayout, worker_id: str, stats: StatsFile) -> None:
    """Not synced: stats lost in a crash are replaced seconds later."""
    write_atomic(layout.stats_file(worker_id), stats.to_json(), sync=False)


def read_stats(layout: LocalLayout, worker_id: str) -> StatsFile | None:
    """The worker's last stats, None when there are none yet; ValueError (or OSError) when
    the file cannot be used (its stats are read as ``WorkerStats.from_dict`` reads: only
    what has its documented shape)."""
    path = layout.stats_file(worker_id)
    try:
        raw = read_regular(path, STATS_MAX_BYTES)  # the worker's directory: nothing there is trusted
    except FileNotFoundError:
        return None
    try:
        obj = json.loads(raw)
    except RecursionError:
        raise ValueError(f"{path} is nested too deeply") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("stats"), dict):
        raise ValueError(f"{path} holds no stats object")
    uptime = obj.get("uptime")
    if isinstance(uptime, bool) or not isinstance(uptime, (int, float)):
        raise ValueError(f"{path}: uptime is {uptime!r}")
    return StatsFile(float(uptime), WorkerStats.from_dict(obj["stats"]))


def remove_stats(layout: LocalLayout, worker_id: str) -> None:
    layout.stats_file(worker_id).unlink(missing_ok=True)
