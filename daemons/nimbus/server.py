"""The HTTP(S) server around nimbus's WSGI app (cheroot), bound at start and stopped cleanly.

cheroot rather than waitress: waitress serves no TLS at all (it expects a proxy in front),
while cheroot (CherryPy's server, pure Python, one small dependency) serves TLS from the
standard ``ssl`` module in the same thread pool. Plain HTTP sent to the TLS port gets
cheroot's 400 that says the port speaks HTTPS only (see ``_plain_http``).
"""
from __future__ import annotations

import re
import socket
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any

from cheroot import errors, wsgi
from cheroot.ssl.builtin import BuiltinSSLAdapter

from squall.daemons.metrics.families import Series
from squall.daemons.nimbus.api import StartResponse
from squall.daemons.nimbus.tls_material import TlsMaterial, server_context
from squall.daemons.timers import SYSTEM_CLOCK, Clock

WSGIApp = Any  # Callable[[dict, StartResponse], Iterable[bytes]]
THREADS = 8
# Seconds a connection may sit idle or take over its TLS handshake: cheroot does the
# handshake on its accepting thread, so this also bounds how long one silent client
# can hold up new connections.
SOCKET_TIMEOUT = 5
ACCEPTED_QUEUE = 64               # connections waiting for a thread; more wait in the kernel's backlog
MAX_HEADER_BYTES = 256 * 1024     # request line and headers
ErrorLog = Callable[..., None]    # (msg, level=20, traceback=False), cheroot's error_log
TLS_HANDSHAKE = 0x16              # the first byte of a TLS client's first record
DRAIN_BYTES = 64 * 1024           # of a plain HTTP request read before the 400
DRAIN_SECS = 0.2
_CONTENT_LENGTH = re.compile(rb"(?im)^content-length:[ \t]*(\d{1,9})")


def _plain_http(sock: socket.socket) -> bool:
    """Does the client speak plain HTTP (its first byte starts a request line, not a TLS
    record)? Then read its request as far as it has come (bounded), so that closing the socket
    after cheroot's 400 sends FIN, not RST: the kernel resets a connection closed with unread
    data, and the client (curl) then loses the 400 and shows "Connection reset by peer"."""
    try:
        first = sock.recv(1, socket.MSG_PEEK)  # waits as the handshake would (the socket's timeout)
    except OSError:
        return False  # the handshake meets the same failure and cheroot counts it
    if not first or first[0] == TLS_HANDSHAKE or not first.isalpha():
        return False
    timeout = sock.gettimeout()
    deadline = time.monotonic() + DRAIN_SECS  # in all: this runs on cheroot's accepting thread
    seen = b""
    try:
        while len(seen) < DRAIN_BYTES and (left := deadline - time.monotonic()) > 0:
            sock.settimeout(left)
            chunk = sock.recv(DRAIN_BYTES - len(seen))
            seen += chunk
            head, end, body = seen.partition(b"\r\n\r\n")
            length = _CONTENT_LENGTH.search(head)
            if not chunk or (end and len(body) >= (int(length.group(1)) if length else 0)):
                break
    except OSError:
        pass  # all there was, within DRAIN_SECS
    finally:
        sock.settimeout(timeout)
    return True


class _ReloadingAdapter(BuiltinSSLAdapter):
    """cheroot's adapter, taking the context in force before each handshake. cheroot calls
    ``wrap`` on its accepting thread and ``wrap`` wraps with ``self.context``, so a new context
    serves only the connections accepted after it; open ones keep theirs. (The SSL_SERVER_*
    WSGI variables keep describing the first certificate; nothing here reads them.)"""

    def __init__(self, material: TlsMaterial) -> None:
        super().__init__(*material.files)
        self.material = material
        self.context = material.context()

    def wrap(self, sock: Any) -> Any:
        if _plain_http(sock):
            raise errors.NoSSLError("plain HTTP request on the TLS port")  # cheroot answers 400
        context = self.material.context()
        if context is not self.context:
            self.context = context
        return super().wrap(sock)


class ApiServer:
    """Binds on construction (OSError or ValueError when it cannot); ``start()`` serves on a
    thread, ``stop()`` closes the sockets and ends that thread. ``tls`` is (cert, key): read
    again when they change (:class:`TlsMaterial`), so a new certificate needs no restart."""

    def __init__(self, app: WSGIApp, host: str, port: int, max_body: int,
                 tls: tuple[str, str] | None = None, on_error: ErrorLog | None = None,
                 ident: str = "squall-nimbus", threads: int = THREADS, clock: Clock = SYSTEM_CLOCK) -> None:
        self._server = wsgi.Server((host, port), app, numthreads=threads, server_name=ident,
                                   timeout=SOCKET_TIMEOUT, shutdown_timeout=5,
                                   accepted_queue_size=ACCEPTED_QUEUE, accepted_queue_timeout=SOCKET_TIMEOUT)
        # The app answers 413 (JSON) above its limit; cheroot's own cap is a backstop.
        self._server.max_request_body_size = max_body
        self._server.max_request_header_size = MAX_HEADER_BYTES
        if on_error is not None:  # cheroot writes failed handshakes and its own errors to stderr
            self._server.error_log = on_error
        self._tls: TlsMaterial | None = None
        if tls is not None:
            cert, key = tls
            # TlsMaterialError (a ValueError) names the file and the problem.
            self._tls = TlsMaterial(tls, lambda: server_context(cert, key), "TLS certificate and key", clock)
            try:
                self._server.ssl_adapter = _ReloadingAdapter(self._tls)
            except (OSError, ssl.SSLError) as exc:  # the files changed since: a start fails as before
                raise ValueError(f"cannot load certificate file {cert} with key file {key}: {exc}") from None
        self._server.prepare()  # binds and listens
        self.tls = tls is not None
        self._thread = threading.Thread(target=self._serve, name=f"{ident}-http", daemon=True)

    def _serve(self) -> None:
        try:
            self._server.serve()
        finally:
            self._server.ready = False

    def tls_series(self) -> Series:
        """Changes of the certificate and key put in force and refused (none without TLS)."""
        out = Series()
        if self._tls is not None:
            out.add("squall_tls_reloads", ("loaded",), self._tls.loaded)
            out.add("squall_tls_reloads", ("refused",), self._tls.refused)
        return out

    @property
    def port(self) -> int:
        return int(self._server.bind_addr[1])

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._server.stop()
        if self._thread.is_alive():
            self._thread.join(timeout)


__all__ = ["ApiServer", "StartResponse"]
