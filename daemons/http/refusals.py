"""What a daemon's HTTP servers refused, by reason: every refusal counted (the
``squall_http_refused_total{reason}`` series), and logged at a bounded rate, so a flood of
bad requests or broken connections never becomes a flood of log lines.
"""
from __future__ import annotations

import threading
from typing import Any

import structlog

from squall.daemons.metrics.families import Series
from squall.daemons.timers import SYSTEM_CLOCK, Clock, Every

log = structlog.get_logger("squall.http")

LOG_WINDOW_SECS = 10.0
LOGS_PER_WINDOW = 20

# reason -> what it means (docs/operations/security.md lists them too)
REASONS = {
    "unauthenticated": "no valid bearer token (401)",
    "forbidden": "a token without the right (403)",
    "not-found": "no such resource, or a topology the caller may not see: answered alike (404)",
    "tls-handshake": "a TLS handshake failed or was not finished within its deadline",
    "plain-http": "plain HTTP sent to a TLS port (400)",
    "header-timeout": "the request line and headers did not arrive within their deadline (408)",
    "body-timeout": "a read of the body did not get its bytes within its deadline (408)",
    "slow-body": "a body slower than squall.http.body.min.rate.bytes per second (408)",
    "request-timeout": "a request (head, body, its wait for a thread) not done within squall.http.request.timeout.secs "
                       "(408, 503)",
    "malformed": "a malformed request line, header or chunked body (400, 501, 505)",
    "too-large": "headers or body above their limit (431, 413)",
    "capacity": "a connection over the server's connection limit, closed at once",
    "per-address": "a connection over the limit for one client address, closed at once",
    "reply-timeout": "the client did not take a part of the reply within the deadline of a read, or the whole "
                     "reply within squall.http.reply.timeout.secs",
    "reset": "the client closed or reset the connection in the middle of a request",
    "error": "the server failed on a request (500); logged with its stack, within the same bound",
}


class Refusals:
    """Counters by reason, and log lines at most ``LOGS_PER_WINDOW`` per ``LOG_WINDOW_SECS``
    (a line then says how many went unlogged). Shared by a daemon's servers and its guard."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self._counts = dict.fromkeys(REASONS, 0)
        self._lock = threading.Lock()
        self._window = Every(LOG_WINDOW_SECS, clock)
        self._logged = 0  # lines logged in the current window
        self._quiet = 0   # refusals counted but not logged in it

    def refuse(self, reason: str, **fields: Any) -> None:
        """Count a refusal of ``reason`` and log it within the bound."""
        if reason not in REASONS:
            raise ValueError(f"unknown refusal reason {reason!r}")
        with self._lock:
            self._counts[reason] += 1
            if not self._may_log():
                return
        if reason == "error":
            log.error("request failed in the server", **fields)
        else:
            log.warning("request refused", reason=reason, **fields)

    def _may_log(self) -> bool:
        if self._window.due():
            quiet, self._logged, self._quiet = self._quiet, 0, 0
            if quiet:
                log.warning("requests refused without a log line", count=quiet, window_secs=LOG_WINDOW_SECS)
        if self._logged >= LOGS_PER_WINDOW:
            self._quiet += 1
            return False
        self._logged += 1
        return True

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def series(self) -> Series:
        out = Series()
        for reason, n in self.counts().items():
            out.add("squall_http_refused", (reason,), n)
        return out
