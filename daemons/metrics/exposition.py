"""Serving ``/metrics``: a collector that builds every series at scrape time, and the WSGI
pieces nimbus mounts next to its API and a supervisor serves on its own port.

On nimbus ``/metrics`` passes the API's guard like any read (``api.make_app``): Prometheus
sends a token with the ``authorization`` block of its scrape config.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import structlog
from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import Metric

from squall.daemons.metrics.families import Series

log = structlog.get_logger("squall.metrics")

PATH = "/metrics"
WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class SnapshotCollector:
    """Calls ``build`` on every scrape; a failing build is logged and exports nothing
    (the endpoint keeps answering)."""

    def __init__(self, build: Callable[[], Series]) -> None:
        self._build = build

    def collect(self) -> Iterable[Metric]:
        try:
            series = self._build()
        except Exception:  # noqa: BLE001 - a scrape must never take the daemon down
            log.exception("building metrics failed")
            return []
        return series.families()


def serve(environ: dict[str, Any], start_response: Callable[..., Any],
          build: Callable[[], Series]) -> Iterable[bytes]:
    """Answer ``GET /metrics`` (Prometheus text format, or OpenMetrics when asked) with the
    series ``build`` returns, built for this request (a caller may see only some); 404
    elsewhere, 405 for other methods."""
    path = environ.get("PATH_INFO") or "/"
    if path.rstrip("/") != PATH:
        return _plain(start_response, "404 Not Found", f"no such resource: {path[:200]} (try {PATH})\n")
    if environ.get("REQUEST_METHOD", "GET").upper() not in ("GET", "HEAD"):
        return _plain(start_response, "405 Method Not Allowed", "only GET\n", [("Allow", "GET")])
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(build))
    return make_wsgi_app(registry)(environ, start_response)


def metrics_app(build: Callable[[], Series]) -> WSGIApp:
    """A WSGI app serving ``serve`` with the same ``build`` for every caller."""
    return lambda environ, start_response: serve(environ, start_response, build)


def _plain(start_response: Callable[..., Any], status: str, text: str,
           headers: list[tuple[str, str]] | None = None) -> list[bytes]:
    data = text.encode()
    start_response(status, [("Content-Type", "text/plain; charset=utf-8"),
                            ("Content-Length", str(len(data))), *(headers or [])])
    return [data]
