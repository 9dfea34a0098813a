"""``squall supervisor``: one per host; runs, watches, restarts and kills this node's workers.

The supervisor registers its slots (ports) in ZooKeeper, follows the assignments (a watch is
the fast path, a periodic re-read every ``supervisor.monitor.frequency.secs`` the safety net)
and keeps one :mod:`squall.daemons.slot` state machine per port. Each tick it observes every
port (the assignment for it, whether the code is on disk, the worker process and its local
heartbeat file), calls ``slot.step`` and carries out the returned actions:

* DownloadCode: fetch the bundle from nimbus over HTTP on a background thread, check its
  sha256 against the assignment's digest, extract it atomically (temp dir, then rename).
* LaunchWorker: start the worker's command-line main in its own session, output to
  ``workers/<id>/worker.log``, ``SQUALL_CONF`` pointing at this supervisor's effective config.
* KillWorker: SIGTERM, or SIGKILL once the slot says the shutdown sleep is over.
* CleanupWorker: keep the worker's log, remove its directory and local record.

Each launched worker is recorded in ``supervisor-state.json`` (pid and process start time) so
that a restarted supervisor adopts workers that are alive and still assigned
(``slot.recover``) and kills the others. Stopping the supervisor leaves workers running
(Storm's behaviour) unless ``--kill-workers-on-exit`` is given.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import click
import psutil
import structlog
import yaml

from squall import config as _config
from squall import logs
from squall.daemons import slot as _slot
from squall.daemons.state import Assignment, ClusterState, ClusterStateError, SupervisorInfo

log = structlog.get_logger("squall.supervisor")

ID_FILE = "supervisor-id"
CONF_FILE = "supervisor-conf.yaml"
STATE_FILE = "supervisor-state.json"
LOCK_FILE = "supervisor.lock"
STATE_VERSION = 1
BUNDLE_MEMBERS = ("code", "topology.bin", "conf.json")  # what a usable bundle must hold
DEFAULT_WORKER_COMMAND = (sys.executable, "-m", "squall.daemons.worker_main")

FAST_TICK = 0.5  # seconds between ticks while a slot is starting, downloading or killing
DOWNLOAD_TIMEOUT = 60.0  # socket timeout of one bundle download
CHUNK = 1 << 20
CRASH_WINDOW = 60.0  # a worker dying this soon after its launch counts as a crash loop
MAX_RELAUNCH_DELAY = 30.0  # cap of the crash-loop back-off
ARCHIVED_LOGS_KEPT = 100  # logs of cleaned-up workers kept under <log dir>/workers
CREATE_TIME_SLACK = 1.0  # seconds; process start times are derived from boot time


class SupervisorError(RuntimeError):
    """The supervisor cannot start or go on (exit code 1); the message says why."""


class Waker:
    """Wakes the supervisor loop; a self-pipe, so it is safe from signal handlers (a
    ``threading.Event`` is not: its lock may be held by the very thread the signal hits)."""

    def __init__(self) -> None:
        self._r, self._w = os.pipe()
        for fd in (self._r, self._w):
            os.set_blocking(fd, False)

    def wake(self) -> None:
        try:
            os.write(self._w, b"x")
        except (BlockingIOError, OSError):
            pass  # the pipe is full (a wake-up is pending anyway) or closed

    def wait(self, timeout: float) -> None:
        """Return on a wake-up or after ``timeout`` seconds; pending wake-ups are consumed."""
        ready, _, _ = select.select([self._r], [], [], max(0.0, timeout))
        if ready:
            try:
                while os.read(self._r, 4096):
                    pass
            except BlockingIOError:
                pass


# --- small file helpers -----------------------------------------------------------------------

def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` through a temporary file in the same directory, fsync, rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _valid_id(value: str) -> bool:
    return bool(value) and "/" not in value and value not in (".", "..") and value.isprintable() \
        and not any(c.isspace() for c in value)


def check_conf(conf: Mapping[str, Any]) -> None:
    """Supervisor-specific checks beyond the schema; ConfigError naming the key."""
    ports = conf["supervisor.slots.ports"]
    if not ports:
        raise _config.ConfigError("config key 'supervisor.slots.ports' must list at least one port")
    for port in ports:
        if not 1 <= port <= 65535:
            raise _config.ConfigError(f"config key 'supervisor.slots.ports' has port {port} outside 1-65535")
    if len(set(ports)) != len(ports):
        raise _config.ConfigError(f"config key 'supervisor.slots.ports' repeats a port: {ports}")
    for key in ("supervisor.monitor.frequency.secs", "supervisor.heartbeat.frequency.secs",
                "supervisor.worker.start.timeout.secs", "supervisor.worker.timeout.secs"):
        if conf[key] <= 0:
            raise _config.ConfigError(f"config key {key!r} must be positive, got {conf[key]!r}")
    if conf["supervisor.worker.shutdown.sleep.secs"] < 0:
        raise _config.ConfigError("config key 'supervisor.worker.shutdown.sleep.secs' must not be negative")
    fixed = conf.get("supervisor.id")
    if fixed is not None and not _valid_id(fixed):
        raise _config.ConfigError(f"config key 'supervisor.id' {fixed!r} cannot be used as a node id")
    if conf.get("supervisor.worker.command") == []:
        raise _config.ConfigError("config key 'supervisor.worker.command' must not be empty (null: the default)")


def load_supervisor_id(conf: Mapping[str, Any], local_dir: Path) -> str:
    """``supervisor.id`` if set, else the id kept in ``<local dir>/supervisor-id`` (made once)."""
    fixed = conf.get("supervisor.id")
    if fixed:
        return str(fixed)
    path = local_dir / ID_FILE
    try:
        kept = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        kept = ""
    if kept and _valid_id(kept):
        return kept
    if kept:
        log.warning("supervisor id file is malformed; making a new id", path=str(path), content=kept[:80])
    new = uuid.uuid4().hex
    write_atomic(path, (new + "\n").encode())
    return new


# --- worker processes -------------------------------------------------------------------------

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

    def to_record(self) -> _slot.WorkerRecord:
        return _slot.WorkerRecord(self.worker_id, self.pid, self.topology_id,
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

        executors = need("executors", (list,))
        rows = []
        for row in executors:
            if (not isinstance(row, list) or len(row) != 2
                    or not all(isinstance(x, int) and not isinstance(x, bool) for x in row)):
                raise ValueError(f"executor {row!r} is not [start, end]")
            rows.append([row[0], row[1]])
        worker_id = need("worker_id", (str,))
        if not _valid_id(worker_id):
            raise ValueError(f"worker id {worker_id!r} is not usable")
        return cls(worker_id=worker_id, port=need("port", (int,)), topology_id=need("topology_id", (str,)),
                   executors=rows, code_digest=need("code_digest", (str,)),
                   pid=need("pid", (int,), True), create_time=need("create_time", (int, float), True),
                   launch_time=float(need("launch_time", (int, float))))


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
        except psutil.AccessDenied:
            cmdline = []
        if cmdline and worker_id not in cmdline:
            return False
    return True


def worker_alive(pid: int | None, create_time: float | None, worker_id: str | None) -> bool:
    """Is ``pid`` running (not a zombie) and really the worker we launched?"""
    if pid is None:
        return False
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
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


def read_heartbeat(path: Path, worker_id: str) -> tuple[float | None, frozenset[tuple[int, int]] | None]:
    """(time, executors) from a worker's heartbeat.json; (None, None) when absent.
    ValueError naming the problem when it is malformed."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None, None
    beat = json.loads(raw)
    if not isinstance(beat, dict):
        raise ValueError(f"expected a JSON object, got {type(beat).__name__}")
    t = beat.get("time")
    if isinstance(t, bool) or not isinstance(t, (int, float)):
        raise ValueError(f"field 'time' is {t!r}")
    if beat.get("worker_id", worker_id) != worker_id:
        raise ValueError(f"heartbeat names worker {beat.get('worker_id')!r}")
    executors = beat.get("executors")
    if executors is None:
        return float(t), None
    if not isinstance(executors, list):
        raise ValueError(f"field 'executors' is {executors!r}")
    out = set()
    for row in executors:
        if (not isinstance(row, list) or len(row) != 2
                or not all(isinstance(x, int) and not isinstance(x, bool) for x in row)):
            raise ValueError(f"executor {row!r} is not [start, end]")
        out.add((row[0], row[1]))
    return float(t), frozenset(out)


# --- code bundles -----------------------------------------------------------------------------

class BundleError(RuntimeError):
    """A download that cannot be used; the message names the problem."""


class CodeDownloads:
    """Topology code under ``<local dir>/topologies/<id>/``, fetched from nimbus in the background.

    A complete bundle directory holds ``.digest`` (the sha256 it was checked against); it only
    appears by a rename, so a half-extracted bundle is never seen as present.
    """

    def __init__(self, root: Path, conf: Mapping[str, Any], logger: Any,
                 on_done: Callable[[], None]) -> None:
        self.root = root
        self.conf = conf
        self.log = logger
        self.on_done = on_done
        self.failures = 0
        self._lock = threading.Lock()
        self._in_flight: set[str] = set()  # topology ids

    def url(self, topology_id: str) -> str:
        host, port = self.conf["nimbus.host"], int(self.conf["nimbus.port"])
        return f"http://{host}:{port}/api/v1/topologies/{urllib.parse.quote(topology_id, safe='')}/bundle"

    def present(self, topology_id: str, digest: str) -> bool:
        try:
            return (self.root / topology_id / ".digest").read_text(encoding="utf-8").strip() == digest
        except OSError:
            return False

    def in_flight(self) -> set[str]:
        with self._lock:
            return set(self._in_flight)

    def request(self, topology_id: str, digest: str) -> None:
        """Start a download unless one for this topology is running already."""
        with self._lock:
            if topology_id in self._in_flight:
                return
            self._in_flight.add(topology_id)
        threading.Thread(target=self._run, args=(topology_id, digest), daemon=True,
                         name=f"download-{topology_id}").start()

    def _run(self, topology_id: str, digest: str) -> None:
        url = self.url(topology_id)
        started = time.monotonic()
        try:
            size = self.fetch(topology_id, digest, url)
            self.log.info("code downloaded", topology=topology_id, digest=digest, bytes=size,
                          secs=round(time.monotonic() - started, 3))
        except BundleError as exc:
            self.failures += 1
            self.log.error("code download refused", topology=topology_id, url=url, error=str(exc))
        except Exception as exc:  # noqa: BLE001 - a download thread must report, not vanish
            self.failures += 1
            self.log.exception("code download failed", topology=topology_id, url=url, error=repr(exc))
        finally:
            with self._lock:
                self._in_flight.discard(topology_id)
            self.on_done()

    def fetch(self, topology_id: str, digest: str, url: str) -> int:
        """Download, verify and install one bundle; BundleError saying what is wrong."""
        if not digest:
            raise BundleError("the assignment names no code digest")
        self.root.mkdir(parents=True, exist_ok=True)
        limit = int(self.conf["nimbus.code.max.upload.bytes"])
        work = Path(tempfile.mkdtemp(prefix=f".tmp-{topology_id}-", dir=self.root))
        try:
            archive = work / "bundle.tar.gz"
            got, size, announced = self._download(url, archive, limit)
            if got != digest:
                extra = f"; nimbus announced {announced}" if announced and announced != got else ""
                raise BundleError(f"code digest mismatch: expected {digest}, got {got} "
                                  f"({size} bytes){extra}")
            tree = work / "tree"
            try:
                with tarfile.open(archive, "r:gz") as tar:
                    tar.extractall(tree, filter="data")
            except (tarfile.TarError, OSError, EOFError) as exc:
                raise BundleError(f"bad code bundle: {exc}") from None
            missing = [m for m in BUNDLE_MEMBERS if not (tree / m).exists()]
            if missing:
                raise BundleError(f"bad code bundle: no {', '.join(missing)}")
            (tree / ".digest").write_text(digest + "\n", encoding="utf-8")
            self._install(tree, self.root / topology_id)
            return size
        finally:
            shutil.rmtree(work, ignore_errors=True)

    @staticmethod
    def _download(url: str, dest: Path, limit: int) -> tuple[str, int, str | None]:
        sha = hashlib.sha256()
        size = 0
        try:
            with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT) as resp, open(dest, "wb") as out:
                announced = resp.headers.get("X-Squall-Digest")
                while True:
                    chunk = resp.read(CHUNK)
                    if not chunk:
                        break
                    size += len(chunk)
                    if size > limit:
                        raise BundleError(f"bundle larger than nimbus.code.max.upload.bytes ({limit})")
                    sha.update(chunk)
                    out.write(chunk)
        except urllib.error.HTTPError as exc:
            raise BundleError(f"nimbus answered HTTP {exc.code} {exc.reason}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise BundleError(f"cannot reach nimbus: {reason}") from None
        return sha.hexdigest(), size, announced

    @staticmethod
    def _install(tree: Path, target: Path) -> None:
        old = None
        if target.exists():  # another digest for the same id: swap it out
            old = target.with_name(f".old-{target.name}-{uuid.uuid4().hex[:8]}")
            os.rename(target, old)
        os.rename(tree, target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)

    def cleanup(self, keep: set[str]) -> list[str]:
        """Remove bundles (and leftover temp dirs) of topologies not in ``keep``."""
        busy = self.in_flight()
        removed = []
        try:
            entries = list(self.root.iterdir())
        except FileNotFoundError:
            return removed
        for entry in entries:
            name = entry.name
            if name.startswith((".tmp-", ".old-")):
                if not any(name.startswith((f".tmp-{t}-", f".old-{t}-")) for t in busy):
                    shutil.rmtree(entry, ignore_errors=True)
                continue
            if name in keep or name in busy or not entry.is_dir():
                continue
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(name)
        return removed


# --- the supervisor ---------------------------------------------------------------------------

class Supervisor:
    """One host's supervisor. ``start()``, then ``run()`` until ``stop()``, then ``shutdown()``."""

    def __init__(self, conf: Mapping[str, Any]) -> None:
        self.conf: dict[str, Any] = dict(conf)
        self.local_dir = Path(str(conf["squall.local.dir"])).expanduser().absolute()
        self.conf["squall.local.dir"] = str(self.local_dir)
        log_dir = conf.get("squall.log.dir")
        self.log_dir = Path(str(log_dir)).expanduser().absolute() if log_dir else self.local_dir / "logs"
        self.ports: list[int] = list(conf["supervisor.slots.ports"])
        self.host = str(conf["supervisor.host"])
        self.timeouts = _slot.Timeouts.from_conf(conf)
        self.monitor_secs = float(conf["supervisor.monitor.frequency.secs"])
        self.heartbeat_secs = float(conf["supervisor.heartbeat.frequency.secs"])
        self.workers_dir = self.local_dir / "workers"
        self.conf_path = self.local_dir / CONF_FILE
        self.state_path = self.local_dir / STATE_FILE
        self.id = ""
        self.log: Any = log
        self.state: ClusterState | None = None
        self.code: CodeDownloads | None = None
        self.slots: dict[int, _slot.SlotState] = {}
        self.workers: dict[str, WorkerProc] = {}  # by worker id: every worker we still own
        self.children: dict[str, subprocess.Popen[bytes]] = {}  # workers launched by this process
        self.started_at = 0.0
        self.malformed_beats = 0
        self._stopping = False  # a plain flag: set from signal handlers
        self._waker = Waker()
        self._snapshot_lock = threading.Lock()
        self._snapshot: dict[str, Assignment] | None = None
        self._watch_seq = 0  # bumped by every watch delivery
        self._watch: Any = None
        self._lock_fd: int | None = None
        self._warned: set[Any] = set()  # one-off warnings already given
        self._crash_hold: dict[str, float] = {}  # worker id -> relaunch not before
        self._exits_logged: set[str] = set()
        self._zk_down = False

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> Supervisor:
        """Lock the local dir, settle the id, write the workers' config, connect, recover the
        slots from the local state file, register and watch assignments."""
        self.started_at = time.time()
        try:
            self.local_dir.mkdir(parents=True, exist_ok=True)
            self.workers_dir.mkdir(exist_ok=True)
            self._take_lock()
            self.id = load_supervisor_id(self.conf, self.local_dir)
            self.conf["supervisor.id"] = self.id
            # The effective config, once: workers read it through SQUALL_CONF.
            write_atomic(self.conf_path, yaml.safe_dump(self.conf, sort_keys=True).encode())
        except OSError as exc:
            self._release_lock()
            raise SupervisorError(f"cannot use local dir {self.local_dir}: {exc}") from None
        self.log = log.bind(supervisor=self.id)
        self.code = CodeDownloads(self.local_dir / "topologies", self.conf, self.log, self._waker.wake)
        self.log.info("supervisor starting", host=self.host, ports=self.ports, local_dir=str(self.local_dir))
        self.state = ClusterState(self.conf)
        try:
            self.state.start()
            snapshot = self.state.assignments()
        except ClusterStateError as exc:
            self.state.close()
            self._release_lock()
            raise SupervisorError(str(exc)) from None
        with self._snapshot_lock:
            self._snapshot = snapshot
        self._recover(snapshot)
        self._heartbeat()
        try:
            self._watch = self.state.watch_assignments(self._on_assignments)
        except ClusterStateError as exc:
            self.state.close()
            self._release_lock()
            raise SupervisorError(f"cannot watch assignments: {exc}") from None
        self.log.info("supervisor started", ports=self.ports)
        return self

    def stop(self) -> None:
        """Ask ``run`` to return (safe from signal handlers and other threads)."""
        self._stopping = True
        self._waker.wake()

    def run(self) -> None:
        """The loop: tick on every assignment change, every monitor period, and often while a
        slot is in motion; refresh the supervisor node every heartbeat period."""
        next_poll = time.monotonic() + self.monitor_secs
        next_beat = time.monotonic() + self.heartbeat_secs
        while not self._stopping:
            if time.monotonic() >= next_poll:
                self._poll_assignments()
                next_poll = time.monotonic() + self.monitor_secs
            try:
                self.tick()
            except Exception:  # noqa: BLE001 - one bad tick must not end the node
                self.log.exception("supervisor tick failed")
            if time.monotonic() >= next_beat:
                self._heartbeat()
                next_beat = time.monotonic() + self.heartbeat_secs
            wait = min(next_poll, next_beat) - time.monotonic()
            if any(s.name not in (_slot.State.EMPTY, _slot.State.RUNNING) for s in self.slots.values()):
                wait = min(wait, FAST_TICK, self.monitor_secs)
            self._waker.wait(wait)

    def shutdown(self, kill_workers: bool = False) -> None:
        """Unregister and close ZooKeeper; workers keep running unless ``kill_workers``."""
        if self._watch is not None:
            self._watch.cancel()
        if kill_workers:
            self.kill_all_workers()
        else:
            running = sorted(w.worker_id for w in self.workers.values())
            self.log.info("supervisor stopping; workers left running", workers=running)
        if self.state is not None and not self.state.closed:
            if self.id:
                try:
                    self.state.unregister_supervisor(self.id)
                except ClusterStateError as exc:
                    self.log.warning("unregistering failed", error=str(exc))
            self.state.close()
        self._release_lock()
        self.log.info("supervisor stopped")

    def _take_lock(self) -> None:
        # Two supervisors sharing a local dir would fight over the same workers.
        fd = os.open(self.local_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise SupervisorError(f"another supervisor is using local dir {self.local_dir}") from None
        self._lock_fd = fd

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # -- ZooKeeper ---------------------------------------------------------------------------
    def _on_assignments(self, snapshot: dict[str, Assignment]) -> None:
        # kazoo's thread: store and wake the loop, nothing more.
        with self._snapshot_lock:
            self._snapshot = snapshot
            self._watch_seq += 1
        self._waker.wake()

    def _poll_assignments(self) -> None:
        """The safety net: re-read every assignment in case a watch event went missing."""
        assert self.state is not None
        with self._snapshot_lock:
            seq = self._watch_seq
        try:
            snapshot = self.state.assignments()
        except ClusterStateError as exc:
            if not self._zk_down:
                self.log.warning("cannot read assignments; keeping the last ones", error=str(exc))
            self._zk_down = True
            return
        if self._zk_down:
            self.log.info("assignments readable again")
        self._zk_down = False
        with self._snapshot_lock:
            if self._watch_seq == seq:  # a watch delivery during the read is newer: keep it
                self._snapshot = snapshot

    def _heartbeat(self) -> None:
        assert self.state is not None
        used = sorted(p for p, s in self.slots.items() if s.name is not _slot.State.EMPTY and p in self.ports)
        info = SupervisorInfo(id=self.id, host=self.host, ports=self.ports, started_at=self.started_at,
                              used_ports=used, time=time.time())
        try:
            self.state.register_supervisor(info)
        except ClusterStateError as exc:
            self.log.warning("supervisor heartbeat failed", error=str(exc))

    def my_assignments(self, snapshot: Mapping[str, Assignment]) -> dict[int, _slot.SlotAssignment]:
        """Port -> what this node should run there, from all topologies' assignments."""
        out: dict[int, _slot.SlotAssignment] = {}
        for topology_id in sorted(snapshot):
            a = snapshot[topology_id]
            for port in sorted({p for node, p in a.executors.values() if node == self.id}):
                if port not in self.ports:
                    self._warn_once(("port", topology_id, port), "assignment names a port this supervisor "
                                    "does not have", topology=topology_id, port=port)
                    continue
                if port in out:
                    self._warn_once(("clash", topology_id, port), "two topologies assigned to one port; "
                                    "keeping the first", port=port, topology=topology_id,
                                    kept=out[port].topology_id)
                    continue
                out[port] = _slot.SlotAssignment(topology_id, a.executors_on(self.id, port), a.code_digest)
        return out

    def _warn_once(self, key: Any, event: str, **fields: Any) -> None:
        if key not in self._warned:
            self._warned.add(key)
            self.log.warning(event, **fields)

    # -- recovery after a restart ------------------------------------------------------------
    def _recover(self, snapshot: Mapping[str, Assignment]) -> None:
        records = self._load_state()
        self._kill_orphans(records)
        assigned = self.my_assignments(snapshot)
        now = time.time()
        by_port: dict[int, WorkerProc] = {}
        for rec in sorted(records.values(), key=lambda r: r.launch_time, reverse=True):
            if rec.port in by_port:  # should not happen: one worker per port
                self.log.warning("two workers recorded for one port; killing the older", port=rec.port,
                                 worker=rec.worker_id)
                self._kill_now(rec)
                continue
            by_port[rec.port] = rec
        self.workers = {rec.worker_id: rec for rec in by_port.values()}
        for port in sorted(set(self.ports) | set(by_port)):
            rec = by_port.get(port)
            assignment = assigned.get(port) if port in self.ports else None
            alive = rec is not None and worker_alive(rec.pid, rec.create_time, rec.worker_id)
            state = _slot.recover(port, rec.to_record() if rec else None, assignment, alive, now)
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
        self._save_state()

    def _load_state(self) -> dict[str, WorkerProc]:
        try:
            raw = self.state_path.read_bytes()
        except FileNotFoundError:
            return {}
        try:
            data = json.loads(raw)
            if not isinstance(data, dict) or data.get("v") != STATE_VERSION:
                raise ValueError(f"not a version {STATE_VERSION} state object")
            entries = data.get("workers")
            if not isinstance(entries, list):
                raise ValueError("field 'workers' is not a list")
        except ValueError as exc:
            bad = self.state_path.with_name(f"{STATE_FILE}.corrupt-{int(time.time())}")
            os.replace(self.state_path, bad)
            self.log.error("local state file is malformed; set aside (unknown workers will be killed)",
                           path=str(self.state_path), moved_to=str(bad), error=str(exc))
            return {}
        out = {}
        for entry in entries:
            try:
                rec = WorkerProc.from_dict(entry if isinstance(entry, dict) else {})
            except (ValueError, TypeError) as exc:
                self.log.warning("malformed worker record skipped", path=str(self.state_path), error=str(exc))
                continue
            out[rec.worker_id] = rec
        return out

    def _save_state(self) -> None:
        data = {"v": STATE_VERSION, "supervisor_id": self.id,
                "workers": [asdict(w) for w in sorted(self.workers.values(), key=lambda w: w.port)]}
        try:
            write_atomic(self.state_path, json.dumps(data, indent=1).encode())
        except OSError as exc:
            self.log.error("cannot write the local state file", path=str(self.state_path), error=str(exc))

    def _kill_orphans(self, records: Mapping[str, WorkerProc]) -> None:
        """Worker dirs without a record (a crash between launch and record, or a lost state
        file): kill a process that still runs there, then remove the dir."""
        for entry in sorted(self.workers_dir.iterdir()):
            if entry.name in records or not entry.is_dir():
                continue
            pid = None
            try:
                pid = int((entry / "pid").read_text().strip())
            except (OSError, ValueError):
                pass
            orphan = WorkerProc(entry.name, 0, "unrecorded", [], "", pid, None, 0.0)
            if pid is not None and worker_alive(pid, None, entry.name):
                self.log.warning("killing unrecorded worker", worker=entry.name, pid=pid)
                self._kill_now(orphan)
            self._remove_worker_dir(orphan)

    def _kill_now(self, rec: WorkerProc) -> None:
        """SIGTERM, wait the shutdown sleep, SIGKILL: for start-up and exit, not the loop."""
        signal_worker(rec.pid, rec.create_time, rec.worker_id, signal.SIGTERM)
        deadline = time.monotonic() + self.timeouts.shutdown_sleep
        while time.monotonic() < deadline and worker_alive(rec.pid, rec.create_time, rec.worker_id):
            self._reap()
            time.sleep(0.05)
        if worker_alive(rec.pid, rec.create_time, rec.worker_id):
            signal_worker(rec.pid, rec.create_time, rec.worker_id, signal.SIGKILL)
            deadline = time.monotonic() + 5.0
            while time.monotonic() < deadline and worker_alive(rec.pid, rec.create_time, rec.worker_id):
                self._reap()
                time.sleep(0.05)

    def kill_all_workers(self) -> None:
        """Stop every worker of this node (``--kill-workers-on-exit``)."""
        for rec in list(self.workers.values()):
            signal_worker(rec.pid, rec.create_time, rec.worker_id, signal.SIGTERM)
        for rec in list(self.workers.values()):
            self._kill_now(rec)
            self.log.info("worker stopped", port=rec.port, topology=rec.topology_id, worker=rec.worker_id)
            self._cleanup(_slot.CleanupWorker(rec.worker_id, "supervisor exiting"))
        self.slots = {p: _slot.SlotState(port=p) for p in self.ports}

    # -- one tick ----------------------------------------------------------------------------
    def tick(self) -> None:
        """Observe and step every port, carry out the actions, drop unused code."""
        assert self.code is not None
        self._reap()
        with self._snapshot_lock:
            snapshot = self._snapshot
        assigned = self.my_assignments(snapshot or {})
        for port in sorted(self.slots):
            try:
                self._step_port(port, assigned.get(port) if port in self.ports else None)
            except Exception:  # noqa: BLE001 - one port's trouble must not stop the others
                self.log.exception("slot step failed", port=port)
        for port in [p for p, s in self.slots.items() if p not in self.ports and s.name is _slot.State.EMPTY]:
            del self.slots[port]  # a recorded port no longer configured, now cleaned up
        if snapshot is not None:
            keep = {a.topology_id for a in assigned.values()}
            keep |= {s.assignment.topology_id for s in self.slots.values() if s.assignment is not None}
            keep |= {w.topology_id for w in self.workers.values()}
            for topology_id in self.code.cleanup(keep):
                self.log.info("code removed; topology no longer assigned here", topology=topology_id)

    def _step_port(self, port: int, assignment: _slot.SlotAssignment | None) -> None:
        assert self.code is not None
        state = self.slots[port]
        now = time.time()
        rec = self.workers.get(state.worker_id) if state.worker_id else None
        alive = rec is not None and worker_alive(rec.pid, rec.create_time, rec.worker_id)
        beat_time, beat_execs = self._beat(state.worker_id) if state.worker_id and alive else (None, None)
        if self._hold_relaunch(state, assignment, alive, now):
            return
        obs = _slot.Observation(
            now=now, assignment=assignment,
            code_present=assignment is not None and self.code.present(assignment.topology_id,
                                                                      assignment.code_digest),
            worker_alive=alive, worker_pid=rec.pid if rec else None,
            heartbeat_time=beat_time, heartbeat_executors=beat_execs,
            timeouts=self.timeouts, new_worker_id=uuid.uuid4().hex,
        )
        new, actions = _slot.step(state, obs)
        self.slots[port] = new
        if new.name is not state.name:
            current = new.assignment or state.assignment
            self.log.info("slot state changed", port=port, topology=current.topology_id if current else None,
                          worker=new.worker_id or state.worker_id, previous=state.name.value,
                          state=new.name.value)
        for action in actions:
            self._perform(port, action)

    def _hold_relaunch(self, state: _slot.SlotState, assignment: _slot.SlotAssignment | None,
                       alive: bool, now: float) -> bool:
        """Crash-loop back-off: a worker of an unchanged assignment that died soon after its
        launch, and not for the first time, is relaunched after 1, 2, 4 ... seconds."""
        if (alive or state.worker_id is None or state.relaunch_count < 1 or assignment != state.assignment
                or state.name not in (_slot.State.WAITING_FOR_WORKER_START, _slot.State.RUNNING)
                or state.launch_time is None or now - state.launch_time > CRASH_WINDOW):
            return False
        delay = min(2.0 ** (state.relaunch_count - 1), MAX_RELAUNCH_DELAY)
        until = self._crash_hold.setdefault(state.worker_id, now + delay)
        if now < until:
            self._warn_once(("hold", state.worker_id), "worker keeps dying; delaying its relaunch",
                            port=state.port, topology=state.assignment.topology_id if state.assignment else None,
                            worker=state.worker_id, relaunches=state.relaunch_count, delay_secs=delay)
            return True
        return False

    def _beat(self, worker_id: str) -> tuple[float | None, frozenset[tuple[int, int]] | None]:
        path = self.workers_dir / worker_id / "heartbeat.json"
        try:
            return read_heartbeat(path, worker_id)
        except (ValueError, OSError) as exc:
            self.malformed_beats += 1
            self._warn_once(("beat", worker_id, str(exc)), "malformed worker heartbeat ignored",
                            worker=worker_id, path=str(path), error=str(exc))
            return None, None

    def _reap(self) -> None:
        """Collect exit codes of our own children (so they do not linger as zombies)."""
        for worker_id, child in list(self.children.items()):
            code = child.poll()
            if code is None or worker_id in self._exits_logged:
                continue
            self._exits_logged.add(worker_id)
            rec = self.workers.get(worker_id)
            fields = dict(worker=worker_id, pid=child.pid, exit_code=code,
                          port=rec.port if rec else None, topology=rec.topology_id if rec else None)
            if code == 0:
                self.log.info("worker exited", **fields)
            else:
                self.log.warning("worker exited", **fields)

    # -- actions -----------------------------------------------------------------------------
    def _perform(self, port: int, action: _slot.Action) -> None:
        assert self.code is not None
        if isinstance(action, _slot.DownloadCode):
            self.log.info("code requested", port=port, topology=action.topology_id, digest=action.digest,
                          url=self.code.url(action.topology_id))
            self.code.request(action.topology_id, action.digest)
        elif isinstance(action, _slot.LaunchWorker):
            self._launch(action)
        elif isinstance(action, _slot.KillWorker):
            self._kill(port, action)
        elif isinstance(action, _slot.CleanupWorker):
            self._cleanup(action)

    def worker_command(self, action: _slot.LaunchWorker) -> list[str]:
        prefix = self.conf.get("supervisor.worker.command") or DEFAULT_WORKER_COMMAND
        return [*prefix, "start", action.topology_id, self.id, str(action.port), action.worker_id]

    def _launch(self, action: _slot.LaunchWorker) -> None:
        fields = dict(port=action.port, topology=action.topology_id, worker=action.worker_id)
        wdir = self.workers_dir / action.worker_id
        cmd = self.worker_command(action)
        env = {**os.environ, "SQUALL_CONF": str(self.conf_path)}
        try:
            wdir.mkdir(parents=True, exist_ok=True)
            with open(wdir / "worker.log", "ab") as out:
                # Own session: signals reach the worker (and its children) alone, and a
                # Ctrl-C or SIGTERM meant for the supervisor does not.
                child = subprocess.Popen(cmd, cwd=wdir, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            self.log.error("worker launch failed", command=cmd, error=str(exc), **fields)
            return  # no record: the next step sees no process and relaunches (with back-off)
        self.children[action.worker_id] = child
        rec = WorkerProc(action.worker_id, action.port, action.topology_id,
                         [[s, e] for s, e in sorted(action.executors)], action.code_digest,
                         child.pid, process_create_time(child.pid), time.time())
        self.workers[action.worker_id] = rec
        self._save_state()
        self.log.info("worker launched", pid=child.pid, reason=action.reason,
                      executors=rec.executors, **fields)

    def _kill(self, port: int, action: _slot.KillWorker) -> None:
        rec = self.workers.get(action.worker_id or "")
        if rec is None:
            return
        sig = signal.SIGKILL if action.force else signal.SIGTERM
        sent = signal_worker(rec.pid, rec.create_time, rec.worker_id, sig)
        self.log.info("worker signalled", port=port, topology=rec.topology_id, worker=rec.worker_id,
                      pid=rec.pid, signal=sig.name, sent=sent, reason=action.reason)

    def _cleanup(self, action: _slot.CleanupWorker) -> None:
        rec = self.workers.pop(action.worker_id, None)
        child = self.children.pop(action.worker_id, None)
        if child is not None:
            child.poll()
        self._exits_logged.discard(action.worker_id)
        self._crash_hold.pop(action.worker_id, None)
        self._warned = {k for k in self._warned if action.worker_id not in k}
        self._remove_worker_dir(rec or WorkerProc(action.worker_id, 0, "unrecorded", [], "", None, None, 0.0))
        self._save_state()
        self.log.info("worker cleaned up", worker=action.worker_id, reason=action.reason,
                      port=rec.port if rec else None, topology=rec.topology_id if rec else None)

    def _remove_worker_dir(self, rec: WorkerProc) -> None:
        wdir = self.workers_dir / rec.worker_id
        self._archive_log(wdir / "worker.log", rec)
        shutil.rmtree(wdir, ignore_errors=True)

    def _archive_log(self, path: Path, rec: WorkerProc) -> None:
        """Keep a cleaned-up worker's log (why did it die?) under ``<log dir>/workers``."""
        if not path.is_file() or path.stat().st_size == 0:
            return
        dest_dir = self.log_dir / "workers"
        try:
            dest_dir.mkdir(parents=True, exist_ok=True)
            shutil.move(str(path), dest_dir / f"{rec.topology_id}-{rec.port}-{rec.worker_id}.log")
            kept = sorted(dest_dir.glob("*.log"), key=lambda p: p.stat().st_mtime)
            for old in kept[:-ARCHIVED_LOGS_KEPT]:
                old.unlink(missing_ok=True)
        except OSError as exc:
            self.log.warning("cannot keep worker log", worker=rec.worker_id, error=str(exc))


# --- command line -----------------------------------------------------------------------------

class _Failure(click.ClickException):
    exit_code = 1


@click.command("supervisor")
@click.option("-c", "overrides", multiple=True, metavar="KEY=VALUE", help="Configuration override; repeatable.")
@click.option("--log-format", type=click.Choice(["console", "json"]), default=None,
              help="Log as readable lines (console) or JSON lines.")
@click.option("--kill-workers-on-exit", is_flag=True,
              help="Stop this node's workers when the supervisor stops (default: leave them running).")
def supervisor_command(overrides: tuple[str, ...], log_format: str | None, kill_workers_on_exit: bool) -> None:
    """Run this host's supervisor in the foreground.

    It registers the ports in supervisor.slots.ports, follows the assignments and runs the
    workers. SIGTERM or SIGINT stops it; its workers keep running and are adopted by the next
    supervisor started on the same local dir.
    """
    try:
        extra = _config.parse_overrides(overrides)
    except _config.ConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="-c") from None
    try:
        conf = _config.build_config(extra)
        check_conf(conf)
    except _config.ConfigError as exc:
        raise _Failure(str(exc)) from None
    logs.configure_from(conf, log_format, daemon="supervisor")
    supervisor = Supervisor(conf)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: supervisor.stop())
    try:
        supervisor.start()
    except SupervisorError as exc:
        log.error("supervisor cannot start", error=str(exc))
        raise _Failure(str(exc)) from None
    try:
        supervisor.run()
    finally:
        supervisor.shutdown(kill_workers=kill_workers_on_exit)


if __name__ == "__main__":
    supervisor_command(prog_name="squall supervisor")
