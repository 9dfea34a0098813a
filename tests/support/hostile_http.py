"""Hostile HTTP clients for the tests and bench/http_bench.py: connections that hold a
server without finishing a request, floods of broken handshakes, oversized chunked uploads,
and a timed probe of the real API while they run.

Kinds of slow client (each keeps its connection count up, reconnecting when the server
closes one, as an attacker would):

- ``slow-headers``: completes TLS (when the server speaks it), then sends a request's header
  bytes one at a time, one every ``interval`` seconds, never ending the headers;
- ``idle-tcp``: opens a TCP connection and sends nothing (no TLS ClientHello either).
"""
from __future__ import annotations

import http.client
import socket
import ssl
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import psutil

KINDS = ("slow-headers", "idle-tcp")
_HEAD = b"GET /api/v1/topologies HTTP/1.1\r\nHost: squall\r\nX-Slow: "


# Where slow clients connect from: loopback addresses other than the probes' 127.0.0.1, two of
# them, so that 100 slow clients stay under a server's 64 connections per address.
SLOW_SOURCES = ("127.0.0.2", "127.0.0.3")


class SlowClients:
    """``n`` connections of ``kind`` to ``host:port``, kept open until ``stop()``, spread over
    the source addresses ``sources`` in turn."""

    def __init__(self, host: str, port: int, n: int, kind: str, tls: ssl.SSLContext | None = None,
                 interval: float = 3.0, sources: tuple[str, ...] = SLOW_SOURCES) -> None:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        self.host, self.port, self.n, self.kind, self.tls, self.interval = host, port, n, kind, tls, interval
        self.sources = sources
        self.connects = 0       # connections opened (reconnections included)
        self.closed_by_server = 0
        self._socks: list[socket.socket | None] = [None] * n
        self._sent: list[int] = [0] * n  # header bytes sent on each connection
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"slow-{kind}", daemon=True)

    def _open(self, i: int) -> socket.socket | None:
        try:
            sock = socket.create_connection((self.host, self.port), timeout=5,
                                            source_address=(self.sources[i % len(self.sources)], 0))
        except OSError:
            return None
        try:
            if self.kind == "slow-headers" and self.tls is not None:
                sock = self.tls.wrap_socket(sock, server_hostname=self.host)
            sock.settimeout(1.0)
        except OSError:
            sock.close()
            return None
        self.connects += 1
        return sock

    def _alive(self, i: int, sock: socket.socket) -> bool:
        """False once the server has closed it (or reset it)."""
        if self.kind == "slow-headers":
            n = self._sent[i]
            try:
                sock.send(_HEAD[n:n + 1] or b"a")
                self._sent[i] += 1
                return True
            except OSError:
                return False
        try:  # idle: never send; the server closing shows as a readable EOF
            sock.setblocking(False)
            try:
                return sock.recv(1, socket.MSG_PEEK) != b""
            except BlockingIOError:
                return True
            finally:
                sock.setblocking(True)
        except OSError:
            return False

    def _run(self) -> None:
        while not self._stop.is_set():
            for i, sock in enumerate(self._socks):
                if self._stop.is_set():
                    break
                if sock is not None and not self._alive(i, sock):
                    self.closed_by_server += 1
                    sock.close()
                    sock = self._socks[i] = None
                if sock is None:
                    self._socks[i], self._sent[i] = self._open(i), 0
            self._stop.wait(self.interval)

    def start(self) -> SlowClients:
        """Open the connections (on this thread), then keep them up on a thread of their own."""
        for i in range(self.n):
            self._socks[i] = self._open(i)
        self._thread.start()
        return self

    @property
    def open(self) -> int:
        return sum(s is not None for s in self._socks)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        for sock in self._socks:
            if sock is not None:
                sock.close()
        self._socks = [None] * self.n

    def __enter__(self) -> SlowClients:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


@dataclass
class Probe:
    """Latencies of one kind of real request, sent one after another, each on a new
    connection (as the CLI does); failures are kept with their reason."""

    latencies: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def run(self, request: Callable[[], Any], seconds: float, pause: float = 0.1) -> Probe:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            start = time.monotonic()
            try:
                request()
                self.latencies.append(time.monotonic() - start)
            except Exception as exc:  # noqa: BLE001 - a failed probe is a figure, not a crash
                self.failures.append(f"after {time.monotonic() - start:.1f}s: {type(exc).__name__}: {exc}"[:300])
            time.sleep(pause)
        return self

    @property
    def p99(self) -> float:
        """The 99th percentile latency (a failed request counts as infinitely slow)."""
        return percentile(sorted(self.latencies + [float("inf")] * len(self.failures)), 0.99)

    @property
    def worst(self) -> float:
        return max(self.latencies, default=float("inf"))

    def summary(self) -> dict[str, Any]:
        lat = sorted(self.latencies)
        return {"requests": len(lat), "failures": len(self.failures),
                "p50_ms": round(statistics.median(lat) * 1000, 1) if lat else None,
                "p99_ms": round(percentile(lat, 0.99) * 1000, 1) if lat else None,
                "max_ms": round(lat[-1] * 1000, 1) if lat else None,
                "first_failure": self.failures[0] if self.failures else None}


def percentile(ordered: list[float], q: float) -> float:
    """The ``q`` quantile of sorted values (nearest rank); infinity for none."""
    if not ordered:
        return float("inf")
    return ordered[min(len(ordered) - 1, max(0, int(q * len(ordered) + 0.999999) - 1))]


def reset_flood(host: str, port: int, n: int, tls: ssl.SSLContext, within: float = 600.0) -> int:
    """``n`` TLS connections (fewer if ``within`` seconds pass first) that send part of a
    request's headers and then reset (RST, not FIN); returns how many got that far."""
    done = 0
    deadline = time.monotonic() + within
    for _ in range(n):
        if time.monotonic() > deadline:
            break
        try:
            sock = tls.wrap_socket(socket.create_connection((host, port), timeout=5), server_hostname=host)
            sock.sendall(b"POST /api/v1/topologies HTTP/1.1\r\nHost: x\r\nContent-")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            sock.close()  # linger 0: RST
            done += 1
        except OSError:
            continue
    return done


def chunked_upload(host: str, port: int, path: str, headers: dict[str, str], total: int,
                   tls: ssl.SSLContext | None, chunk: int = 1 << 16, timeout: float = 60.0) -> int | str:
    """POST ``total`` bytes as a chunked body; the status nimbus answers with, or why none came."""
    conn = (http.client.HTTPSConnection(host, port, timeout=timeout, context=tls) if tls is not None
            else http.client.HTTPConnection(host, port, timeout=timeout))
    block = bytes(range(256)) * (chunk // 256)
    sent = 0

    def body() -> Iterator[bytes]:
        nonlocal sent
        while sent < total:
            sent += len(block)
            yield block

    try:
        conn.request("POST", path, body=body(), headers={**headers, "Content-Type": "application/gzip"},
                     encode_chunked=True)
        return conn.getresponse().status
    except OSError as exc:
        # The server may answer 413 and close while the body is still coming.
        try:
            return conn.getresponse().status
        except (OSError, http.client.HTTPException):
            return f"{type(exc).__name__} after {sent} bytes"
    finally:
        conn.close()


class RssSampler:
    """The peak resident memory of process ``pid``, sampled every ``period`` seconds."""

    def __init__(self, pid: int, period: float = 0.05) -> None:
        self.proc = psutil.Process(pid)
        self.period = period
        self.start_rss = self.proc.memory_info().rss
        self.peak = self.start_rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            try:
                self.peak = max(self.peak, self.proc.memory_info().rss)
            except psutil.Error:
                return

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(5)
