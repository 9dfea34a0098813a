"""The daemons' HTTP server on the wire: a real ``HttpServer`` in this process, a small WSGI
application, and raw sockets doing what hostile or broken clients do. Each case checks the
answer a client gets, that the refusal is counted by its reason, and that the server still
serves the next request.
"""
from __future__ import annotations

import http.client
import socket
import ssl
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from squall.daemons.http.body import BodyError
from squall.daemons.http.limits import HttpLimits
from squall.daemons.http.refusals import Refusals
from squall.daemons.http.server import HttpServer
from squall.daemons.http.tls_material import TlsMaterial, server_context
from squall.daemons.nimbus.credentials import create
from squall.testing.waiting import wait_for

FAST = HttpLimits(handshake_secs=0.5, header_secs=0.5, body_read_secs=0.5, max_connections=8)


def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    """``/echo`` answers with the body it read (413 past 1000 bytes, what a body error says
    otherwise); ``/deny`` answers 401 without reading; anything else says hello."""
    path = environ["PATH_INFO"]
    if path == "/deny":
        start_response("401 Unauthorized", [("Content-Length", "2")])
        return [b"no"]
    if path == "/echo":
        stream, got = environ["wsgi.input"], b""
        try:
            while piece := stream.read(100):
                got += piece
                if len(got) > 1000:
                    start_response("413 Payload Too Large", [("Content-Length", "3")])
                    return [b"big"]
        except BodyError as exc:
            start_response(f"{exc.status} Refused", [("Content-Length", str(len(str(exc))))])
            return [str(exc).encode()]
        start_response("200 OK", [("Content-Length", str(len(got)))])
        return [got]
    if path == "/crash":
        raise RuntimeError("the application failed")
    body = f"hello {environ['REQUEST_METHOD']} {path}".encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return create(tmp_path_factory.mktemp("tls"))


def serve(tls_files: Any = None, limits: HttpLimits = FAST) -> tuple[HttpServer, Refusals]:
    refusals = Refusals()
    material = None
    if tls_files is not None:
        cert, key = str(tls_files.cert_file), str(tls_files.key_file)
        material = TlsMaterial((cert, key), lambda: server_context(cert, key), "test TLS")
    server = HttpServer(app, "127.0.0.1", 0, max_body=1 << 20, refusals=refusals, limits=limits, tls=material,
                        name="test", threads=2)
    server.start()
    return server, refusals


@pytest.fixture
def plain() -> Iterator[tuple[HttpServer, Refusals]]:
    server, refusals = serve()
    yield server, refusals
    server.stop()


@pytest.fixture
def tls(tls_files: Any) -> Iterator[tuple[HttpServer, Refusals, ssl.SSLContext]]:
    server, refusals = serve(tls_files)
    yield server, refusals, ssl.create_default_context(cafile=str(tls_files.ca_file))
    server.stop()


def exchange(port: int, data: bytes, timeout: float = 5.0) -> bytes:
    """Send ``data`` on a plain connection; everything the server sends until it closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
        return out


def status_of(reply: bytes) -> int:
    return int(reply.split(b" ", 2)[1])


def get(port: int, path: str = "/", ctx: ssl.SSLContext | None = None) -> tuple[int, bytes]:
    conn = (http.client.HTTPSConnection("127.0.0.1", port, timeout=5, context=ctx) if ctx
            else http.client.HTTPConnection("127.0.0.1", port, timeout=5))
    try:
        conn.request("GET", path)
        reply = conn.getresponse()
        return reply.status, reply.read()
    finally:
        conn.close()


@pytest.mark.parametrize("request_bytes, status, reason", [
    (b"GET / HTTP/1.1\r\nHost : x\r\n\r\n", 400, "malformed"),
    (b"GET / HTTP/1.1\r\nHost: x\nY: z\r\n\r\n", 400, "malformed"),  # a bare LF
    (b"POST /echo HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\nabc", 400, "malformed"),
    (b"POST /echo HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 501, "malformed"),
    (b"GET / HTTP/3.0\r\n\r\n", 505, "malformed"),
    (b"GET / HTTP/1.1\r\nX: " + b"a" * 70_000 + b"\r\n\r\n", 431, "too-large"),
    (b"POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n", 400, "malformed"),
    (b"POST /echo HTTP/1.1\r\nContent-Length: 5\r\n\r\nab", 408, "body-timeout"),
])
def test_a_bad_request_gets_its_status_and_is_counted(plain, request_bytes, status, reason):
    server, refusals = plain
    reply = exchange(server.port, request_bytes)
    assert status_of(reply) == status, reply[:300]
    wait_for(lambda: refusals.counts()[reason] == 1, timeout=5, what=f"a {reason} refusal counted")
    assert get(server.port) == (200, b"hello GET /")


def test_bodies_are_read_against_their_limit_and_answers_survive(plain):
    server, refusals = plain
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in (b"hello ", b"world")) + b"0\r\n\r\n"
    reply = exchange(server.port, b"POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                     + chunked)
    assert reply.startswith(b"HTTP/1.1 200 ") and reply.endswith(b"\r\n\r\nhello world")
    assert b"Connection: close" in reply
    big = exchange(server.port, b"POST /echo HTTP/1.1\r\nContent-Length: 5000\r\n\r\n" + b"x" * 5000)
    assert status_of(big) == 413  # the application's limit, the rest of the body drained
    head = exchange(server.port, b"HEAD /x HTTP/1.1\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ") and head.endswith(b"\r\n\r\n")
    denied = exchange(server.port, b"POST /deny HTTP/1.1\r\nContent-Length: 100000\r\n\r\n" + b"x" * 100000)
    assert status_of(denied) == 401  # a body nobody read does not cost the client its answer
    crash = exchange(server.port, b"GET /crash HTTP/1.1\r\n\r\n")
    assert status_of(crash) == 500 and b"failed" not in crash
    assert refusals.counts()["error"] == 1


def test_a_connection_serves_requests_one_after_another(tls):
    server, refusals, ctx = tls
    conn = http.client.HTTPSConnection("127.0.0.1", server.port, timeout=5, context=ctx)
    try:
        for i in range(3):
            conn.request("POST", "/echo", body=b"x" * i)
            reply = conn.getresponse()
            assert (reply.status, reply.read()) == (200, b"x" * i)
            if i == 0:
                sock = conn.sock
            assert conn.sock is sock  # the same TLS connection
        conn.request("GET", "/deny", body=b"unread")  # a body left unread ends the connection
        reply = conn.getresponse()
        assert reply.status == 401 and reply.getheader("Connection") == "close"
        reply.read()
    finally:
        conn.close()
    idle = ctx.wrap_socket(socket.create_connection(("127.0.0.1", server.port), timeout=5), server_hostname="127.0.0.1")
    idle.sendall(b"GET / HTTP/1.1\r\n\r\n")
    got = b""
    while not got.endswith(b"hello GET /"):
        got += idle.recv(1000)
    assert idle.recv(1000) == b""  # kept, then closed once idle past the head deadline
    idle.close()
    assert sum(refusals.counts().values()) == 0  # none of that is a refusal


def test_parallel_requests_each_get_their_own_whole_answer():
    server, refusals = serve(limits=HttpLimits())

    def client(k: int) -> list[tuple[int, bytes]]:
        return [get(server.port, f"/c{k}/r{i}") for i in range(40)]

    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(client, range(6)))
    server.stop()
    for k, got in enumerate(answers):
        assert got == [(200, f"hello GET /c{k}/r{i}".encode()) for i in range(40)]
    assert sum(refusals.counts().values()) == 0, refusals.counts()


def test_expect_continue_sends_the_body_only_once_the_application_reads_it(plain):
    server, _ = plain
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(b"POST /echo HTTP/1.1\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
        assert sock.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(b"data")
        reply = b""
        while chunk := sock.recv(1000):
            reply += chunk
        assert reply.startswith(b"HTTP/1.1 200 ") and reply.endswith(b"\r\n\r\ndata")
    denied = exchange(server.port, b"POST /deny HTTP/1.1\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
    assert status_of(denied) == 401 and b"100 Continue" not in denied


def test_slow_and_idle_connections_are_cut_off_at_their_deadlines(tls):
    server, refusals, ctx = tls
    idle = socket.create_connection(("127.0.0.1", server.port), timeout=5)  # never starts TLS
    slow = ctx.wrap_socket(socket.create_connection(("127.0.0.1", server.port), timeout=5),
                           server_hostname="127.0.0.1")
    slow.sendall(b"GET / HTTP/1.1\r\n")  # and no more
    start = time.monotonic()
    assert idle.recv(100) == b""  # closed
    assert slow.recv(1000).startswith(b"HTTP/1.1 408 ")
    assert time.monotonic() - start < 3
    idle.close()
    slow.close()
    wait_for(lambda: refusals.counts()["tls-handshake"] == 1 and refusals.counts()["header-timeout"] == 1,
             timeout=5, what=f"both counted ({refusals.counts()})")
    assert get(server.port, ctx=ctx) == (200, b"hello GET /")


def test_plain_http_on_the_tls_port_is_told_so(tls):
    server, refusals, ctx = tls
    # What curl sends, with a body too: the 400 arrives whole (closing with the request unread
    # would reset the connection and lose it).
    for raw in (b"GET /x HTTP/1.1\r\nHost: x\r\nUser-Agent: curl/8\r\nAccept: */*\r\n\r\n",
                b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 30000\r\n\r\n" + b"x" * 30000):
        reply = exchange(server.port, raw)
        assert status_of(reply) == 400 and b"this server only speaks HTTPS on this port" in reply
    assert refusals.counts()["plain-http"] == 2
    with pytest.raises(ssl.SSLError):  # a client that trusts another CA
        get(server.port, ctx=ssl.create_default_context())
    wait_for(lambda: refusals.counts()["tls-handshake"] == 1, timeout=5, what="the failed handshake counted")
    assert refusals.counts()["plain-http"] == 2
    assert get(server.port, ctx=ctx) == (200, b"hello GET /")


def test_connections_past_the_limit_are_closed_at_once():
    server, refusals = serve(limits=HttpLimits(header_secs=30, max_connections=8))
    held = [socket.create_connection(("127.0.0.1", server.port), timeout=5) for _ in range(8)]
    try:
        wait_for(lambda: _closed_at_once(server.port), timeout=5, what="a connection over the limit closed at once")
        assert refusals.counts()["capacity"] >= 1
        for sock in held[:2]:  # two of them leave: room for real requests again
            sock.close()
        wait_for(lambda: _served(server.port), timeout=5, what="serving again once some left")
    finally:
        for sock in held:
            sock.close()
        server.stop()


def _served(port: int) -> bool:
    try:
        return get(port)[0] == 200
    except OSError:
        return False


def _closed_at_once(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\n\r\n")
        try:
            return sock.recv(100) == b""
        except ConnectionResetError:
            return True


def test_stop_ends_open_connections_promptly(tls_files):
    server, _ = serve(tls_files, HttpLimits())
    idle = [socket.create_connection(("127.0.0.1", server.port), timeout=5) for _ in range(20)]
    start = time.monotonic()
    server.stop()
    assert time.monotonic() - start < 5 and not server.alive
    for sock in idle:
        sock.close()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", server.port), timeout=2)
