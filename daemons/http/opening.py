"""Opening an accepted connection: its TLS handshake within ``handshake_secs`` of the accept
(a connection that never starts TLS included), and a plain HTTP request on the TLS port told
so with a 400 rather than a failed handshake. The server (``server.py``) gets the streams.
"""
from __future__ import annotations

import asyncio
import re
import socket

from squall.daemons.http.limits import HttpLimits
from squall.daemons.http.refusals import Refusals
from squall.daemons.http.tls_material import TlsMaterial
from squall.daemons.http.wsgi import finish, plain_reply

PLAIN_TO_TLS = "The client sent a plain HTTP request, but this server only speaks HTTPS on this port."
PLAIN_DRAIN_BYTES = 64 * 1024  # of a plain HTTP request read before its 400 (so the close sends FIN, not RST)
PLAIN_DRAIN_SECS = 0.5
_CONTENT_LENGTH = re.compile(rb"(?im)^content-length:[ \t]*(\d{1,9})[ \t]*$")


def _whole_request(seen: bytes) -> bool:
    """Has ``seen`` (the start of a plain HTTP request) its head and its declared body?"""
    head, end, body = seen.partition(b"\r\n\r\n")
    if not end:
        return False
    length = _CONTENT_LENGTH.search(head)
    return len(body) >= (int(length.group(1)) if length else 0)


async def open_streams(sock: socket.socket, remote: str, tls: TlsMaterial | None, limits: HttpLimits,
                       refusals: Refusals) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
    """The connection's streams, TLS done within its deadline; None when refused."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=limits.max_header_bytes, loop=loop)

    def protocol() -> asyncio.StreamReaderProtocol:
        return asyncio.StreamReaderProtocol(reader, loop=loop)

    if tls is None:
        transport, proto = await loop.connect_accepted_socket(protocol, sock)
        return reader, asyncio.StreamWriter(transport, proto, reader, loop)
    deadline = loop.time() + limits.handshake_secs
    try:
        async with asyncio.timeout_at(deadline):
            first = await _peek(sock)
            if first and first != b"\x16":  # not a TLS handshake record: plain HTTP, most likely
                await _refuse_plain(sock, remote, refusals)
                return None
            if not first:
                raise ConnectionError("closed before the TLS handshake")
            transport, proto = await loop.connect_accepted_socket(
                protocol, sock, ssl=tls.context(), ssl_handshake_timeout=max(0.1, deadline - loop.time()))
    except TimeoutError:
        refusals.refuse("tls-handshake", remote=remote, error=f"no TLS handshake within {limits.handshake_secs:g}s")
        return None
    except OSError as exc:  # ssl.SSLError, a reset, the handshake deadline (ConnectionAbortedError)
        refusals.refuse("tls-handshake", remote=remote, error=str(exc)[:300] or type(exc).__name__)
        return None
    return reader, asyncio.StreamWriter(transport, proto, reader, loop)


async def _peek(sock: socket.socket) -> bytes:
    """The connection's first byte, left in the socket."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            return sock.recv(1, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            pass
        ready: asyncio.Future[None] = loop.create_future()
        loop.add_reader(sock.fileno(), finish, ready)
        try:
            await ready
        finally:
            loop.remove_reader(sock.fileno())


async def _refuse_plain(sock: socket.socket, remote: str, refusals: Refusals) -> None:
    """Plain HTTP on the TLS port: a 400 that says so, after reading the request (bounded),
    since closing a socket with unread data resets it and the client would lose the 400."""
    refusals.refuse("plain-http", remote=remote, error="plain HTTP on the TLS port")
    loop = asyncio.get_running_loop()
    seen = b""
    try:
        async with asyncio.timeout(PLAIN_DRAIN_SECS):
            while len(seen) < PLAIN_DRAIN_BYTES and not _whole_request(seen):
                chunk = await loop.sock_recv(sock, PLAIN_DRAIN_BYTES - len(seen))
                if not chunk:
                    break
                seen += chunk
        async with asyncio.timeout(1.0):
            await loop.sock_sendall(sock, plain_reply(400, PLAIN_TO_TLS))
    except (TimeoutError, OSError):
        pass
