"""The standalone ZooKeeper server that ``squall dev-cluster`` runs (the test harness runs it too).

``ZooKeeperServer`` runs Apache ZooKeeper (``QuorumPeerMain``) as a child JVM on a free
127.0.0.1 port with its own data directory; ``free_port`` hands out ports for it and for the
other local processes. Its data holds every topology's ZooKeeper password and CURVE secret
key, so the server runs with umask 077: the data directory is 0700 and its transaction logs
and snapshots 0600 (files an older run left readable are made private at start).

The jars come from Debian's ``zookeeper`` package (``/usr/share/java``); set
``SQUALL_ZOOKEEPER_CLASSPATH`` to use another installation.
"""
from __future__ import annotations

import atexit
import ctypes
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import typing
import weakref
from pathlib import Path
from types import TracebackType

from squall.errors import SquallError

JAVA_DIR = Path("/usr/share/java")
# zookeeper.jar's manifest Class-Path names its other dependencies (netty, jute, ...).
REQUIRED_JARS = ("zookeeper.jar", "zookeeper-jute.jar", "slf4j-api.jar")
# Optional logging binding; without it slf4j falls back to a no-op logger.
LOGGING_JAR = "slf4j-simple.jar"
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"


class ZooKeeperError(SquallError, RuntimeError):
    """ZooKeeper is not installed, cannot be installed, or did not start."""


# --- installation ----------------------------------------------------------------------

def find_java() -> str | None:
    """The java executable: $JAVA_HOME/bin/java, else java on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and os.access(Path(home, "bin", "java"), os.X_OK):
        return str(Path(home, "bin", "java"))
    return shutil.which("java")


def find_zookeeper_classpath() -> str | None:
    """The class path that runs the server, or None when the jars are missing."""
    override = os.environ.get("SQUALL_ZOOKEEPER_CLASSPATH")
    if override:
        return override
    if not all((JAVA_DIR / jar).is_file() for jar in REQUIRED_JARS):
        return None
    jars = [JAVA_DIR / "zookeeper.jar"]
    if (JAVA_DIR / LOGGING_JAR).is_file():
        jars.append(JAVA_DIR / LOGGING_JAR)
    return os.pathsep.join(str(j) for j in jars)


def _apt_get(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    return subprocess.run(["apt-get", *args], env=env, capture_output=True, text=True, timeout=600)


def ensure_zookeeper_installed() -> str:
    """Return the server class path, installing Debian's ``zookeeper`` package if needed.

    Runs ``apt-get install -y zookeeper`` (after ``apt-get update`` if the first try fails).
    Raises ZooKeeperError saying what is missing when that is impossible.
    """
    classpath = find_zookeeper_classpath()
    if classpath is None:
        if shutil.which("apt-get") is None:
            raise ZooKeeperError(
                f"ZooKeeper jars ({', '.join(REQUIRED_JARS)}) not found in {JAVA_DIR} and apt-get is "
                "not available: install ZooKeeper or set SQUALL_ZOOKEEPER_CLASSPATH")
        if os.geteuid() != 0:
            raise ZooKeeperError(
                f"ZooKeeper jars not found in {JAVA_DIR}; run `apt-get install -y zookeeper` as root "
                "or set SQUALL_ZOOKEEPER_CLASSPATH")
        result = _apt_get("install", "-y", "zookeeper")
        if result.returncode != 0:
            _apt_get("update")
            result = _apt_get("install", "-y", "zookeeper")
        classpath = find_zookeeper_classpath()
        if result.returncode != 0 or classpath is None:
            tail = (result.stderr or result.stdout).strip().splitlines()[-5:]
            raise ZooKeeperError("`apt-get install -y zookeeper` failed: " + " | ".join(tail))
    if find_java() is None:
        raise ZooKeeperError("no java executable found (set JAVA_HOME or install a JRE)")
    return classpath


# --- the server ------------------------------------------------------------------------

def make_private(work_dir: Path) -> None:
    """The work dir and its ``data`` tree owner-only: directories 0700, files 0600 (the JVM's
    umask keeps new files so; this fixes what an older run left)."""
    data = work_dir / "data"
    data.mkdir(parents=True, exist_ok=True)
    os.chmod(work_dir, 0o700)
    for dirpath, _, filenames in os.walk(data):
        os.chmod(dirpath, 0o700)
        for name in filenames:
            path = os.path.join(dirpath, name)
            if not os.path.islink(path):
                os.chmod(path, 0o600)


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        os.fchmod(fd, 0o600)
        fh.write(data)


# Ports handed out by free_port in this process: never handed out twice.
_HANDED: set[int] = set()
_PICK_WINDOW = 12_000  # how many ports below the kernel's ephemeral range free_port draws from


def _ephemeral_floor() -> int:
    """The first port of the kernel's ephemeral range (outgoing connections, binds to 0)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as fh:
            return int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago, drawn below the kernel's ephemeral range, so
    that no outgoing connection and no bind to port 0 (a logviewer, a client) can take it
    before the caller binds it. Another process's free_port still can: callers cope with
    losing that (rare) race."""
    floor = _ephemeral_floor()
    low = max(1024, floor - _PICK_WINDOW)
    for _ in range(200 if floor - low >= 1000 else 0):
        port = random.randint(low, floor - 1)
        if port in _HANDED:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
        _HANDED.add(port)
        return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:  # no room below: any port
        sock.bind((host, 0))
        return sock.getsockname()[1]


def four_letter_word(host: str, port: int, command: str, timeout: float = 2.0) -> str:
    """Send a four-letter command (``ruok``, ``srvr``, ``mntr``, ...) and return the answer."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(command.encode("ascii"))
        chunks = []
        while True:
            chunk = sock.recv(4096)
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


_LIVE_SERVERS: weakref.WeakSet[ZooKeeperServer] = weakref.WeakSet()


@atexit.register
def _stop_live_servers() -> None:
    # A test run that dies on an exception must not leave JVMs behind.
    for server in list(_LIVE_SERVERS):
        server.stop()


def _die_with_parent() -> None:  # pragma: no cover - runs in the forked child
    # PR_SET_PDEATHSIG: the JVM gets SIGTERM when the thread that started it dies,
    # so even a SIGKILLed test run leaves no server behind.
    if _LIBC is not None:
        _LIBC.prctl(1, signal.SIGTERM)


_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


class ZooKeeperServer:
    """A standalone ZooKeeper child process bound to ``host`` on its own port and data dir.

    ``tick_time`` and ``min_session_timeout`` are in milliseconds; tests use 500 / 1000 so
    that sessions expire quickly. ``fsync=False`` (the default, this is a dev/test server)
    sets ``forceSync=no``. The work directory (zoo.cfg, data/, zookeeper.log) is a temporary
    directory removed by ``stop()`` unless ``keep_data`` is set or ``work_dir`` was given.
    ``die_with_parent`` ties the JVM's life to the thread that calls ``start()`` (Linux).
    Bounds (``squall dev-cluster`` sets them; the test harness leaves the first unbounded):
    ``max_client_cnxns`` connections per client address (``maxClientCnxns``; 0: no bound),
    ``max_request_bytes`` the largest request or node (``jute.maxbuffer``; None: ZooKeeper's
    1 MiB) and ``outstanding_limit`` requests queued in the server (``globalOutstandingLimit``;
    None: ZooKeeper's 1000), which with the request bound caps what clients can make it hold.
    """

    def __init__(
        self,
        port: int | None = None,
        *,
        host: str = "127.0.0.1",
        tick_time: int = 2000,
        min_session_timeout: int | None = None,
        max_session_timeout: int | None = None,
        work_dir: str | os.PathLike[str] | None = None,
        keep_data: bool = False,
        fsync: bool = False,
        heap_mb: int = 256,
        die_with_parent: bool = True,
        max_client_cnxns: int = 0,
        max_request_bytes: int | None = None,
        outstanding_limit: int | None = None,
    ) -> None:
        self.host = host
        self._requested_port = port
        self._port: int | None = port
        self.tick_time = tick_time
        self.min_session_timeout = min_session_timeout
        self.max_session_timeout = max_session_timeout
        self._own_dir = work_dir is None
        self.work_dir: Path | None = None if work_dir is None else Path(work_dir)
        self.keep_data = keep_data
        self.fsync = fsync
        self.heap_mb = heap_mb
        self.die_with_parent = die_with_parent and _LIBC is not None
        self.max_client_cnxns = max_client_cnxns
        self.max_request_bytes = max_request_bytes
        self.outstanding_limit = outstanding_limit
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: typing.BinaryIO | None = None

    # -- properties ---------------------------------------------------------------------
    @property
    def port(self) -> int:
        if self._port is None:
            raise ZooKeeperError("the server has no port yet: call start() first")
        return self._port

    @property
    def hosts(self) -> str:
        """Connection string for kazoo: ``"127.0.0.1:port"``."""
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def exit_code(self) -> int | None:
        """The exit code of a server process that ended on its own; None while it runs."""
        return self._proc.poll() if self._proc is not None else None

    @property
    def log_path(self) -> Path | None:
        return None if self.work_dir is None else self.work_dir / "zookeeper.log"

    # -- lifecycle ----------------------------------------------------------------------
    def start(self, timeout: float = 30.0) -> ZooKeeperServer:
        """Start the server and wait until it serves requests (``srvr`` reports a mode)."""
        if self.running:
            return self
        classpath = ensure_zookeeper_installed()
        if self.work_dir is None:
            self.work_dir = Path(tempfile.mkdtemp(prefix="squall-zk-"))
        make_private(self.work_dir)
        # With a port of our own choosing another process may grab it first: retry.
        attempts = 1 if self._requested_port is not None else 3
        for attempt in range(attempts):
            if self._requested_port is None and (attempt > 0 or self._port is None):
                self._port = free_port(self.host)
            self._spawn(classpath)
            try:
                self._wait_ready(timeout)
                _LIVE_SERVERS.add(self)
                return self
            except ZooKeeperError:
                self._stop_process()
                if attempt + 1 == attempts or "Address already in use" not in self.log_tail():
                    raise
        raise AssertionError("unreachable")

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the server, SIGKILL it after ``timeout``, then remove its temporary dir."""
        self._stop_process(timeout)
        _LIVE_SERVERS.discard(self)
        if self._own_dir and not self.keep_data and self.work_dir is not None:
            shutil.rmtree(self.work_dir, ignore_errors=True)
            self.work_dir = None

    def restart(self, timeout: float = 30.0) -> None:
        """Stop and start again on the same port and data: clients see a real outage."""
        self._stop_process()
        self._requested_port, requested = self._port, self._requested_port
        try:
            self.start(timeout)
        finally:
            self._requested_port = requested

    def four_letter(self, command: str, timeout: float = 2.0) -> str:
        return four_letter_word(self.host, self.port, command, timeout)

    def __enter__(self) -> ZooKeeperServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"ZooKeeperServer(hosts={self.host}:{self._port}, pid={self.pid})"

    # -- internals ----------------------------------------------------------------------
    def _config(self) -> str:
        assert self.work_dir is not None
        lines = [
            f"tickTime={self.tick_time}",
            f"dataDir={self.work_dir / 'data'}",
            f"clientPort={self.port}",
            f"clientPortAddress={self.host}",
            "admin.enableServer=false",
            "4lw.commands.whitelist=ruok,srvr,stat,mntr",
            f"maxClientCnxns={self.max_client_cnxns}",
            f"forceSync={'yes' if self.fsync else 'no'}",
        ]
        if self.outstanding_limit is not None:
            lines.append(f"globalOutstandingLimit={self.outstanding_limit}")
        if self.min_session_timeout is not None:
            lines.append(f"minSessionTimeout={self.min_session_timeout}")
        if self.max_session_timeout is not None:
            lines.append(f"maxSessionTimeout={self.max_session_timeout}")
        return "\n".join(lines) + "\n"

    def _spawn(self, classpath: str) -> None:
        assert self.work_dir is not None
        java = find_java()
        if java is None:
            raise ZooKeeperError("no java executable found (set JAVA_HOME or install a JRE)")
        cfg = self.work_dir / "zoo.cfg"
        _write_private(cfg, self._config().encode())
        self._close_log()
        self._log_file = os.fdopen(os.open(self.work_dir / "zookeeper.log",
                                           os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "ab")
        cmd = [java, f"-Xmx{self.heap_mb}m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
               "-Djava.net.preferIPv4Stack=true"]
        if self.max_request_bytes is not None:
            cmd.append(f"-Djute.maxbuffer={self.max_request_bytes}")
        cmd += ["-cp", classpath, MAIN_CLASS, str(cfg)]
        self._proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=self._log_file, stderr=subprocess.STDOUT,
            cwd=self.work_dir, preexec_fn=_die_with_parent if self.die_with_parent else None,
            # Not in the caller's process group: Ctrl-C on a foreground `squall dev-cluster`
            # must reach the dev cluster, which stops the daemons before their ZooKeeper.
            start_new_session=True,
            umask=0o077,  # its snapshots and transaction logs hold secrets: owner only
        )

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc is None or self._proc.poll() is not None:
                code = None if self._proc is None else self._proc.returncode
                raise ZooKeeperError(
                    f"ZooKeeper exited with code {code} while starting on {self.host}:{self.port}: "
                    f"{self.log_tail()}")
            try:
                if "Mode:" in self.four_letter("srvr", timeout=1.0):
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise ZooKeeperError(
            f"ZooKeeper on {self.host}:{self.port} did not serve within {timeout}s: {self.log_tail()}")

    def _stop_process(self, timeout: float = 10.0) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            try:
                os.kill(proc.pid, signal.SIGTERM)
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout)
            except ProcessLookupError:
                pass
        elif proc is not None:
            proc.wait()
        self._close_log()

    def _close_log(self) -> None:
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def log_tail(self, lines: int = 8) -> str:
        """The last ``lines`` of the server's log, on one line."""
        path = self.log_path
        if path is None or not path.is_file():
            return "(no log)"
        text = path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
        return " | ".join(text[-lines:]) or "(empty log)"
