"""The door of squall's HTTP endpoints (nimbus's API, a supervisor's /metrics and logviewer):
who sent a request (bearer token), whether that principal may act, and counted, rate-limited
logging of every refusal (``Refusals``). ``ApiError`` is the answer other than 200 they all raise.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from squall.daemons.http.refusals import Refusals
from squall.daemons.nimbus.auth import ANONYMOUS_ADMIN, Principal, TokenSource, decide
from squall.errors import SquallError

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
    """Answer a refused request (``exc.reason`` set: 401, 403, the 404 that hides a topology,
    a malformed or oversized body): counted and logged within the bound, with the
    ``WWW-Authenticate`` challenge on a 401."""
    guard.refusals.refuse(exc.reason or "forbidden", method=environ.get("REQUEST_METHOD"),
                          path=str(environ.get("PATH_INFO"))[:200], status=exc.status,
                          error=exc.detail or str(exc), remote=environ.get("REMOTE_ADDR"))
    headers = [("WWW-Authenticate", 'Bearer realm="squall"')] if exc.status == 401 else []
    return json_response(start_response, exc.status, {"error": str(exc)}, headers)


class ApiError(SquallError):
    """An answer other than 200: ``status`` and a message, plus extra JSON fields. ``reason``
    is set on refusals (the counter they count in, see ``squall.daemons.http.refusals``);
    ``detail`` is what the log says instead of the message (never sent)."""

    def __init__(self, status: int, message: str, *, reason: str | None = None, detail: str | None = None,
                 **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.detail = detail
        self.extra = extra


class Guard:
    """Authentication and authorization of HTTP requests: where the tokens in force come from
    (None, or a source answering None: security is off) and where refusals are counted."""

    def __init__(self, tokens: TokenSource | None, refusals: Refusals) -> None:
        self.tokens = tokens
        self.refusals = refusals

    def principal(self, environ: dict[str, Any]) -> Principal:
        """Who sent the request; ApiError 401 without a valid bearer token."""
        table = self.tokens.table() if self.tokens is not None else None
        if table is None:
            return ANONYMOUS_ADMIN
        header = environ.get("HTTP_AUTHORIZATION") or ""
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise ApiError(401, "authentication required: send Authorization: Bearer <token> "
                                "(squall.token or SQUALL_TOKEN)", reason="unauthenticated")
        principal = table.lookup(token.strip())
        if principal is None and self.tokens is not None:
            fresh = self.tokens.recheck()
            principal = fresh.lookup(token.strip()) if fresh is not None else None
        if principal is None:
            raise ApiError(401, "unknown or revoked token", reason="unauthenticated")
        return principal

    def check(self, principal: Principal, action: str, owner: str | None, what: str,
              missing: str | None = None) -> None:
        """ApiError unless ``principal`` may do ``action``: 403, or 404 with the text
        ``missing`` (what a topology that does not exist is answered) when ``owner``'s topology
        is one the principal may not even see, so its name gives nothing away."""
        status = decide(principal.role, principal.user, action, owner)
        if status == 200:
            return
        if status == 404 and missing is not None:
            raise ApiError(404, missing, reason="not-found",
                           detail=f"user {principal.user!r} may not see {what}: answered as missing")
        raise ApiError(403, f"user {principal.user!r} (role {principal.role}) may not {action} {what}",
                       reason="forbidden")
