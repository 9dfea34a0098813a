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
