"""Nimbus's HTTP JSON API as a small WSGI app (served by ``squall.daemons.http.server``).

Every request, reads included, needs ``Authorization: Bearer <token>`` when API security is
on (``auth.py``): 401 without a known token, 403 without the right; either way nothing runs.

Routes (all under ``/api/v1``; errors are ``{"error": "..."}`` with a 4xx/5xx status):

    POST /topologies?name=NAME              body: bundle.tar.gz      -> {"id", "name", ...}
    POST /topologies/<name>/kill            {"wait_secs": S}
    POST /topologies/<name>/activate | deactivate
    POST /topologies/<name>/rebalance       {"num_workers": n, "executors": {c: n}, "wait_secs": S}
    GET  /topologies                        -> {"topologies": [...]}
    GET  /topologies/<name or id>           -> status of one topology
    GET  /topologies/<id>/bundle            -> the bundle, header X-Squall-Digest
    GET  /topologies/<name>/conf            -> {"conf": the topology's configuration}
    GET  /topologies/<name>/errors          -> {"errors": [...]} newest first
    GET  /topologies/<name>/logs/<node>/<port>?lines=N | ?offset=O&inode=I
                                            -> a worker's log, from its supervisor's logviewer
    POST /topologies/<name>/log-levels      {"levels": {logger: level or "RESET"}, "timeout_secs": S}
    POST /topologies/<name>/debug           {"component": c or null, "percent": p (0: off), "timeout_secs": S}
    POST /topologies/<name>/profiles        {"worker": "host:port", "kind": "stack"|"record"|"heap", "secs": S}
    POST /topologies/<name>/kill-workers    every worker restarts
    GET  /topologies/<name>/operations      -> what is asked of its workers now
    GET  /topologies/<name>/debug?component=C&limit=N -> {"samples": [...]} (the workers' events logs)
    GET  /topologies/<name>/profiles/<id>   -> {"text": the profile} (404 until it is written)
    GET  /topologies/<name>/history?window=S -> component counters over time (the topology page's plot)
    GET  /cluster                           -> supervisors, slots, nimbus leader
    POST /supervisors/<id>/report           a supervisor's report (role supervisor, the leader)
                                            -> {"supervisor", "beats"}

Outside ``/api/v1``, ``GET /`` and ``/ui/...`` serve the web UI's static files (``web.py``),
without a token: they hold no data (the UI asks for a token and sends it to the API).

A standby nimbus answers writes with 503 and ``{"leader": "host:port"}`` (the client
retries there). A topology the caller may not see is answered 404, as a missing one is.
Who may act is decided before a body is read: bodies are streamed against their limit
(a bundle straight to disk), and a malformed one is a 400. A traceback never reaches the
client: unexpected errors are logged with their stack and answered with 500.
"""
from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import structlog

from squall.daemons.http.body import PIECE, BodyError
from squall.daemons.nimbus import web
from squall.daemons.nimbus.auth import CONTROL, FETCH_CODE, READ, READ_LOGS, REPORT, SUBMIT, Principal, authorize
from squall.daemons.nimbus.guard import ApiError, Guard, json_response, refusal, status_line
from squall.daemons.nimbus.status_records import TopologyStatus
from squall.daemons.reports import MAX_REPORT_BYTES
from squall.daemons.state import ClusterStateError

log = structlog.get_logger("squall.nimbus.api")

API = "/api/v1"
MAX_JSON_BODY = 1 << 20

StartResponse = Callable[..., Any]


class Sink(Protocol):
    """Where a streamed body goes (nimbus's upload file)."""

    def write(self, data: bytes) -> Any: ...


class NimbusService(Protocol):
    """What the API needs of nimbus (``squall.daemons.nimbus.Nimbus``)."""

    max_upload: int

    def submit(self, name: str, receive: Callable[[Sink], None], owner: str) -> dict[str, Any]: ...
    def owner_of(self, name: str) -> str | None: ...
    def kill(self, name: str, wait_secs: Any) -> dict[str, Any]: ...
    def activate(self, name: str) -> dict[str, Any]: ...
    def deactivate(self, name: str) -> dict[str, Any]: ...
    def rebalance(self, name: str, num_workers: Any, executors: Any, wait_secs: Any) -> dict[str, Any]: ...
    def list_topologies(self) -> list[dict[str, Any]]: ...
    def topology_status(self, name: str) -> TopologyStatus: ...
    def topology_conf(self, name: str) -> dict[str, Any]: ...
    def topology_errors(self, name: str) -> dict[str, Any]: ...
    def worker_log(self, name: str, node: str, port: int, lines: int | None = None, offset: int | None = None,
                   inode: int | None = None) -> dict[str, Any]: ...
    def cluster_info(self) -> dict[str, Any]: ...
    def bundle(self, topology_id: str) -> tuple[bytes, str]: ...
    def take_report(self, supervisor_id: str, data: bytes) -> dict[str, Any]: ...
    def operate(self, name: str, action: str, body: dict[str, Any], user: str) -> dict[str, Any]: ...
    def operator_read(self, name: str, what: str, params: dict[str, Any]) -> dict[str, Any]: ...


_TOPOLOGY = re.compile(r"^/topologies/([^/]+)$")
_ACTION = re.compile(r"^/topologies/([^/]+)/(kill|activate|deactivate|rebalance|bundle)$")
_READ = re.compile(r"^/topologies/([^/]+)/(conf|errors)$")
_LOG = re.compile(r"^/topologies/([^/]+)/logs/([^/]+)/(\d{1,5})$")
_REPORT = re.compile(r"^/supervisors/([^/]+)/report$")
_OPERATE = re.compile(r"^/topologies/([^/]+)/(log-levels|debug|profiles|kill-workers|operations|history)$")
_PROFILE = re.compile(r"^/topologies/([^/]+)/profiles/([^/]{1,80})$")
# What an operator may ask (POST) and read (GET) of a topology's workers, and the right each needs.
_OPERATE_POST = ("log-levels", "debug", "profiles", "kill-workers")
_OPERATE_GET = {"operations": READ, "history": READ, "debug": READ_LOGS}


def no_such_topology(name: str) -> str:
    """What a topology that does not exist, or that the caller may not see, is answered."""
    return f"no topology named {name!r}"


def _content_length(environ: dict[str, Any]) -> int | None:
    raw = environ.get("CONTENT_LENGTH") or ""
    if not raw:
        return None
    if not raw.isdigit():
        raise ApiError(400, f"bad Content-Length {raw[:40]!r}", reason="malformed")
    return int(raw)


def body_pieces(environ: dict[str, Any], limit: int, what: str) -> Iterator[bytes]:
    """The request body in pieces, refused (413) as soon as it passes ``limit``: a declared
    length before a byte is read, a chunked body as it arrives. Never held whole."""
    length = _content_length(environ)
    if length is not None and length > limit:
        raise ApiError(413, f"{what} is {length} bytes, above the limit of {limit} bytes", reason="too-large")
    stream, total = environ["wsgi.input"], 0
    while piece := stream.read(PIECE):
        total += len(piece)
        if total > limit:
            raise ApiError(413, f"{what} is above the limit of {limit} bytes", reason="too-large")
        yield piece


def copy_body(environ: dict[str, Any], limit: int, what: str, out: Sink) -> None:
    """Stream the request body into ``out`` (413 past ``limit``)."""
    for piece in body_pieces(environ, limit, what):
        out.write(piece)


def _json_body(environ: dict[str, Any]) -> dict[str, Any]:
    data = b"".join(body_pieces(environ, MAX_JSON_BODY, "request body"))
    if not data.strip():
        return {}
    try:
        body = json.loads(data)
    except RecursionError:
        raise ApiError(400, "request body is nested too deeply", reason="malformed") from None
    except ValueError as exc:
        raise ApiError(400, f"request body is not valid JSON: {exc}", reason="malformed") from None
    if not isinstance(body, dict):
        raise ApiError(400, "request body must be a JSON object", reason="malformed")
    return body


def _query_int(environ: dict[str, Any], key: str, low: int, high: int) -> int | None:
    values = urllib.parse.parse_qs(environ.get("QUERY_STRING", "")).get(key)
    if not values:
        return None
    if not values[0].isdigit() or not low <= int(values[0]) <= high:
        raise ApiError(400, f"parameter {key!r} must be an integer from {low} to {high}, "
                            f"got {values[0][:40]!r}")
    return int(values[0])


def _operator_params(environ: dict[str, Any], what: str) -> dict[str, Any]:
    """The query of an operator read, checked: ``debug`` takes ``component`` and ``limit``
    (1 to 1000 samples), ``history`` a ``window`` in seconds."""
    if what == "debug":
        values = urllib.parse.parse_qs(environ.get("QUERY_STRING", "")).get("component")
        component = values[0] if values else None
        if component is not None and not 0 < len(component) <= 200:
            raise ApiError(400, "parameter 'component' must be 1 to 200 characters")
        return {"component": component, "limit": _query_int(environ, "limit", 1, 1000) or 100}
    if what == "history":
        return {"window": _query_int(environ, "window", 1, 1 << 40)}
    return {}


Handler = Callable[[], list[bytes]]


def make_app(nimbus: NimbusService, guard: Guard,
             metrics: Callable[[dict[str, Any], StartResponse], Any] | None = None,
             ) -> Callable[[dict[str, Any], StartResponse], list[bytes]]:
    """The WSGI application serving ``nimbus``; every request passes ``guard`` first.
    ``metrics`` answers ``/metrics`` (Prometheus scrapes it with a bearer token, as a read)."""

    def not_allowed(method: str, path: str, allow: str) -> ApiError:
        return ApiError(405, f"{method} is not allowed on {API}{path}", allow=allow)

    def route(method: str, path: str, environ: dict[str, Any], start_response: StartResponse,
              who: Principal) -> tuple[str, str | None, Handler]:
        """(action, topology named by the request or None, what answers it); 404/405 otherwise."""
        def reply(body: Any) -> list[bytes]:
            return json_response(start_response, 200, body)

        if path == "/topologies":
            if method == "GET":
                def listing() -> list[bytes]:
                    rows = [r for r in nimbus.list_topologies()
                            if authorize(who.role, who.user, READ, r.get("owner", ""))]
                    return reply({"topologies": rows})
                return READ, None, listing
            if method == "POST":
                query = urllib.parse.parse_qs(environ.get("QUERY_STRING", ""))
                name = (query.get("name") or [""])[0]
                return SUBMIT, None, lambda: reply(nimbus.submit(
                    name, lambda out: copy_body(environ, nimbus.max_upload, "bundle", out), who.user))
            raise not_allowed(method, path, "GET, POST")
        if path == "/cluster":
            if method != "GET":
                raise not_allowed(method, path, "GET")
            return READ, None, lambda: reply({**nimbus.cluster_info(), "api": {"refused": guard.refusals.counts()}})
        match = _REPORT.match(path)
        if match:
            if method != "POST":
                raise not_allowed(method, path, "POST")
            supervisor_id = match.group(1)
            # The body is read in the handler: after the caller was found to be a supervisor.
            return REPORT, None, lambda: reply(nimbus.take_report(
                supervisor_id, b"".join(body_pieces(environ, MAX_REPORT_BYTES, "report"))))
        match = _TOPOLOGY.match(path)
        if match:
            if method != "GET":
                raise not_allowed(method, path, "GET")
            name = match.group(1)
            return READ, name, lambda: reply(nimbus.topology_status(name).to_dict())
        match = _READ.match(path) or _LOG.match(path)
        if match:
            if method != "GET":
                raise not_allowed(method, path, "GET")
            if match.re is _LOG:
                name, node, port = match.groups()
                lines = _query_int(environ, "lines", 1, 100_000)
                offset = _query_int(environ, "offset", 0, 1 << 62)
                inode = _query_int(environ, "inode", 0, 1 << 64)
                return READ, name, lambda: reply(nimbus.worker_log(
                    name, node, int(port), lines=lines, offset=offset, inode=inode))
            name, what = match.groups()
            read = nimbus.topology_conf if what == "conf" else nimbus.topology_errors
            return READ, name, lambda: reply(read(name))
        match = _OPERATE.match(path) or _PROFILE.match(path)
        if match:
            if match.re is _PROFILE:
                if method != "GET":
                    raise not_allowed(method, path, "GET")
                name, profile_id = match.groups()
                return READ_LOGS, name, lambda: reply(nimbus.operator_read(name, "profile", {"id": profile_id}))
            name, what = match.groups()
            if method == "GET" and what in _OPERATE_GET:
                params = _operator_params(environ, what)
                return _OPERATE_GET[what], name, lambda: reply(nimbus.operator_read(name, what, params))
            if method == "POST" and what in _OPERATE_POST:
                return CONTROL, name, lambda: reply(nimbus.operate(name, what, _json_body(environ), who.user))
            allowed = ", ".join(m for m, ok in (("GET", what in _OPERATE_GET), ("POST", what in _OPERATE_POST))
                                if ok)
            raise not_allowed(method, path, allowed)
        match = _ACTION.match(path)
        if not match:
            raise ApiError(404, f"no such resource: {API}{path}")
        name, action = match.groups()
        if action == "bundle":
            if method != "GET":
                raise not_allowed(method, path, "GET")

            def bundle() -> list[bytes]:
                data, digest = nimbus.bundle(name)
                start_response(status_line(200), [
                    ("Content-Type", "application/gzip"), ("Content-Length", str(len(data))),
                    ("X-Squall-Digest", digest)])
                return [data]
            return FETCH_CODE, name, bundle
        if method != "POST":
            raise not_allowed(method, path, "POST")

        def control() -> list[bytes]:
            body = _json_body(environ)  # only once the caller may act
            if action == "kill":
                return reply(nimbus.kill(name, body.get("wait_secs")))
            if action == "activate":
                return reply(nimbus.activate(name))
            if action == "deactivate":
                return reply(nimbus.deactivate(name))
            return reply(nimbus.rebalance(name, body.get("num_workers"), body.get("executors"),
                                          body.get("wait_secs")))
        return CONTROL, name, control

    def app(environ: dict[str, Any], start_response: StartResponse) -> list[bytes]:
        method = environ.get("REQUEST_METHOD", "GET").upper()
        raw_path = environ.get("PATH_INFO", "") or "/"
        try:
            page = web.static_file(raw_path) if method in ("GET", "HEAD") else None
            if page is not None:  # the UI's own files: no data in them
                return web.respond(start_response, page, method == "HEAD")
            who = guard.principal(environ)  # before anything else: no API route is open
            if metrics is not None and raw_path.rstrip("/") == "/metrics" and method in ("GET", "HEAD"):
                guard.check(who, READ, None, "GET /metrics")
                return metrics(environ, start_response)
            if not raw_path.startswith(API + "/"):
                raise ApiError(404, f"no such resource: {raw_path} (the API lives under {API}/)")
            path = raw_path[len(API):].rstrip("/") or "/"
            # PATH_INFO arrives %-decoded as latin-1 (PEP 3333); names are UTF-8.
            path = path.encode("latin-1").decode("utf-8", "replace")
            action, target, handler = route(method, path, environ, start_response, who)
            owner = None
            if target is not None:
                owner = nimbus.owner_of(target)
                if owner is None:
                    raise ApiError(404, no_such_topology(target), reason="not-found")
            guard.check(who, action, owner, f"topology {target!r}" if target else f"{method} {API}{path}",
                        missing=no_such_topology(target) if target is not None else None)
            return handler()
        except BodyError as exc:  # counted by the server; 499: the client is gone
            return json_response(start_response, exc.status if exc.status != 499 else 400, {"error": str(exc)})
        except ApiError as exc:
            if exc.reason is not None or exc.status == 404:
                exc.reason = exc.reason or "not-found"
                return refusal(guard, exc, environ, start_response)
            headers = [("Allow", exc.extra.pop("allow"))] if "allow" in exc.extra else []
            if exc.status >= 500:
                log.warning("request failed", method=method, path=raw_path, status=exc.status,
                            error=str(exc))
            return json_response(start_response, exc.status, {"error": str(exc), **exc.extra}, headers)
        except ClusterStateError as exc:
            log.warning("ZooKeeper unavailable", method=method, path=raw_path, error=str(exc))
            return json_response(start_response, 503, {"error": f"ZooKeeper unavailable: {exc}"})
        except Exception as exc:  # noqa: BLE001 - logged with its stack; the client gets a line
            log.exception("request crashed", method=method, path=raw_path)
            return json_response(start_response, 500,
                                  {"error": f"internal error: {type(exc).__name__}: {exc}"})

    return app
