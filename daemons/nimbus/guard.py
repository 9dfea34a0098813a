"""The door of squall's HTTP endpoints (nimbus's API, a supervisor's /metrics and logviewer):
who sent a request (bearer token), whether that principal may act, and counted, rate-limited
logging of every refusal. ``ApiError`` is the answer other than 200 they all raise.
"""
from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

import structlog

from squall.daemons.nimbus.auth import ANONYMOUS_ADMIN, Principal, TokenSource, authorize
from squall.daemons.timers import SYSTEM_CLOCK, Clock, Every

log = structlog.get_logger("squall.http")

REFUSAL_LOG_WINDOW_SECS = 10.0
REFUSAL_LOGS_PER_WINDOW = 20


_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
            405: "Method Not Allowed", 409: "Conflict", 411: "Length Required", 413: "Payload Too Large",
            500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable"}

def status_line(code: int) -> str:
    """``"404 Not Found"`` for 404."""
    return f"{code} {_REASONS.get(code, 'Error')}"


def json_response(start_response: Callable[..., Any], code: int, body: Any,
                  headers: Iterable[tuple[str, str]] = ()) -> list[bytes]:
    """Answer ``code`` with ``body`` as compact JSON."""
    data = json.dumps(body, separators=(",", ":")).encode("utf-8")
    start_response(status_line(code), [("Content-Type", "application/json"),
                                       ("Content-Length", str(len(data))), *headers])
    return [data]


def refusal(guard: Guard, exc: ApiError, environ: dict[str, Any],
            start_response: Callable[..., Any]) -> list[bytes]:
    """Answer a refused request (401 or 403): logged within the guard's bound, with the
    ``WWW-Authenticate`` challenge on a 401."""
    guard.log_refusal(method=environ.get("REQUEST_METHOD"), path=environ.get("PATH_INFO"),
                      status=exc.status, error=str(exc), remote=environ.get("REMOTE_ADDR"))
    headers = [("WWW-Authenticate", 'Bearer realm="squall"')] if exc.status == 401 else []
    return json_response(start_response, exc.status, {"error": str(exc)}, headers)


class ApiError(Exception):
    """An answer other than 200: ``status`` and a message, plus extra JSON fields."""

    def __init__(self, status: int, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.extra = extra


class Guard:
    """Authentication of HTTP requests: where the tokens in force come from (None, or a
    source answering None: security is off) and counters of refusals by status."""

    def __init__(self, tokens: TokenSource | None, clock: Clock = SYSTEM_CLOCK) -> None:
        self.tokens = tokens
        self.refused = {401: 0, 403: 0, "connection": 0}
        self._lock = threading.Lock()
        self._window = Every(REFUSAL_LOG_WINDOW_SECS, clock)
        self._logged = 0  # refusals logged in the current window
        self._quiet = 0   # refusals counted but not logged in it

    def log_refusal(self, **fields: Any) -> None:
        """Log a refusal, at most REFUSAL_LOGS_PER_WINDOW per window: a flood of bad requests
        must not become a flood of log lines (the counters keep every one)."""
        with self._lock:
            if self._window.due():
                quiet, self._logged, self._quiet = self._quiet, 0, 0
                if quiet:
                    log.warning("requests refused without a log line", count=quiet,
                                window_secs=REFUSAL_LOG_WINDOW_SECS)
            if self._logged >= REFUSAL_LOGS_PER_WINDOW:
                self._quiet += 1
                return
            self._logged += 1
        log.warning("request refused", **fields)

    def principal(self, environ: dict[str, Any]) -> Principal:
        """Who sent the request; ApiError 401 without a valid bearer token."""
        table = self.tokens.table() if self.tokens is not None else None
        if table is None:
            return ANONYMOUS_ADMIN
        header = environ.get("HTTP_AUTHORIZATION") or ""
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise self.refuse(401, "authentication required: send Authorization: Bearer <token> "
                                   "(squall.token or SQUALL_TOKEN)")
        principal = table.lookup(token.strip())
        if principal is None and self.tokens is not None:
            fresh = self.tokens.recheck()
            principal = fresh.lookup(token.strip()) if fresh is not None else None
        if principal is None:
            raise self.refuse(401, "unknown or revoked token")
        return principal

    def check(self, principal: Principal, action: str, owner: str | None, what: str) -> None:
        """ApiError 403 unless ``principal`` may do ``action``."""
        if not authorize(principal.role, principal.user, action, owner):
            raise self.refuse(403, f"user {principal.user!r} (role {principal.role}) may not {action} {what}")

    def refuse(self, status: int, message: str) -> ApiError:
        with self._lock:
            self.refused[status] += 1
        return ApiError(status, message)

    def counts(self) -> dict[str, int]:
        with self._lock:
            return {"unauthenticated": self.refused[401], "forbidden": self.refused[403],
                    "connection": self.refused["connection"]}

    def server_error(self, msg: str = "", level: int = logging.INFO, traceback: bool = False) -> None:
        """cheroot's error log: a failed TLS handshake or plain HTTP on the TLS port is a
        refused connection (counted, logged within the bound); anything else an error."""
        if traceback or level >= logging.ERROR:
            log.error("HTTP server error", error=msg, exc_info=traceback)
            return
        with self._lock:
            self.refused["connection"] += 1
        self.log_refusal(status="connection", error=msg)
