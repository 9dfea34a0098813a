"""Which TCP sockets of some processes lead to given far ends, read from ``/proc`` directly.

psutil's ``Process.net_connections`` reads both of the process's namespace's TCP tables for
each process it is asked about (each read walks the kernel's whole connection hash: ~2 ms a
table on a 24 GiB host, however few rows it holds) and decodes every row: 4-5 ms of a
supervisor's CPU a worker, every second (a burst the workers' latency felt on two CPUs). The
supervisor asks one question: how many of a worker's sockets lead to ZooKeeper. Here the far
ends are turned into the tables' own hex form once, each namespace's tables (only those of
the ends' families) are read at most once a tick, only matching rows are kept, and a
process's sockets are its fd links' inodes.
"""
from __future__ import annotations

import ipaddress
import os
import struct
from collections.abc import Callable, Collection, Iterable

Endpoint = tuple[str, int]  # (IP address, port)
Row = tuple[str, str]  # a socket's (local, remote) address in the table's hex form


def hex_endpoint(endpoint: Endpoint) -> str | None:
    """``endpoint`` as the kernel writes it in ``/proc/net/tcp[6]``: the address as 32-bit
    words in host byte order, each as 8 hex digits, a colon, the port as 4; None if the address
    is not an IP address."""
    ip, port = endpoint
    try:
        packed = ipaddress.ip_address(ip).packed
    except ValueError:
        return None
    words = struct.unpack(f"={len(packed) // 4}I", packed)
    return "".join(f"{w:08X}" for w in words) + f":{port:04X}"


def matching_rows(lines: Iterable[str], remotes: Collection[str]) -> dict[int, Row]:
    """Socket inode -> (local, remote) of the table rows whose remote end is in ``remotes``
    (hex form); the header and rows that do not parse are skipped."""
    out: dict[int, Row] = {}
    for line in lines:
        fields = line.split()
        if len(fields) < 10 or fields[2] not in remotes:
            continue
        try:
            out[int(fields[9])] = (fields[1], fields[2])
        except ValueError:
            continue
    return out


def socket_inodes(pid: int) -> set[int]:
    """Inodes of the sockets open in process ``pid`` (empty if it is gone or not ours to see)."""
    fd_dir = f"/proc/{pid}/fd"
    out: set[int] = set()
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return out
    for name in names:
        try:
            target = os.readlink(f"{fd_dir}/{name}")
        except OSError:
            continue
        if target.startswith("socket:["):
            try:
                out.add(int(target[8:-1]))
            except ValueError:
                continue
    return out


class SocketsTo:
    """Counts the distinct TCP sockets of some processes whose far end is one of fixed
    ``endpoints`` (a socket two processes share counts once). A namespace's tables are read at
    most once every ``max_age`` seconds: the supervisor asks for each of its workers in a tick,
    and each read walks the kernel's whole connection hash (~2 ms a table on a 24 GiB host,
    however few rows it holds). Only the tables of the endpoints' families are read."""

    def __init__(self, endpoints: Collection[Endpoint], monotonic: Callable[[], float], max_age: float = 0.25) -> None:
        hexes = {h for h in map(hex_endpoint, endpoints) if h is not None}
        self.remotes = frozenset(hexes)
        # An IPv4 end is 8 hex digits and a colon; an IPv6 end 32 and a colon.
        self.tables = tuple(t for t, width in (("tcp", 13), ("tcp6", 37)) if any(len(h) == width for h in hexes))
        self.monotonic = monotonic
        self.max_age = max_age
        self._rows: dict[int, tuple[float, dict[int, Row]]] = {}  # namespace inode -> (read at, rows)

    def count(self, pids: Iterable[int]) -> int:
        if not self.remotes:
            return 0
        now = self.monotonic()
        self._rows = {ns: kept for ns, kept in self._rows.items() if now - kept[0] < self.max_age}
        found: set[Row] = set()
        for pid in pids:
            try:
                namespace = os.stat(f"/proc/{pid}/ns/net").st_ino
            except OSError:
                continue
            kept = self._rows.get(namespace)
            if kept is None:
                kept = self._rows[namespace] = (now, self._read(pid))
            rows = kept[1]
            if rows:
                found.update(rows[inode] for inode in socket_inodes(pid) if inode in rows)
        return len(found)

    def _read(self, pid: int) -> dict[int, Row]:
        rows: dict[int, Row] = {}
        for table in self.tables:
            try:
                with open(f"/proc/{pid}/net/{table}", encoding="ascii", errors="replace") as fh:
                    rows.update(matching_rows(fh, self.remotes))
            except OSError:
                continue
        return rows

