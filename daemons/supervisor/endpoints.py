"""A supervisor's HTTP endpoints: Prometheus ``/metrics`` (``supervisor.metrics.port``) and
the logviewer (``supervisor.logviewer.port``), both bound to ``supervisor.host`` and served
by the daemons' HTTP server (``squall.daemons.http``), with its deadlines and bounds.

Both take the API's bearer tokens, checked against the table the leading nimbus publishes
in ZooKeeper (``auth.PublishedTokenSource``): a token added or revoked on nimbus applies
here within seconds, and until a table arrives every caller is refused. ``/metrics`` is a
read of the cluster (admin, user, viewer), and a ``user`` is shown only its own topologies'
worker series (``auth.topology_filter``); logs follow ``auth.READ_LOGS``. With
``supervisor.tls.cert.file`` and ``supervisor.tls.key.file`` set both serve TLS only.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from squall.daemons.http.limits import HttpLimits
from squall.daemons.http.refusals import Refusals
from squall.daemons.http.server import HttpServer
from squall.daemons.http.tls_material import TlsMaterial, TlsMaterialError, server_context
from squall.daemons.http.wsgi import WSGIApp
from squall.daemons.metrics.exposition import serve
from squall.daemons.metrics.families import Series
from squall.daemons.nimbus.access import server_tls_files
from squall.daemons.nimbus.auth import READ, PublishedTokenSource, topology_filter
from squall.daemons.nimbus.guard import ApiError, Guard, refusal
from squall.daemons.state import PublishedTokens
from squall.daemons.supervisor import logviewer
from squall.daemons.timers import Clock
from squall.errors import SquallError

# The series of the workers whose topology the caller may see (a predicate on topology ids).
BuildSeries = Callable[[Callable[[str], bool]], Series]


class EndpointError(SquallError, RuntimeError):
    """An endpoint cannot be served (port taken, unusable TLS files); the message says which."""


def guarded_metrics(build: BuildSeries, guard: Guard, owner_of: logviewer.OwnerOf) -> WSGIApp:
    """``/metrics`` behind ``guard`` (a read of the cluster), built for each caller: what
    ``topology_filter`` lets it see."""

    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        try:
            who = guard.principal(environ)
            guard.check(who, READ, None, "GET /metrics")
        except ApiError as exc:
            return refusal(guard, exc, environ, start_response)
        visible = topology_filter(who, owner_of)
        return serve(environ, start_response, lambda: build(visible))

    return guarded


class Endpoints:
    """The two servers, their shared guard, refusal counters and TLS material, and the token
    table they apply."""

    def __init__(self, conf: Mapping[str, Any], host: str, clock: Clock, logger: Any) -> None:
        self.conf, self.host, self.log, self.clock = conf, host, logger, clock
        self.tokens = PublishedTokenSource()
        self.refusals = Refusals(clock)
        self.guard = Guard(self.tokens, self.refusals)
        self.limits = HttpLimits.from_conf(conf)
        try:
            self.tls = server_tls_files(conf, "supervisor")
        except ValueError as exc:
            raise EndpointError(str(exc)) from None
        self._material: TlsMaterial | None = None
        self.metrics: HttpServer | None = None
        self.logviewer: HttpServer | None = None

    @property
    def scheme(self) -> str:
        return "https" if self.tls else "http"

    def _tls_material(self, key: str) -> TlsMaterial | None:
        if self.tls is not None and self._material is None:
            cert, pem_key = self.tls
            try:
                self._material = TlsMaterial(self.tls, lambda: server_context(cert, pem_key),
                                             "supervisor TLS certificate and key", self.clock)
            except TlsMaterialError as exc:
                raise EndpointError(f"cannot serve {key}: {exc}") from None
        return self._material

    def _serve(self, app: WSGIApp, key: str, what: str, threads: int) -> HttpServer | None:
        port = self.conf.get(key)
        if port is None:
            self.log.info(f"{what} off: {key} is null")
            return None
        try:
            server = HttpServer(app, self.host, int(port), max_body=4096, refusals=self.refusals,
                                limits=self.limits, tls=self._tls_material(key), name=f"supervisor-{what}",
                                threads=threads)
        except OSError as exc:
            raise EndpointError(f"cannot serve the {what} on {self.host}:{port} ({key}): {exc}") from None
        server.start()
        self.log.info(f"{what} served", url=f"{self.scheme}://{self.host}:{server.port}")
        return server

    def serve_metrics(self, build: BuildSeries, owner_of: logviewer.OwnerOf) -> None:
        """Serve /metrics (unless ``supervisor.metrics.port`` is null)."""
        if self.tls is None:
            self.log.warning("SECURITY OFF: supervisor.tls.cert.file/key.file unset: /metrics and worker "
                             "logs are served over plain HTTP, and callers' tokens travel in clear")
        self.metrics = self._serve(guarded_metrics(build, self.guard, owner_of),
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

    def series(self) -> Series:
        """Refusals of both servers, and certificate reloads (one material serves both)."""
        out = self.refusals.series()
        if self._material is not None:
            out.extend(self._material.series())
        return out

    def stop(self) -> None:
        for server in (self.logviewer, self.metrics):
            if server is not None:
                server.stop()
        self.logviewer = self.metrics = None
