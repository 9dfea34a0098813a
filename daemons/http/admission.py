"""Who gets a connection and who gets a thread, per client address: plain bookkeeping for the
HTTP server's event loop, tested without sockets.

Connections: at most ``max_connections`` in all and ``max_per_address`` from one address,
so one host's idle sockets cannot take every connection from the others. An IPv6 client is
counted by its /64 (a host holds a whole /64 as easily as one address); an IPv4-mapped IPv6
address counts as its IPv4 address.

Threads: a complete request waits on the loop, costing no thread, until it may run. At most
``per_address`` requests of one address run at once, and requests with a body at most
``with_body``: the remaining threads always serve bodiless requests (a status, a list), so
uploads trickling in, or replies a client does not take, cannot hold them all.
"""
from __future__ import annotations

import ipaddress
from collections import Counter


def address_key(address: str) -> str:
    """What ``address`` counts as: itself (IPv4), its /64 (IPv6), its IPv4 when mapped."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


def thread_shares(threads: int) -> tuple[int, int]:
    """(requests of one address, requests with a body) that may run at once on ``threads``:
    a quarter of them (two at least) for one address; all but a quarter (one at least) for
    requests with a body."""
    return min(threads, max(2, threads // 4)), max(1, threads - max(1, threads // 4))


class Admission:
    """Counts of open connections and running requests, by address key."""

    def __init__(self, max_connections: int, max_per_address: int, threads: int) -> None:
        self.max_connections, self.max_per_address = max_connections, max_per_address
        self.per_address, self.with_body = thread_shares(threads)
        self._conns: Counter[str] = Counter()
        self._running: Counter[str] = Counter()
        self._bodies = 0

    # -- connections -------------------------------------------------------------------
    @property
    def connections(self) -> int:
        return sum(self._conns.values())

    def connect(self, key: str) -> str | None:
        """Admit a new connection from ``key`` (counted), or the refusal reason."""
        if self.connections >= self.max_connections:
            return "capacity"
        if self._conns[key] >= self.max_per_address:
            return "per-address"
        self._conns[key] += 1
        return None

    def disconnect(self, key: str) -> None:
        self._conns[key] -= 1
        if self._conns[key] <= 0:
            del self._conns[key]

    # -- requests in threads ------------------------------------------------------------
    def may_run(self, key: str, body: bool) -> bool:
        return self._running[key] < self.per_address and (not body or self._bodies < self.with_body)

    def run(self, key: str, body: bool) -> None:
        self._running[key] += 1
        self._bodies += body

    def ran(self, key: str, body: bool) -> None:
        self._running[key] -= 1
        if self._running[key] <= 0:
            del self._running[key]
        self._bodies -= body
