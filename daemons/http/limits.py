"""The deadlines and bounds of the daemons' HTTP servers, from the configuration."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MAX_HEADER_BYTES = 64 * 1024  # request line and headers; a bearer token is under 100 bytes


@dataclass(frozen=True)
class HttpLimits:
    """``handshake_secs``: a TLS handshake, from accept to its end (a connection that never
    starts TLS included); ``header_secs``: the request line and headers, all of them;
    ``body_read_secs``: each read of the body (and each write of the reply), and the grace
    before ``body_min_rate`` (bytes per second) counts: a body must have brought
    ``body_min_rate`` bytes for every second past that grace since its first read;
    ``request_secs``: the whole request, head and body, from its first byte;
    ``reply_secs``: the whole reply, from its first byte to the client taking its last;
    ``max_connections``: connections open at once, past which new ones are closed at once;
    ``max_connections_per_address``: the same for one client address (an IPv6 /64)."""

    handshake_secs: float = 5.0
    header_secs: float = 10.0
    body_read_secs: float = 10.0
    body_min_rate: int = 32 * 1024
    request_secs: float = 300.0
    reply_secs: float = 120.0
    max_connections: int = 512
    max_connections_per_address: int = 64
    max_header_bytes: int = MAX_HEADER_BYTES

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any]) -> HttpLimits:
        return cls(handshake_secs=float(conf["squall.http.handshake.timeout.secs"]),
                   header_secs=float(conf["squall.http.header.timeout.secs"]),
                   body_read_secs=float(conf["squall.http.body.read.timeout.secs"]),
                   body_min_rate=int(conf["squall.http.body.min.rate.bytes"]),
                   request_secs=float(conf["squall.http.request.timeout.secs"]),
                   reply_secs=float(conf["squall.http.reply.timeout.secs"]),
                   max_connections=int(conf["squall.http.max.connections"]),
                   max_connections_per_address=int(conf["squall.http.max.connections.per.address"]))
