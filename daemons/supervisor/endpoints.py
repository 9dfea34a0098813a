"""A supervisor's HTTP endpoints: Prometheus ``/metrics`` (``supervisor.metrics.port``) and
the logviewer (``supervisor.logviewer.port``), both bound to ``supervisor.host``.

Both take the API's bearer tokens, checked against the table the leading nimbus publishes
in ZooKeeper (``auth.PublishedTokenSource``): a token added or revoked on nimbus applies
here within seconds, and until a table arrives every caller is refused. ``/metrics`` is a
read of the cluster (admin, user, viewer); logs follow ``auth.READ_LOGS``. With
``supervisor.tls.cert.file`` and ``supervisor.tls.key.file`` set both serve TLS only.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from squall.daemons.metrics.exposition import WSGIApp, metrics_app
from squall.daemons.metrics.families import Series
from squall.daemons.nimbus.access import server_tls_files
from squall.daemons.nimbus.auth import READ, PublishedTokenSource
from squall.daemons.nimbus.guard import ApiError, Guard, refusal
from squall.daemons.nimbus.server import ApiServer
from squall.daemons.state import PublishedTokens
from squall.daemons.supervisor import logviewer
from squall.daemons.timers import Clock


class EndpointError(RuntimeError):
    """An endpoint cannot be served (port taken, unusable TLS files); the message says which."""


def guarded_metrics(app: WSGIApp, guard: Guard) -> WSGIApp:
    """``app`` (the Prometheus exporter) behind ``guard``: a read of the cluster."""

    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        try:
            guard.check(guard.principal(environ), READ, None, "GET /metrics")
        except ApiError as exc:
            return refusal(guard, exc, environ, start_response)
        return app(environ, start_response)

    return guarded


class Endpoints:
    """The two servers, their shared guard and the token table they apply."""

    def __init__(self, conf: Mapping[str, Any], host: str, clock: Clock, logger: Any) -> None:
        self.conf, self.host, self.log, self.clock = conf, host, logger, clock
        self.tokens = PublishedTokenSource()
        self.guard = Guard(self.tokens, clock)
        try:
            self.tls = server_tls_files(conf, "supervisor")
        except ValueError as exc:
            raise EndpointError(str(exc)) from None
        self.metrics: ApiServer | None = None
        self.logviewer: ApiServer | None = None

    @property
    def scheme(self) -> str:
        return "https" if self.tls else "http"

    def _serve(self, app: WSGIApp, key: str, what: str, threads: int) -> ApiServer | None:
        port = self.conf.get(key)
        if port is None:
            self.log.info(f"{what} off: {key} is null")
            return None
        try:
            server = ApiServer(app, self.host, int(port), max_body=4096, tls=self.tls,
                               on_error=self.guard.server_error, ident="squall-supervisor", threads=threads,
                               clock=self.clock)
        except (OSError, ValueError) as exc:
            raise EndpointError(f"cannot serve the {what} on {self.host}:{port} ({key}): {exc}") from None
        server.start()
        self.log.info(f"{what} served", url=f"{self.scheme}://{self.host}:{server.port}")
        return server

    def serve_metrics(self, build: Callable[[], Series]) -> None:
        """Serve /metrics (unless ``supervisor.metrics.port`` is null)."""
        if self.tls is None:
            self.log.warning("SECURITY OFF: supervisor.tls.cert.file/key.file unset: /metrics and worker "
                             "logs are served over plain HTTP, and callers' tokens travel in clear")
        self.metrics = self._serve(guarded_metrics(metrics_app(build), self.guard),
                                   "supervisor.metrics.port", "metrics", threads=2)

    def serve_logs(self, lookup: logviewer.Lookup, owner_of: logviewer.OwnerOf) -> None:
        """Serve worker logs (unless ``supervisor.logviewer.port`` is null)."""
        app = logviewer.make_app(lookup, owner_of, self.guard, int(self.conf["worker.log.backups"]),
                                 int(self.conf["supervisor.logviewer.max.bytes"]))
        self.logviewer = self._serve(app, "supervisor.logviewer.port", "logviewer", threads=4)

    @property
    def logviewer_port(self) -> int | None:
        return self.logviewer.port if self.logviewer is not None else None

    def tokens_published(self, tokens: PublishedTokens | None) -> None:
        """ZooKeeper watch callback: apply the leading nimbus's token table."""
        what = self.tokens.update(tokens)
        if what == "on":
            self.log.info("API tokens from nimbus in force", tokens=len(tokens.entries) if tokens else 0)
        elif what == "off":
            self.log.warning("SECURITY OFF: nimbus runs with API authentication off, so this supervisor's "
                             "/metrics and worker logs are open to anyone who reaches them")
        elif what == "kept":
            self.log.warning("API tokens from nimbus missing or malformed; the last table stays in force")

    def refused(self) -> dict[str, int]:
        return self.guard.counts()

    def tls_series(self) -> Series:
        """Certificate reloads as the metrics server saw them (the one scraped often; the
        logviewer checks the same files for itself)."""
        return self.metrics.tls_series() if self.metrics is not None else Series()

    def stop(self) -> None:
        for server in (self.logviewer, self.metrics):
            if server is not None:
                server.stop()
        self.logviewer = self.metrics = None
