"""Read a partition's log as Kafka's read_committed isolation defines it, from the log itself.

A read_committed consumer returns a transactional producer's records only once a COMMIT
marker for them is in the log, never those an ABORT marker closes, and none of an open
transaction. A broker tells its consumers which ranges were aborted (the fetch response's
``aborted_transactions``); Tansu 0.6.0, the tests' broker, writes the markers but leaves
that list empty, so librdkafka's read_committed consumer returns aborted records there
(it does stop at an open transaction). This reader asks the broker for the raw record
batches (Fetch v4) and applies the rule to the markers it finds: what a read_committed
consumer of a complete broker would return. Uncompressed batches only (the producers in
the tests do not compress).
"""
from __future__ import annotations

import socket
import struct
from dataclasses import dataclass, field

ABORT, COMMIT = 0, 1


@dataclass
class LogRecord:
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)


@dataclass
class PartitionLog:
    """What the log holds: committed (or non-transactional) records in offset order, and
    counts of records in aborted and still open transactions."""

    committed: list[LogRecord]
    aborted: int
    open: int
    markers: dict[str, int]


class _Reader:
    def __init__(self, data: bytes, pos: int = 0) -> None:
        self.d, self.p = data, pos

    def take(self, fmt: str) -> int:
        v = struct.unpack_from(fmt, self.d, self.p)[0]
        self.p += struct.calcsize(fmt)
        return v

    def raw(self, n: int) -> bytes:
        v = self.d[self.p:self.p + n]
        self.p += n
        return v

    def string(self) -> str:
        n = self.take(">h")
        return "" if n < 0 else self.raw(n).decode()

    def varint(self) -> int:
        shift = result = 0
        while True:
            b = self.d[self.p]
            self.p += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                break
            shift += 7
        return (result >> 1) ^ -(result & 1)  # zigzag

    def vbytes(self) -> bytes | None:
        n = self.varint()
        return None if n < 0 else self.raw(n)


def _fetch(sock: socket.socket, topic: str, partition: int, offset: int, corr: int) -> tuple[int, bytes]:
    """(high watermark, the records bytes) of one Fetch v4 at ``offset``."""
    t = topic.encode()
    body = struct.pack(">iiiib", -1, 500, 1, 8 << 20, 0)  # replica, max wait, min bytes, max bytes, uncommitted
    body += struct.pack(">i", 1) + struct.pack(">h", len(t)) + t
    body += struct.pack(">i", 1) + struct.pack(">iqi", partition, offset, 4 << 20)
    client = b"squall-log-reader"
    head = struct.pack(">hhi", 1, 4, corr) + struct.pack(">h", len(client)) + client
    req = head + body
    sock.sendall(struct.pack(">i", len(req)) + req)
    size = struct.unpack(">i", _recv(sock, 4))[0]
    r = _Reader(_recv(sock, size))
    assert r.take(">i") == corr
    r.take(">i")  # throttle
    assert r.take(">i") == 1 and r.string() == topic and r.take(">i") == 1
    assert r.take(">i") == partition
    err = r.take(">h")
    if err:
        raise RuntimeError(f"fetch {topic}-{partition}@{offset}: Kafka error {err}")
    high = r.take(">q")
    r.take(">q")  # last stable offset
    n = r.take(">i")
    for _ in range(max(0, n)):
        r.take(">q")
        r.take(">q")
    size = r.take(">i")
    return high, (b"" if size < 0 else r.raw(size))


def _recv(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        out += chunk
    return bytes(out)


def read_committed_log(bootstrap: str, topic: str, partition: int, timeout: float = 10.0) -> PartitionLog:
    """Every record of ``topic``-``partition`` as read_committed defines it (see above)."""
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    committed: list[LogRecord] = []
    open_txn: dict[int, list[LogRecord]] = {}  # producer id -> records since its last marker
    aborted = 0
    markers = {"commit": 0, "abort": 0}
    offset, corr, empty = 0, 0, 0
    with socket.create_connection((host, int(port)), timeout) as sock:
        while True:
            corr += 1
            high, data = _fetch(sock, topic, partition, offset, corr)
            r = _Reader(data)
            progressed = False
            while len(data) - r.p >= 61:
                base = r.take(">q")
                length = r.take(">i")
                if len(data) - r.p < length:
                    break  # a partial batch at the end of the response
                end = r.p + length
                r.take(">i")  # leader epoch
                magic = r.take(">b")
                assert magic == 2, f"record batch magic {magic}"
                r.take(">I")  # crc
                attrs = r.take(">h")
                last_delta = r.take(">i")
                r.take(">q")
                r.take(">q")
                pid = r.take(">q")
                r.take(">h")
                r.take(">i")
                count = r.take(">i")
                assert attrs & 0x07 == 0, "compressed batches are not read here"
                txn, control = bool(attrs & 0x10), bool(attrs & 0x20)
                for _ in range(count):
                    r.varint()  # record length
                    r.take(">b")
                    r.varint()  # timestamp delta
                    off = base + r.varint()
                    key = r.vbytes()
                    value = r.vbytes()
                    headers = []
                    for _ in range(r.varint()):
                        name = (r.vbytes() or b"").decode()
                        headers.append((name, r.vbytes()))
                    if off < offset:
                        continue
                    if control:
                        kind = struct.unpack(">hh", key)[1] if key and len(key) >= 4 else -1
                        held = open_txn.pop(pid, [])
                        if kind == COMMIT:
                            committed.extend(held)
                            markers["commit"] += 1
                        else:
                            aborted += len(held)
                            markers["abort"] += 1
                    elif txn:
                        open_txn.setdefault(pid, []).append(LogRecord(off, key, value, headers))
                    else:
                        committed.append(LogRecord(off, key, value, headers))
                r.p = end
                offset = max(offset, base + last_delta + 1)
                progressed = True
            if offset >= high:
                break
            empty = 0 if progressed else empty + 1
            if empty >= 3:
                break  # nothing more comes (a watermark the broker got wrong)
    committed.sort(key=lambda rec: rec.offset)
    return PartitionLog(committed, aborted, sum(len(v) for v in open_txn.values()), markers)
