"""The floods of issue 28 against a daemon's HTTP server, as a hostile tenant or neighbour
sends them, for tests/cluster/daemons/nimbus/test_floods.py and bench/http_bench.py.

Each flood comes from its own loopback source address (``127.0.0.2`` and up: every
``127.x.y.z`` is this machine), as an attacker on another host would, so that a server's
per-address bounds can tell it from the authorised caller probing on ``127.0.0.1``:

- ``IdleTls``: connections that finish TLS and then send nothing, reopened as the server
  closes them;
- ``SlowUploads``: authorised uploads that send ``piece`` bytes every ``interval`` seconds;
- ``header_waves``: waves of connections that each send most of a large request head and
  stop (the memory ratchet), from several addresses;
- ``tiny_chunks``: a body in 1-byte chunks (its cost: the server's CPU seconds, measured by
  the caller);
- ``PipelinedReaders``: connections that pipeline hundreds of GETs and never read a reply.
"""
from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Iterable
from typing import Any

import psutil

FLOOD_SOURCE = "127.0.0.2"


def connect(host: str, port: int, source: str, tls: ssl.SSLContext | None, timeout: float = 5.0,
            rcvbuf: int | None = None) -> socket.socket | None:
    """A connection from ``source`` (TLS done when ``tls``); None when the server refused it."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        if rcvbuf is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.settimeout(timeout)
        sock.bind((source, 0))
        sock.connect((host, port))
        if tls is not None:
            sock = tls.wrap_socket(sock, server_hostname=host)
        return sock
    except OSError:
        sock.close()
        return None


def _closed(sock: socket.socket) -> bool:
    """Has the server closed (or reset) ``sock``? Reads and drops what it sent meanwhile."""
    try:
        sock.setblocking(False)
        try:
            while True:
                data = sock.recv(65536)
                if not data:
                    return True
        except (BlockingIOError, ssl.SSLWantReadError):
            return False
        finally:
            sock.setblocking(True)
    except OSError:
        return True


class _Flood:
    """A set of connections kept up by one thread until ``stop()``."""

    def __init__(self, n: int, interval: float) -> None:
        self.n, self.interval = n, interval
        self.connects = 0          # connections opened (reconnections included)
        self.refused = 0           # connection attempts the server refused or dropped at once
        self.closed_by_server = 0
        self._socks: list[socket.socket | None] = [None] * n
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=type(self).__name__, daemon=True)

    def _open(self, i: int) -> socket.socket | None:
        raise NotImplementedError

    def _tick(self, i: int, sock: socket.socket) -> bool:
        """Do what this flood does to an open connection; False once the server closed it."""
        return not _closed(sock)

    def _fill(self) -> None:
        for i, sock in enumerate(self._socks):
            if self._stop.is_set():
                return
            if sock is not None and not self._tick(i, sock):
                self.closed_by_server += 1
                sock.close()
                sock = self._socks[i] = None
            if sock is None:
                sock = self._socks[i] = self._open(i)
                if sock is None:
                    self.refused += 1
                else:
                    self.connects += 1

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._fill()

    @property
    def open(self) -> int:
        return sum(s is not None for s in self._socks)

    def start(self) -> Any:
        self._fill()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)
        for sock in self._socks:
            if sock is not None:
                sock.close()
        self._socks = [None] * self.n

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


class IdleTls(_Flood):
    """``n`` connections from ``source`` that finish the TLS handshake and send nothing."""

    def __init__(self, host: str, port: int, n: int, tls: ssl.SSLContext | None, source: str = FLOOD_SOURCE,
                 interval: float = 0.5) -> None:
        super().__init__(n, interval)
        self.host, self.port, self.tls, self.source = host, port, tls, source

    def _open(self, i: int) -> socket.socket | None:
        return connect(self.host, self.port, self.source, self.tls, timeout=2.0)


class SlowUploads(_Flood):
    """``n`` uploads of a declared ``length`` from ``source``, each sending ``piece`` bytes
    every ``interval`` seconds (64 KiB every 8 s: 8 KiB/s), as a tenant with ``token``."""

    def __init__(self, host: str, port: int, n: int, tls: ssl.SSLContext | None, token: str,
                 path: str = "/api/v1/topologies?name=slow", length: int = 16 << 20, piece: int = 64 << 10,
                 interval: float = 8.0, source: str = FLOOD_SOURCE) -> None:
        super().__init__(n, interval)
        self.host, self.port, self.tls, self.source = host, port, tls, source
        self.head = (f"POST {path} HTTP/1.1\r\nHost: squall\r\nAuthorization: Bearer {token}\r\n"
                     f"Content-Type: application/gzip\r\nContent-Length: {length}\r\n\r\n").encode("ascii")
        self.piece = b"\x1f" * piece
        self.sent = 0

    def _open(self, i: int) -> socket.socket | None:
        sock = connect(self.host, self.port, self.source, self.tls)
        if sock is not None:
            try:
                sock.sendall(self.head + self.piece)
                self.sent += len(self.piece)
            except OSError:
                sock.close()
                return None
        return sock

    def _tick(self, i: int, sock: socket.socket) -> bool:
        if _closed(sock):
            return False
        try:
            sock.sendall(self.piece)
            self.sent += len(self.piece)
            return True
        except OSError:
            return False


def header_waves(host: str, port: int, tls: ssl.SSLContext | None, waves: int, n: int, size: int = 60_000,
                 hold: float = 3.0, sources: Iterable[str] | None = None) -> int:
    """``waves`` times: ``n`` connections that each send a request head of ``size`` bytes
    without its end, held ``hold`` seconds, then closed. The connections of a wave are
    spread over ``sources`` in turn; returns how many got their bytes out."""
    addresses = list(sources or [FLOOD_SOURCE])
    head = b"GET /api/v1/topologies HTTP/1.1\r\nHost: squall\r\nX-Pad: " + b"a" * size
    got = 0
    for _ in range(waves):
        socks = []
        for i in range(n):
            sock = connect(host, port, addresses[i % len(addresses)], tls, timeout=5.0)
            if sock is None:
                continue
            try:
                sock.sendall(head)
                got += 1
                socks.append(sock)
            except OSError:
                sock.close()
        time.sleep(hold)
        for sock in socks:
            sock.close()
    return got


def tiny_chunks(host: str, port: int, path: str, token: str, total: int, tls: ssl.SSLContext | None,
                source: str = FLOOD_SOURCE, timeout: float = 120.0) -> str:
    """POST ``total`` bytes in 1-byte chunks; the status line the server answered, or why none came."""
    sock = connect(host, port, source, tls, timeout=timeout)
    if sock is None:
        return "refused"
    head = (f"POST {path} HTTP/1.1\r\nHost: squall\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/gzip\r\nTransfer-Encoding: chunked\r\n\r\n").encode("ascii")
    block = b"1\r\n\x1f\r\n" * 65536
    try:
        sock.sendall(head)
        for _ in range(0, total, 65536):
            sock.sendall(block)
        sock.sendall(b"0\r\n\r\n")
        return _status_line(sock)
    except OSError as exc:
        try:
            return _status_line(sock)
        except OSError:
            return f"{type(exc).__name__}: {exc}"
    finally:
        sock.close()


def _status_line(sock: socket.socket) -> str:
    data = b""
    while b"\r\n" not in data:
        piece = sock.recv(4096)
        if not piece:
            return "closed without an answer" if not data else data.decode("latin-1")
        data += piece
    return data.split(b"\r\n", 1)[0].decode("latin-1")


class PipelinedReaders(_Flood):
    """``n`` connections from ``source`` that each send ``repeat`` GETs of ``path`` at once
    and never read (a small receive buffer, so the replies back up at the server)."""

    def __init__(self, host: str, port: int, n: int, tls: ssl.SSLContext | None, path: str = "/ui/app.js",
                 repeat: int = 300, source: str = FLOOD_SOURCE, interval: float = 0.5) -> None:
        super().__init__(n, interval)
        self.host, self.port, self.tls, self.source = host, port, tls, source
        self.requests = f"GET {path} HTTP/1.1\r\nHost: squall\r\n\r\n".encode("ascii") * repeat

    def _open(self, i: int) -> socket.socket | None:
        sock = connect(self.host, self.port, self.source, self.tls, rcvbuf=4096)
        if sock is not None:
            try:
                sock.settimeout(2.0)
                sock.sendall(self.requests)
            except OSError:
                pass  # the server stopped reading: what this flood wants
        return sock

    def _tick(self, i: int, sock: socket.socket) -> bool:
        """Never read: whether the server closed or reset it shows in the socket's state."""
        return not _reset(sock)


def _reset(sock: socket.socket) -> bool:
    err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if err:
        return True
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)
    except OSError:
        return False
    return info[0] in (7, 8)  # TCP_CLOSE, TCP_CLOSE_WAIT: the server is gone


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of process ``pid`` so far."""
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def rss_mb(pid: int) -> float:
    return psutil.Process(pid).memory_info().rss / (1 << 20)


def rss_settles(pid: int, target_mb: float, within: float, period: float = 1.0) -> tuple[float, float | None]:
    """Wait up to ``within`` seconds for ``pid``'s RSS to fall to ``target_mb``: (the RSS last
    seen, the seconds it took or None)."""
    start = time.monotonic()
    while True:
        now = rss_mb(pid)
        if now <= target_mb:
            return now, time.monotonic() - start
        if time.monotonic() - start >= within:
            return now, None
        time.sleep(period)
