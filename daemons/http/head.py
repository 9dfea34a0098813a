"""A request's head (request line and header fields), parsed strictly, and how its body is
framed: plain functions of bytes, tested without sockets.

Strict where HTTP/1.1 (RFC 9112) lets a server refuse: CRLF line ends only, no whitespace
before a field's colon, no obs-fold, no control characters, one framing (Content-Length or
chunked, never both, never two different lengths). Anything else is a ``HeadError`` with the
status to answer (400, 431, 501, 505) and a line naming the problem.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from squall.errors import SquallError

MAX_FIELDS = 100
_TOKEN = re.compile(rb"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_TARGET = re.compile(rb"^/[\x21-\x7e]*$")  # origin-form only: no proxy forms, no spaces or controls
_VERSION = re.compile(rb"^HTTP/(\d)\.(\d)$")
_FIELD_VALUE_BAD = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")  # HT, SP and obs-text are allowed
_LENGTH = re.compile(rb"^[0-9]{1,19}$")


class HeadError(SquallError, ValueError):
    """The head cannot be served; ``status`` is what to answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Head:
    method: str
    target: str   # as sent: path and query, %-encoded
    version: str  # "HTTP/1.1" or "HTTP/1.0"
    fields: tuple[tuple[str, str], ...]  # (lower-case name, value) in order

    def get(self, name: str) -> str | None:
        """The field's values joined by ", " (RFC 9110 5.3), or None when absent."""
        values = [v for k, v in self.fields if k == name]
        return ", ".join(values) if values else None


@dataclass(frozen=True)
class Framing:
    """How the body arrives: ``length`` bytes, or ``chunked``; neither: no body."""

    length: int | None = None
    chunked: bool = False

    @property
    def empty(self) -> bool:
        return not self.chunked and not self.length


def parse_head(data: bytes) -> Head:
    """``data`` is the head up to and including the blank line that ends it."""
    if not data.endswith(b"\r\n\r\n"):
        raise HeadError(400, "request head does not end with CRLF CRLF")
    lines = data[:-4].split(b"\r\n")
    if any(b"\n" in line or b"\r" in line for line in lines):
        raise HeadError(400, "request head has a bare CR or LF (lines must end with CRLF)")
    parts = lines[0].split(b" ")
    if len(parts) != 3:
        raise HeadError(400, "malformed request line (expected METHOD TARGET HTTP/1.1)")
    method, target, version = parts
    if not _TOKEN.match(method):
        raise HeadError(400, "malformed request method")
    match = _VERSION.match(version)
    if not match:
        raise HeadError(400, "malformed HTTP version in the request line")
    if match.group(1) != b"1":
        raise HeadError(505, f"HTTP version {version.decode('ascii')} is not supported (HTTP/1.1 is)")
    if not _TARGET.match(target):
        raise HeadError(400, "malformed request target (expected a path starting with /)")
    if len(lines) - 1 > MAX_FIELDS:
        raise HeadError(431, f"more than {MAX_FIELDS} header fields")
    fields = []
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not _TOKEN.match(name):
            raise HeadError(400, "malformed header field (expected Name: value, no space before the colon)")
        value = value.strip(b" \t")
        if _FIELD_VALUE_BAD.search(value):
            raise HeadError(400, f"header field {name.decode('ascii')} holds a control character")
        fields.append((name.decode("ascii").lower(), value.decode("latin-1")))
    return Head(method.decode("ascii"), target.decode("ascii"), f"HTTP/1.{match.group(2).decode()}",
                tuple(fields))


def keeps_alive(head: Head) -> bool:
    """May the connection serve another request after this one? HTTP/1.1 unless the client
    says ``Connection: close`` (HTTP/1.0's keep-alive is not offered)."""
    if head.version != "HTTP/1.1":
        return False
    tokens = {t.strip().lower() for t in (head.get("connection") or "").split(",")}
    return "close" not in tokens


def framing(head: Head) -> Framing:
    """The body's framing; HeadError when it is ambiguous or unsupported."""
    coding = head.get("transfer-encoding")
    lengths = [v for k, v in head.fields if k == "content-length"]
    if coding is not None:
        if lengths:
            raise HeadError(400, "both Content-Length and Transfer-Encoding are set")
        if head.version == "HTTP/1.0":
            raise HeadError(400, "Transfer-Encoding in an HTTP/1.0 request")
        if coding.strip().lower() != "chunked":
            raise HeadError(501, f"Transfer-Encoding {coding[:40]!r} is not supported (only chunked)")
        return Framing(chunked=True)
    values = {v.strip() for value in lengths for v in value.split(",")}
    if not values:
        return Framing()
    if len(values) > 1:
        raise HeadError(400, "conflicting Content-Length values")
    value = values.pop().encode("latin-1")
    if not _LENGTH.match(value):
        raise HeadError(400, f"bad Content-Length {value[:40].decode('latin-1')!r}")
    return Framing(length=int(value))


def parse_chunk_size(line: bytes) -> int:
    """The size in a chunk's size line (without its CRLF); extensions are ignored."""
    size = line.split(b";", 1)[0].strip(b" \t")
    if not size or len(size) > 16 or any(c not in b"0123456789abcdefABCDEF" for c in size):
        raise HeadError(400, "malformed chunk size in a chunked body")
    return int(size, 16)
