"""The supervisor's worker-log server (Storm's logviewer) and the client nimbus uses.

One route, ``GET /logs/<topology id>/<port>``: the log of the worker this supervisor runs
for that topology on that port. ``?lines=N`` gives the last N lines (across rotated
files), ``?offset=O&inode=I`` what was written after byte O of the current file (to
follow it). ``?file=events`` reads the worker's sampled tuples (``squall debug``) instead of
its log, and ``?file=profile-<id>`` a profile it took (``squall profile``). Replies are JSON
``{"text", "next_offset", "inode", "truncated", "worker_id"}``
and never carry more than ``supervisor.logviewer.max.bytes`` of log.

Who may read: the API's token scheme (``nimbus.guard``), with the tokens the leading
nimbus publishes. A ``supervisor`` token reads every log (nimbus proxies ``squall logs``
with its own after authorizing the caller); a ``user`` reads the logs of its own
topologies, ``viewer`` and ``admin`` all. Another user's topology is answered 404, as a
missing one is. Which files: only the current logs of workers
this supervisor launched, found by (topology, port) in its own records, so no path is
ever built from request text.
"""
from __future__ import annotations

import json
import re
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from squall.daemons.nimbus.access import ApiAccess
from squall.daemons.nimbus.auth import READ_LOGS
from squall.daemons.nimbus.guard import ApiError, Guard, json_response, refusal
from squall.daemons.state.operator_requests import valid_profile_id
from squall.daemons.supervisor.log_reader import read_from, tail
from squall.errors import SquallError

MAX_LINES = 100_000
DEFAULT_LINES = 100
_ROUTE = re.compile(r"^/logs/([^/]{1,200})/(\d{1,5})$")

# (topology id, port) -> (worker id, log path), or None when no such worker runs here
Lookup = Callable[[str, int], "tuple[str, Path] | None"]
# topology id -> the user who submitted it (None: no such topology)
OwnerOf = Callable[[str], "str | None"]


class LogViewerError(SquallError, RuntimeError):
    """A log could not be fetched; ``status`` is the HTTP status (0: unreachable)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def _int_param(query: dict[str, list[str]], key: str, low: int, high: int) -> int | None:
    values = query.get(key)
    if not values:
        return None
    raw = values[0]
    if not raw.isdigit() or not low <= int(raw) <= high:
        raise ValueError(f"parameter {key!r} must be an integer from {low} to {high}, got {raw[:40]!r}")
    return int(raw)


def worker_file(log_path: Path, which: str) -> tuple[Path, int] | None:
    """The file of the worker whose log is ``log_path`` that ``which`` names ("" or "log":
    the log; "events"; "profile-<id>"), with its backups; None when it names none. Paths are
    made from fixed names and a checked profile id, beside the log."""
    if which in ("", "log"):
        return log_path, -1
    if which == "events":
        return log_path.with_name("events.log"), 1
    if which.startswith("profile-") and valid_profile_id(which[len("profile-"):]):
        return log_path.with_name(f"{which}.txt"), 0
    return None


def make_app(lookup: Lookup, owner_of: OwnerOf, guard: Guard, backups: int,
             max_bytes: int) -> Callable[..., list[bytes]]:
    """The WSGI app serving worker logs found through ``lookup`` to callers ``guard`` lets in."""

    def serve(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        who = guard.principal(environ)  # 401 before anything else
        if environ.get("REQUEST_METHOD", "GET").upper() != "GET":
            return json_response(start_response, 405, {"error": "only GET is allowed"}, [("Allow", "GET")])
        path = (environ.get("PATH_INFO") or "").encode("latin-1").decode("utf-8", "replace")
        match = _ROUTE.match(path)
        if not match:
            return json_response(start_response, 404, {"error": f"no such resource: {path[:200]}"})
        topology_id, port = match.group(1), int(match.group(2))
        missing = f"no worker of {topology_id} runs on port {port} here"
        owner = owner_of(topology_id)
        if owner is None:
            raise ApiError(404, missing, reason="not-found")
        guard.check(who, READ_LOGS, owner, f"the logs of topology {topology_id!r}", missing=missing)
        try:
            query = urllib.parse.parse_qs(environ.get("QUERY_STRING", ""))
            which = (query.get("file") or [""])[0]
            lines = _int_param(query, "lines", 1, MAX_LINES)
            offset = _int_param(query, "offset", 0, 1 << 62)
            inode = _int_param(query, "inode", 0, 1 << 64)
        except ValueError as exc:
            return json_response(start_response, 400, {"error": str(exc)})
        found = lookup(topology_id, port)
        if found is None:
            return json_response(start_response, 404, {"error": missing})
        worker_id, log_path = found
        chosen = worker_file(log_path, which)
        if chosen is None:
            return json_response(start_response, 400, {"error": f"file must be log, events or profile-<id>, "
                                                                f"got {which[:80]!r}"})
        path, kept = chosen
        kept = backups if kept < 0 else kept
        if offset is not None:
            read = read_from(path, offset, max_bytes, inode)
        elif kept == 0 and lines is None:  # a profile: the whole file, within the bound
            read = read_from(path, 0, max_bytes)
        else:
            read = tail(path, kept, lines or DEFAULT_LINES, max_bytes)
        return json_response(start_response, 200, {"worker_id": worker_id, "text": read.text,
                                           "next_offset": read.next_offset, "inode": read.inode,
                                           "truncated": read.truncated})

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        try:
            return serve(environ, start_response)
        except ApiError as exc:  # the guard's 401 / 403 / 404
            return refusal(guard, exc, environ, start_response)

    return app


def fetch_log(host: str, port: int, access: ApiAccess, topology_id: str, worker_port: int, *,
              lines: int | None = None, offset: int | None = None, inode: int | None = None,
              timeout: float = 10.0, file: str | None = None) -> dict[str, Any]:
    """Ask the logviewer at ``host:port`` for a worker's log (or the ``file`` that
    ``worker_file`` names), presenting ``access``'s token (over TLS when it has a CA);
    LogViewerError on failure."""
    params = {k: v for k, v in (("lines", lines), ("offset", offset), ("inode", inode), ("file", file))
              if v is not None}
    url = (f"{access.scheme}://{host}:{port}/logs/{urllib.parse.quote(topology_id, safe='')}/{worker_port}"
           + (f"?{urllib.parse.urlencode(params)}" if params else ""))
    req = urllib.request.Request(url, headers=access.headers())
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=access.ssl_context) as resp:
            data = resp.read()
    except urllib.error.HTTPError as exc:
        with exc:
            body = exc.read()
        try:
            message = json.loads(body)["error"]
        except (ValueError, KeyError, TypeError):
            message = body[:200].decode("utf-8", "replace")
        raise LogViewerError(f"logviewer at {host}:{port} answered {exc.code}: {message}", exc.code) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, ssl.SSLError):
            raise LogViewerError(f"TLS with the logviewer at {host}:{port} failed: {reason} (its certificate "
                                 f"must chain to nimbus.tls.ca.file and name {host}; supervisor.tls.* set "
                                 "on the supervisor)", 0) from None
        raise LogViewerError(f"cannot reach the logviewer at {host}:{port}: {reason}", 0) from None
    try:
        body = json.loads(data)
    except ValueError:
        raise LogViewerError(f"logviewer at {host}:{port} sent a reply that is not JSON", 502) from None
    if not isinstance(body, dict) or not isinstance(body.get("text"), str):
        raise LogViewerError(f"logviewer at {host}:{port} sent a malformed reply", 502)
    return body
