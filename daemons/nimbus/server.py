"""The HTTP(S) server around nimbus's WSGI app (cheroot), bound at start and stopped cleanly.

cheroot rather than waitress: waitress serves no TLS at all (it expects a proxy in front),
while cheroot (CherryPy's server, pure Python, one small dependency) serves TLS from the
standard ``ssl`` module in the same thread pool, and answers plain HTTP sent to its TLS
port with a 400 that says so.
"""
from __future__ import annotations

import ssl
import threading
from collections.abc import Callable
from typing import Any

from cheroot import wsgi
from cheroot.ssl.builtin import BuiltinSSLAdapter

from squall.daemons.nimbus.api import StartResponse

WSGIApp = Any  # Callable[[dict, StartResponse], Iterable[bytes]]
THREADS = 8
# Seconds a connection may sit idle or take over its TLS handshake: cheroot does the
# handshake on its accepting thread, so this also bounds how long one silent client
# can hold up new connections.
SOCKET_TIMEOUT = 5
ACCEPTED_QUEUE = 64               # connections waiting for a thread; more wait in the kernel's backlog
MAX_HEADER_BYTES = 256 * 1024     # request line and headers
ErrorLog = Callable[..., None]    # (msg, level=20, traceback=False), cheroot's error_log


class ApiServer:
    """Binds on construction (OSError or ValueError when it cannot); ``start()`` serves on a
    thread, ``stop()`` closes the sockets and ends that thread. ``tls`` is (cert, key)."""

    def __init__(self, app: WSGIApp, host: str, port: int, max_body: int,
                 tls: tuple[str, str] | None = None, on_error: ErrorLog | None = None,
                 ident: str = "squall-nimbus", threads: int = THREADS) -> None:
        self._server = wsgi.Server((host, port), app, numthreads=threads, server_name=ident,
                                   timeout=SOCKET_TIMEOUT, shutdown_timeout=5,
                                   accepted_queue_size=ACCEPTED_QUEUE, accepted_queue_timeout=SOCKET_TIMEOUT)
        # The app answers 413 (JSON) above its limit; cheroot's own cap is a backstop.
        self._server.max_request_body_size = max_body
        self._server.max_request_header_size = MAX_HEADER_BYTES
        if on_error is not None:  # cheroot writes failed handshakes and its own errors to stderr
            self._server.error_log = on_error
        if tls is not None:
            try:
                adapter = BuiltinSSLAdapter(*tls)
            except (OSError, ssl.SSLError) as exc:
                raise ValueError(f"cannot load nimbus.tls.cert.file/key.file {tls}: {exc}") from None
            adapter.context.minimum_version = ssl.TLSVersion.TLSv1_2
            self._server.ssl_adapter = adapter
        self._server.prepare()  # binds and listens
        self.tls = tls is not None
        self._thread = threading.Thread(target=self._serve, name=f"{ident}-http", daemon=True)

    def _serve(self) -> None:
        try:
            self._server.serve()
        finally:
            self._server.ready = False

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
