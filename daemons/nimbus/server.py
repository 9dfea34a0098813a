"""The HTTP server around nimbus's WSGI app (waitress), bound at start and stopped cleanly."""
from __future__ import annotations

import threading
from typing import Any

from waitress import create_server, wasyncore

from squall.daemons.nimbus.api import StartResponse

WSGIApp = Any  # Callable[[dict, StartResponse], Iterable[bytes]]


class ApiServer:
    """Binds on construction (OSError or ValueError when it cannot); ``start()`` serves on a
    thread, ``stop()`` closes the sockets and ends that thread."""

    def __init__(self, app: WSGIApp, host: str, port: int, max_body: int) -> None:
        self._server = create_server(
            app, host=host, port=port, threads=8, ident="squall-nimbus",
            # The app answers 413 (JSON) above its limit; waitress's own cap is a backstop.
            max_request_body_size=max_body, clear_untrusted_proxy_headers=True)
        self._thread = threading.Thread(target=self._server.run, name="nimbus-http", daemon=True)

    @property
    def port(self) -> int:
        port = getattr(self._server, "effective_port", None)
        if port is None:
            port = (getattr(self._server, "effective_listen", None) or [(None, 0)])[0][1]
        return int(port)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        if not self._thread.is_alive():
            self._server.close()
            return
        self._server.task_dispatcher.shutdown(timeout=timeout)
        socket_map = getattr(self._server, "map", None) or getattr(self._server, "_map", {})
        wasyncore.close_all(socket_map)  # the loop ends once its map is empty
        self._thread.join(timeout)


__all__ = ["ApiServer", "StartResponse"]
